"""Mods a hostile peer or user names (issue 42 items 1 and 6): a `.` or `..` step, a mod folder that is a link,
a folder named like a COPY option, a .dockerignore beside the mods, and a mod too large to hold in memory. Each is
refused in one line naming the `mods` element, and nothing is written; a large mod builds, hashed as a stream."""

from __future__ import annotations

import shutil
import tracemalloc
from pathlib import Path

import pytest

from helpers.golden import snapshot
from helpers.importing import PEERS, ROOT, run, tree, write
from helpers.modsimage import SMALL, build, compose, project


@pytest.fixture
def import_project(tmp_path: Path, monkeypatch) -> Path:
    """A project to import into (as test_import's fixture makes it), beside the peer folder."""
    root = tmp_path / "p"
    (root / "recipes").mkdir(parents=True)
    shutil.copytree(ROOT / "schema", root / "schema")
    (root / "cluster.toml").write_text((PEERS / "cluster.toml").read_text().replace("../../schema", "./schema"))
    monkeypatch.chdir(root)
    return root


@pytest.mark.parametrize("ref", ["..", ".", "../..", "mods/..", "./m/../..", "../peer/mods/fix-a"])
def test_import_refuses_a_mod_named_through_a_dot_step_and_writes_nothing(import_project, ref):
    root = import_project
    write(root / "peer" / "recipe.toml", 'docker_image = "evil/miner:latest"\n')
    write(root / "peer" / "run.sh", "#!/bin/sh\n")
    write(root / "run.sh", "#!/bin/sh\n")
    f = write(root / "peer" / "m.yaml", f'model: a/b\ncontainer: i\nmods: ["{ref}"]\ncommand: vllm serve {{model}}\n')
    before = tree(root)
    for args in (["--dry-run"], []):
        result = run("import", *args, str(f))
        assert result.exit_code == 1, result.output
        assert len(result.stderr.splitlines()) == 1 and "'.' or '..'" in result.stderr and ref in result.stderr
    assert tree(root) == before


@pytest.mark.parametrize("ref, message", [('".."', "'.' or '..'"), ('"."', "'.' or '..'"), ('"../.."', "'.' or '..'"),
                                          ('"mods/../.."', "'.' or '..'"),
                                          ('"../../recipes/r"', "the recipe's own folder or one above it")])
def test_build_refuses_a_mod_that_is_the_recipes_folder_or_above(tmp_path, monkeypatch, ref, message):
    """build keeps `../shared-mod` (outside-project judges where it leads), never a folder holding the recipe."""
    files = {"recipes/r/run.sh": b"#!/bin/sh\n", "recipes/run.sh": b"#!/bin/sh\n", "run.sh": b"#!/bin/sh\n"}
    root = project(tmp_path, files, mods=f"[{ref}]")
    code, output = build(root, monkeypatch)
    assert code == 1 and "recipes/r/recipe.toml:6:" in output and message in output, output
    assert not (root / "out").exists()


def test_build_refuses_a_mod_folder_that_is_a_link_inside_the_project(tmp_path, monkeypatch):
    """mods/m -> <project>/x would make the image's build context the project root (the cluster file, every
    recipe)."""
    root = project(tmp_path, {"x/run.sh": b"#!/bin/sh\n"}, extra='mods_transport = "image"')
    (root / "recipes" / "r" / "mods").mkdir()
    (root / "recipes" / "r" / "mods" / "m").symlink_to(root / "x", target_is_directory=True)
    code, output = build(root, monkeypatch)
    assert code == 1 and "recipes/r/recipe.toml:6:" in output and "is a symlink" in output, output
    assert not (root / "out").exists()


@pytest.mark.parametrize("name", ["--link", "--parents", "--", "-x"])
def test_a_mod_folder_named_like_a_copy_option_is_refused(tmp_path, monkeypatch, name):
    root = project(tmp_path, {f"recipes/r/mods/{name}/run.sh": b"#!/bin/sh\n"}, mods=f'["mods/{name}"]',
                   extra='mods_transport = "image"')
    code, output = build(root, monkeypatch)
    assert code == 1 and "recipes/r/recipe.toml:6:" in output and "begins with '-'" in output, output
    assert not (root / "out").exists()


def test_a_dockerignore_in_the_mods_build_context_is_refused(tmp_path, monkeypatch):
    files = dict(SMALL, **{"recipes/r/mods/.dockerignore": b"m/run.sh\n"})
    root = project(tmp_path, files, extra='mods_transport = "image"')
    code, output = build(root, monkeypatch)
    assert code == 1 and "recipes/r/recipe.toml:6:" in output and ".dockerignore" in output, output
    assert not (root / "out").exists()


def test_a_large_mod_is_hashed_as_a_stream(tmp_path, monkeypatch):
    """A mod of 24 MiB builds in well under 24 MiB of memory; its tag still follows its last byte."""
    big = 24 << 20
    root = project(tmp_path, SMALL, extra='mods_transport = "image"')
    blob = root / "recipes" / "r" / "mods" / "m" / "weights.bin"
    with blob.open("wb") as f:
        for _ in range(big >> 20):
            f.write(b"\x01" * (1 << 20))
    tracemalloc.start()
    try:
        code, output = build(root, monkeypatch)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 0, output
    assert peak < big // 3, f"peak {peak >> 20} MiB for a {big >> 20} MiB mod"
    first = next(line for line in compose(root).splitlines() if "image:" in line)
    with blob.open("r+b") as f:
        f.seek(big - 1)
        f.write(b"\x02")
    assert build(root, monkeypatch)[0] == 0
    assert next(line for line in compose(root).splitlines() if "image:" in line) != first


def test_a_large_mod_is_copied_whole_by_import(import_project):
    root = import_project
    mod = root / "peer" / "mods" / "fix-a"
    write(mod / "run.sh", "#!/bin/sh\n")
    data = bytes(range(256)) * (8 << 12)  # 2 MiB: past what a mod holds in memory
    (mod / "w.bin").write_bytes(data)
    f = write(root / "peer" / "m.yaml", "model: a/b\ncontainer: i\nmods: [fix-a]\ncommand: vllm serve {model}\n")
    result = run("import", str(f))
    assert result.exit_code == 0, result.output
    assert (root / "recipes" / "m" / "mods" / "fix-a" / "w.bin").read_bytes() == data
    assert snapshot(root / "recipes" / "m")  # the recipe was written
