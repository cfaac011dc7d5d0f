"""Ids and names that land in paths and Compose names are matched in full (issue 30): a trailing newline is
not a `$` away from valid. `--id $'nl\\n'`, a recipe folder, a cluster node name, a mod file
name: each refused in one line, nothing written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.test_import import run

ROOT = Path(__file__).resolve().parent.parent
RECIPE = 'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\nmodel = "Qwen/Qwen3-32B"\n'


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "recipes").mkdir()
    shutil.copytree(ROOT / "schema", tmp_path / "schema")
    shutil.copy(ROOT / "cluster.toml", tmp_path / "cluster.toml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_an_import_id_with_a_newline_is_a_usage_error(project: Path):
    peer = project / "m.yaml"
    peer.write_text("model: a/b\ncontainer: i\ncommand: vllm serve {model}\n")
    result = run("import", "--id", "nl\n", str(peer))
    assert result.exit_code == 2 and "is not a recipe id" in result.output, result.output
    assert list((project / "recipes").iterdir()) == []


@pytest.mark.parametrize("command", ["validate", "build"])
def test_a_recipe_folder_named_with_a_newline_is_refused(project: Path, command: str):
    folder = project / "recipes" / "nl\n"
    folder.mkdir()
    (folder / "recipe.toml").write_text(RECIPE)
    result = run(command, str(folder / "recipe.toml"))
    assert result.exit_code == 1 and "cannot be a recipe id" in result.output, result.output
    assert not (project / "out").exists()


def test_a_cluster_node_name_with_a_newline_is_refused(project: Path):
    text = (project / "cluster.toml").read_text()
    assert 'name = "spark1"\n' in text
    (project / "cluster.toml").write_text(text.replace('name = "spark1"\n', 'name = "spark1\\n"\n', 1))
    result = run("validate", "cluster.toml")
    assert result.exit_code == 1 and "nodes[0].name" in result.output, result.output


def test_a_mod_file_named_with_a_newline_is_refused(project: Path):
    recipe = project / "recipes" / "r" / "recipe.toml"
    (recipe.parent / "mods" / "fix").mkdir(parents=True)
    (recipe.parent / "mods" / "fix" / "run.sh").write_text("#!/bin/sh\n")
    (recipe.parent / "mods" / "fix" / "a.patch\n").write_text("x\n")
    recipe.write_text(RECIPE + 'mods = ["mods/fix"]\n')
    result = run("build", str(recipe))
    assert result.exit_code == 1 and "a.patch" in result.output, result.output
    assert not (project / "out").exists()
