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
