"""The CLI never loses a user's file, never half-writes out/, and answers bad paths with one line and exit 1.
Found by review; each test reproduces what once went wrong."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import generator.output
from generator.cli import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    shutil.copy(ROOT / "cluster.toml", tmp_path / "cluster.toml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit), \
        result.output
    return result


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_build_refuses_an_out_dir_holding_the_sources(project: Path):
    before = tree(project / "recipes")
    for out in ("recipes", ".", "recipes/qwen3-coder-30b-a3b-fp8"):
        result = run("build", "--out", out)
        assert result.exit_code == 1 and "output folder" in result.stderr, result.output
    assert tree(project / "recipes") == before


def test_a_users_file_in_an_out_folder_stops_the_build_and_survives(project: Path):
    assert run("build").exit_code == 0
    notes = project / "out" / "glm-4-5-air-sglang" / "NOTES.md"
    notes.write_text("my notes")
    recipe = project / "recipes" / "glm-4-5-air-sglang" / "recipe.toml"
    recipe.write_text(recipe.read_text().replace('"--context-length", "131072"', '"--context-length", "65536"'))
    result = run("build")
    assert result.exit_code == 1
    assert "out/glm-4-5-air-sglang/NOTES.md: error: was not written by recipegen" in result.stderr
    assert notes.read_text() == "my notes"
    # a folder of someone else's where a recipe's output would go
    (project / "mine" / "qwen3-coder-30b-a3b-fp8").mkdir(parents=True)
    (project / "mine" / "qwen3-coder-30b-a3b-fp8" / "data.txt").write_text("x")
    assert run("build", "--out", "mine").exit_code == 1
    assert (project / "mine" / "qwen3-coder-30b-a3b-fp8" / "data.txt").read_text() == "x"


def test_a_recipe_named_twice_is_built_once(project: Path):
    result = run("build", "glm-4-5-air-sglang", "recipes/glm-4-5-air-sglang/", "--out", "o3")
    assert result.exit_code == 0, result.output
    assert "3 files for 1 recipe(s)" in result.stdout
    assert sorted(tree(project / "o3")) == ["glm-4-5-air-sglang/spark1/compose.yaml",
                                            "glm-4-5-air-sglang/spark2/compose.yaml", "glm-4-5-air-sglang/stack.yaml"]


def test_two_recipes_with_one_id_are_an_error(project: Path, tmp_path: Path):
    other = tmp_path / "elsewhere" / "glm-4-5-air-sglang"
    shutil.copytree(project / "recipes" / "glm-4-5-air-sglang", other)
    result = run("build", "glm-4-5-air-sglang", str(other / "recipe.toml"), "--out", "o4")
    assert result.exit_code == 1 and "both would write out/glm-4-5-air-sglang" in result.stderr
    assert not (project / "o4").exists()


def test_a_failed_swap_puts_every_folder_back(project: Path, monkeypatch):
    assert run("build").exit_code == 0
    before = tree(project / "out")
    for rid in ("glm-4-5-air-sglang", "qwen3-coder-30b-a3b-fp8"):
        recipe = project / "recipes" / rid / "recipe.toml"
        recipe.write_text(recipe.read_text().replace('"--port"', '"--max-num-seqs", "4", "--port"'))
    real_replace, calls = os.replace, []

    def flaky_replace(src, dst):  # the fourth rename fails: two recipes half-way through the swap
        calls.append((src, dst))
        if len(calls) == 4:
            raise PermissionError(13, "Permission denied", str(src))
        return real_replace(src, dst)

    monkeypatch.setattr(generator.output.os, "replace", flaky_replace)
    result = run("build")
    assert result.exit_code == 1 and "out/ is as it was" in result.stderr
    monkeypatch.setattr(generator.output.os, "replace", real_replace)
    assert tree(project / "out") == before
    assert not [p for p in (project / "out").iterdir() if p.name.startswith(".recipegen")]


@pytest.mark.parametrize("args", [["build", "--out", "cluster.toml"], ["schema", "--out", "cluster.toml"],
                                  ["build", "--out", "cluster.toml/sub"]])
def test_bad_output_paths_are_one_line_errors(project: Path, args: list[str]):
    result = run(*args)
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_fifo_is_not_read(project: Path):
    os.mkfifo(project / "pipe.toml")
    result = run("validate", "--cluster", "pipe.toml", "recipes/qwen3-coder-30b-a3b-fp8")
    assert result.exit_code == 1 and "pipe.toml: error: is not a regular file" in result.stderr


def test_a_folder_named_like_a_recipe_id_does_not_hide_it(project: Path, monkeypatch):
    assert run("build").exit_code == 0
    monkeypatch.chdir(project / "out")  # out/glm-4-5-air-sglang/ is a folder without recipe.toml
    result = run("explain", "glm-4-5-air-sglang", "--node", "spark2")
    assert result.exit_code == 0, result.output
    assert "--node-rank 1" in result.stdout


def test_validate_takes_a_folder_of_recipes_and_says_when_there_is_nothing(project: Path, monkeypatch,
                                                                          tmp_path_factory):
    assert run("validate", "recipes").exit_code == 0
    (project / "recipes" / "qwen3-coder-30b-a3b-fp8" / "recipe.toml").write_text('engine = "vlm"\n')
    result = run("validate", "recipes")
    assert result.exit_code == 1 and "recipes/qwen3-coder-30b-a3b-fp8/recipe.toml" in result.stderr
    monkeypatch.chdir(tmp_path_factory.mktemp("empty"))  # no recipes/ nor cluster.toml here or above
    result = run("validate")
    assert result.exit_code == 1 and "nothing to validate" in result.stderr


@pytest.mark.parametrize("args, word", [
    ('["--api-key", "hunter2-but-long"]', "--api-key"),
    ('["--hf-token=abc123"]', "--hf-token"),
])
def test_secret_flag_values_are_refused(project: Path, args: str, word: str):
    recipe = project / "recipes" / "qwen3-coder-30b-a3b-fp8" / "recipe.toml"
    text = recipe.read_text()
    recipe.write_text(text.replace("args = [", f"args = {args[:-1]}, ", 1))
    result = run("build", "--out", "o5")
    assert result.exit_code == 1 and f"{word} looks like a secret" in result.stderr
    assert not (project / "o5").exists()


def test_down_ps_and_logs_read_out_so_a_broken_recipe_can_still_be_stopped(project: Path):
    assert run("build").exit_code == 0
    recipe = project / "recipes" / "glm-4-5-air-sglang" / "recipe.toml"
    recipe.write_text(recipe.read_text().replace('"0.80"', '"1.5"'))  # now fails the gpu-memory-range rule
    assert run("validate", str(recipe)).exit_code == 1
    result = run("ps", "glm-4-5-air-sglang")  # the contexts do not exist here: each node is reported as such
    assert "gpu-memory" not in result.output
    assert "spark1" in result.stdout and "spark2" in result.stdout and "unreachable" in result.stdout


def test_naming_nodes_sets_how_many_and_which(project: Path):
    recipe = project / "recipes" / "qwen3-coder-30b-a3b-fp8" / "recipe.toml"
    recipe.write_text(recipe.read_text().replace("required_nodes = 1\n", 'nodes = ["spark2"]\n'))
    result = run("build", "qwen3-coder-30b-a3b-fp8", "--out", "o6")
    assert result.exit_code == 0, result.output
    assert sorted(tree(project / "o6")) == ["qwen3-coder-30b-a3b-fp8/spark2/compose.yaml",
                                            "qwen3-coder-30b-a3b-fp8/stack.yaml"]
    assert 'VLLM_HOST_IP: "192.168.100.11"' in (project / "o6/qwen3-coder-30b-a3b-fp8/spark2/compose.yaml").read_text()
    recipe.write_text(recipe.read_text().replace('nodes = ["spark2"]\n', 'nodes = ["spark2"]\nrequired_nodes = 2\n'))
    result = run("build", "qwen3-coder-30b-a3b-fp8", "--out", "o7")
    assert result.exit_code == 1 and "names 1 node(s) but required_nodes is 2" in result.stderr
