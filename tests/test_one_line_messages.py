"""Messages that must each be one line naming what is wrong (issue 30, item 11): no Python tuple for a TOML
table, the repeated item named, a backslash that glues two args elements named, a symlinked recipe folder
named, `unlock` on a missing context saying what `ps` says."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_ids_in_full import project  # noqa: F401 - the fixture
from tests.test_import import run

ROOT = Path(__file__).resolve().parent.parent
BASE = 'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\nmodel = "Qwen/Qwen3-32B"\n'


def recipe(project: Path, rid: str, text: str) -> Path:
    path = project / "recipes" / rid / "recipe.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, said", [
    ('[env]\nA = "1"\n[env]\nB = "2"\n', "cannot declare [env] twice"),
    ('[bench.args]\npp = 1\n[bench.args]\ntg = 1\n', "cannot declare [bench.args] twice"),
])
def test_a_table_declared_twice_is_named_as_toml_names_it(project, text, said):
    result = run("validate", str(recipe(project, "r", BASE + text)))
    assert result.exit_code == 1 and said in result.output and "('" not in result.output, result.output


def test_a_repeated_item_is_named(project):
    result = run("validate", str(recipe(project, "r", BASE + 'pass_env = ["A_KEY", "HF_TOKEN", "HF_TOKEN"]\n')))
    assert result.exit_code == 1, result.output
    assert 'pass_env: items must be unique: "HF_TOKEN" is given twice' in result.output, result.output


def test_unlock_on_a_missing_context_says_what_every_command_says(project, monkeypatch):
    """Not docker's raw `docker --context x inspect ...: exit 1: ...`: the context named, and how to make it."""
    import generator.deploy.lock
    from generator.deploy.docker_errors import DockerError

    stderr = ('Failed to initialize: unable to resolve docker endpoint: context "spark1": context not found: open '
              '/root/.docker/contexts/meta/9436/meta.json: no such file or directory\n')

    def missing(nodes):
        return {n.name: DockerError(["docker", "--context", n.node.context, "inspect", "--type", "container", "x"],
                                    1, "", stderr) for n in nodes}

    monkeypatch.setattr(generator.deploy.lock, "locks", missing)
    result = run("unlock", "spark1")
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert result.stderr.strip() == "spark1: FAILED: context 'spark1' missing (recipegen contexts --create)"


def test_a_symlinked_recipe_folder_is_named_never_built_under_its_targets_id(project):
    recipe(project, "base", BASE)
    (project / "recipes" / "alias").symlink_to("base", target_is_directory=True)
    alone = run("build", "alias")
    assert alone.exit_code == 1 and alone.stderr.startswith("recipes/alias: error: is a symlink to the recipe "
                                                            "'base'"), alone.output
    assert len(alone.stderr.splitlines()) == 1 and not (project / "out").exists()
    every = run("build")
    assert every.exit_code == 0, every.output
    assert "recipes/alias: warning: skipped: is a symlink to the recipe 'base'" in every.stderr, every.output
    # the cluster's side stacks (its router, its metrics stack) beside the recipe
    assert sorted(p.name for p in (project / "out").iterdir() if p.name not in ("_router", "_metrics")) == ["base"]
