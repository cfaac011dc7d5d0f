"""`validate`'s small defects (issues 42 item 8, 43 item 5): every finding of a file in one run, the folder form
like the file form, a broken cluster file reported as itself, a restart window the watch would round up."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.corpus import run_inprocess
from helpers.lint import findings

RECIPE = ('engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.34.0"\nmodel = "Qwen/Qwen3-32B"\n'
          'args = ["--tensor-parallel-size", "2"]\n')
CLUSTER = 'name = "lab"\n[[nodes]]\nname = "n1"\naddress = "10.9.0.1"\ncontext = "n1"\n'


def _project(tmp_path: Path, recipe: str, cluster: str = CLUSTER) -> Path:
    (tmp_path / "recipes" / "a").mkdir(parents=True)
    (tmp_path / "recipes" / "a" / "recipe.toml").write_text(recipe, "utf-8")
    (tmp_path / "cluster.toml").write_text(cluster, "utf-8")
    return tmp_path


@pytest.mark.parametrize("recipe, schema_line, schema_words", [
    (RECIPE.replace('model = "Qwen/Qwen3-32B"\n', ""), 1, "missing required key 'model'"),
    (RECIPE.replace("vllm/vllm-openai:v0.34.0", "bad image"), 2, "docker_image"),
])
def test_schema_and_lint_findings_in_one_run(tmp_path, monkeypatch, recipe, schema_line, schema_words):
    """A recipe without a valid image or model still has its flags linted in the same run."""
    monkeypatch.chdir(_project(tmp_path, recipe))
    run = run_inprocess("validate", "recipes/a/recipe.toml")
    assert run.crash is None and run.exit_code == 1
    assert any(f"recipe.toml:{schema_line}:" in line and schema_words in line for line in run.stderr.splitlines())
    assert [f.rule for f in findings(run)] == ["owned-flag"], run.stderr


def test_the_folder_form_prints_the_schema_directive_warning(tmp_path, monkeypatch):
    monkeypatch.chdir(_project(tmp_path, "#:schema ../../nope/recipe.schema.json\n" + RECIPE.replace(
        'args = ["--tensor-parallel-size", "2"]\n', "")))
    by_file = run_inprocess("validate", "recipes/a/recipe.toml")
    by_folder = run_inprocess("validate", "recipes/a")
    for run in (by_file, by_folder):
        assert "recipe.toml:1:1: warning[schema-directive]" in run.stderr, run.stderr


@pytest.mark.parametrize("cluster", [CLUSTER + "foo = 1\n", CLUSTER.replace('name = "lab"\n', 'name = "lab"\nfoo = 1\n'),
                                     'name = "lab"\n[[nodes]]\n', "name = \n"])
def test_a_broken_cluster_file_is_reported_as_itself_only(tmp_path, monkeypatch, cluster):
    monkeypatch.chdir(_project(tmp_path, RECIPE.replace('args = ["--tensor-parallel-size", "2"]\n', ""), cluster))
    run = run_inprocess("validate")
    assert run.crash is None and run.exit_code == 1
    assert "cluster.toml:" in run.stderr and "no cluster file" not in run.stderr, run.stderr


@pytest.mark.parametrize("kind", ["dangling link", "folder"])
def test_a_cluster_file_that_cannot_be_read_is_reported_as_itself(tmp_path, monkeypatch, kind):
    root = _project(tmp_path, RECIPE.replace('args = ["--tensor-parallel-size", "2"]\n', ""))
    (root / "cluster.toml").unlink()
    if kind == "folder":
        (root / "cluster.toml").mkdir()
    else:
        (root / "cluster.toml").symlink_to(root / "gone.toml")
    monkeypatch.chdir(root)
    run = run_inprocess("validate", "recipes/a")
    assert run.crash is None and run.exit_code == 1 and ("cluster.toml" in run.stderr or "gone.toml" in run.stderr)
    assert "no cluster file" not in run.stderr, run.stderr


def test_no_cluster_file_is_still_said(tmp_path, monkeypatch):
    root = _project(tmp_path, RECIPE.replace('args = ["--tensor-parallel-size", "2"]\n', ""))
    (root / "cluster.toml").unlink()
    monkeypatch.chdir(root)
    run = run_inprocess("validate", "recipes/a")
    assert "no cluster file" in run.stderr, run.stderr


@pytest.mark.parametrize("where", ["cluster", "recipe"])
@pytest.mark.parametrize("window", ['"0s"', '"999ms"', '"0.5s"', '"0h"'])
def test_a_restart_window_under_a_second_is_refused_naming_the_key(tmp_path, monkeypatch, where, window):
    """The watch counts restarts in whole seconds: 0s would silently be 1s."""
    line = f"restart_window = {window}\n"
    recipe = RECIPE.replace('args = ["--tensor-parallel-size", "2"]\n', "") + (line if where == "recipe" else "")
    cluster = CLUSTER.replace('name = "lab"\n', 'name = "lab"\n' + line) if where == "cluster" else CLUSTER
    monkeypatch.chdir(_project(tmp_path, recipe, cluster))
    run = run_inprocess("validate")
    assert run.crash is None and run.exit_code == 1
    [error] = [e for e in run.stderr.splitlines() if "restart_window" in e]
    assert f"{'cluster.toml:2:' if where == 'cluster' else 'recipes/a/recipe.toml:4:'}" in error and "1s" in error


def test_a_restart_window_of_a_second_passes(tmp_path, monkeypatch):
    monkeypatch.chdir(_project(tmp_path, RECIPE.replace('args = ["--tensor-parallel-size", "2"]\n', ""),
                               CLUSTER.replace('name = "lab"\n', 'name = "lab"\nrestart_window = "1s"\n')))
    run = run_inprocess("validate")
    assert run.exit_code == 0, run.stderr


@pytest.mark.parametrize("cluster, schema_words", [
    ('env = { HF_TOKEN = "hf_abcdefghijklmnopqrstuvwxyz123456" }\n[[nodes]]\nname = "n1"\naddress = "10.9.0.1"\n'
     'context = "n1"\n', "missing required key 'name'"),
    ('name = "lab"\nenv = { HF_TOKEN = "hf_abcdefghijklmnopqrstuvwxyz123456" }\n[[nodes]]\nname = "n1"\n'
     'address = "10.9.0.1"\n', "missing required key 'context'"),
])
def test_a_cluster_s_schema_and_lint_findings_in_one_run(tmp_path, monkeypatch, cluster, schema_words):
    monkeypatch.chdir(_project(tmp_path, RECIPE, cluster))
    run = run_inprocess("validate", "cluster.toml")
    assert run.crash is None and run.exit_code == 1
    assert schema_words in run.stderr and "error[secret]: env.HF_TOKEN" in run.stderr, run.stderr
