"""`validate` and `build` agree (issue 23): every refusal `build` makes is a finding `validate` makes, with the same
file:line:key line, and both exit alike, over the whole broken-input corpus (tests/corpus) and every lint fixture
(tests/lint). A pre-commit hook running `validate` then passes only what builds.

Each case is run as a user would: `validate RECIPE --cluster C` and `build RECIPE --cluster C --out TMP`, in process.
Corpus recipes are not named recipe.toml (build needs that name: it is the id's folder), so they are copied into
a project of their own, with the corpus's mods beside them.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from generator.cli import main

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
LINT = ROOT / "tests" / "lint"
LINT_CLUSTER = LINT / "cluster.toml"
PLAIN_RECIPE = LINT / "owned-flag" / "good" / "recipe.toml"  # clean on a two-node cluster
ERROR_LINE = re.compile(r"^.+?: error(\[[\w.-]+\])?: ", re.M)


@dataclass(frozen=True)
class Case:
    id: str
    recipe: Path  # as found; a corpus recipe is copied before it runs
    cluster: Path
    copy: bool = False


def _cases() -> list[Case]:
    cases = [Case(f"corpus/{p.stem}", p, LINT_CLUSTER, copy=True) for p in sorted((CORPUS / "recipes").glob("*.toml"))]
    cases += [Case(f"corpus-cluster/{p.stem}", PLAIN_RECIPE, p) for p in sorted((CORPUS / "clusters").glob("*.toml"))]
    cases += [Case(f"multi/{p.parent.parent.name}/{p.parent.name}", p, LINT_CLUSTER)
              for p in sorted((CORPUS / "multi").glob("*/*/recipe.toml"))]
    cases += [Case(f"lint/{p.parent.parent.name}/{p.parent.name}", p, LINT_CLUSTER)
              for p in sorted(LINT.glob("*/*/recipe.toml"))]
    cases += [Case(f"lint-cluster/{p.parent.name}", PLAIN_RECIPE, p) for p in sorted(LINT.glob("*/*/cluster.toml"))]
    # and the inputs that build: the shipped recipes and the golden cases, each on its own cluster
    cases += [Case(f"shipped/{p.parent.name}", p, ROOT / "cluster.toml")
              for p in sorted((ROOT / "recipes").glob("*/recipe.toml"))]
    cases += [Case(f"golden/{p.parents[2].name}/{p.parent.name}", p, p.parents[2] / "cluster.toml")
              for p in sorted((ROOT / "tests" / "golden").glob("*/recipes/*/recipe.toml"))]
    return cases


CASES = _cases()


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.stderr


def _placed(case: Case, tmp_path: Path) -> Path:
    if not case.copy:
        return case.recipe
    folder = tmp_path / "project" / "recipes" / case.recipe.stem
    folder.mkdir(parents=True)
    shutil.copyfile(case.recipe, folder / "recipe.toml")
    shutil.copytree(CORPUS / "recipes" / "mods", folder / "mods")
    return folder / "recipe.toml"


@pytest.fixture(autouse=True)
def _in_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def test_the_cases_cover_corpus_and_fixtures() -> None:
    assert len([c for c in CASES if c.id.startswith("corpus/")]) >= 40
    assert len([c for c in CASES if c.id.startswith("lint/")]) >= 50
    assert len([c for c in CASES if c.id.startswith(("shipped/", "golden/"))]) >= 10


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_validate_finds_every_error_build_refuses_with(case: Case, tmp_path: Path) -> None:
    recipe = _placed(case, tmp_path)
    out = tmp_path / "out"
    built, build_err = run("build", str(recipe), "--cluster", str(case.cluster), "--out", str(out))
    checked, validate_err = run("validate", str(recipe), "--cluster", str(case.cluster))
    assert checked == built, (f"validate exits {checked}, build {built}\n--- validate\n{validate_err}"
                              f"--- build\n{build_err}")
    missing = [line for line in build_err.splitlines() if ERROR_LINE.match(line) and line not in validate_err]
    assert not missing, "build refused with errors validate does not report:\n" + "\n".join(missing) + \
        f"\n--- validate\n{validate_err}"
