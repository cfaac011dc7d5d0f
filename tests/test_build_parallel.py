"""Large trees compile on every core and are staged while they compile: the output must not depend on it."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest
from click.testing import CliRunner

import generator.build
from generator.cli import main

CLUSTER = """name = "eight"
[env]
NCCL_SOCKET_IFNAME = "enp1s0f0np0"
""" + "".join(f'[[nodes]]\nname = "n{i}"\naddress = "10.0.0.{i + 1}"\ncontext = "n{i}"\n' for i in range(8))


def recipe(i: int) -> str:
    nodes = 8 if i % 3 else 1
    engine = "sglang" if i % 5 == 0 else "vllm"
    return (f'engine = "{engine}"\ndocker_image = "example/engine:{i}"\nmodel = "org/model-{i}"\n'
            f'required_nodes = {nodes}\ntensor_parallel_size = {nodes}\n'
            f'args = ["--served-model-name", "m{i}", "--max-model-len", "{4096 * (i + 1)}"]\n'
            f'[env]\nVALUE = "$HOME and {i}"\n')


@pytest.fixture
def tree(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "cluster.toml").write_text(CLUSTER)
    for i in range(generator.build.PARALLEL_FROM + 6):
        folder = tmp_path / "recipes" / f"r{i:03d}"
        folder.mkdir(parents=True)
        (folder / "recipe.toml").write_text(recipe(i))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def build(*args: str):
    result = CliRunner().invoke(main, ["build", *args])
    assert "Traceback" not in result.output
    return result


def same_tree(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.diff_files or cmp.funny_files:
        return False
    return all(same_tree(a / d, b / d) for d in cmp.common_dirs)


def test_parallel_and_serial_builds_are_byte_identical(tree: Path, monkeypatch):
    assert build("--out", "parallel").exit_code == 0
    monkeypatch.setattr(generator.build, "PARALLEL_FROM", 10 ** 6)
    assert build("--out", "serial").exit_code == 0
    files = list((tree / "serial").rglob("*.yaml"))
    count = len(list((tree / "recipes").iterdir()))
    assert len(files) == sum(9 if i % 3 else 2 for i in range(count))  # 8 nodes + stack, or 1 node + stack
    assert same_tree(tree / "parallel", tree / "serial")
    assert build("--out", "parallel", "--check").exit_code == 0


def test_one_broken_recipe_in_a_large_tree_writes_nothing(tree: Path):
    broken = tree / "recipes" / "r017" / "recipe.toml"
    broken.write_text(broken.read_text().replace('"--max-model-len"', '"--node-rank", "3", "--max-model-len"'))
    result = build("--out", "fresh")
    assert result.exit_code == 1
    assert "recipes/r017/recipe.toml:" in result.stderr and "--node-rank" in result.stderr
    assert not (tree / "fresh").exists()  # a failed first build leaves no out/ at all

    broken.write_text(recipe(17))
    assert build("--out", "kept").exit_code == 0
    before = {p: p.read_bytes() for p in (tree / "kept").rglob("*") if p.is_file()}
    broken.write_text(broken.read_text().replace('"--max-model-len"', '"--node-rank", "3", "--max-model-len"'))
    (tree / "recipes" / "r003" / "recipe.toml").write_text(recipe(3).replace("m3", "renamed"))
    assert build("--out", "kept").exit_code == 1
    after = {p: p.read_bytes() for p in (tree / "kept").rglob("*") if p.is_file()}
    assert after == before  # r003's good change is not written either: all or nothing
