"""The JSON Schemas editors use refuse what `recipegen validate` refuses, where a JSON Schema can say it (issue 30):
editors check no custom format and know nothing of NUL, so the schemas state those refusals as patterns too, in
`allOf` entries whose $comment begins "editors:" (recipegen validates with its exact checks and leaves them out).
Where a schema cannot say a rule (a quote opened in one `args` element and closed in another), its description
does.

Three directions are tested: each editor pattern matches only values recipegen refuses (hypothesis draws values
from the pattern itself); over every TOML fixture of the test suite (lint fixtures, the broken-input corpus, golden
inputs, peers, the shipped recipes) what the schema refuses `validate` refuses; and the issue's cases are refused
by the schema, as the editors' own servers (tombi, taplo) read it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from generator.read import units
from generator.read.schemas import CONTAINER_ROOT, EDITORS_ONLY, FORMATS, NUL, schema
from generator.validate import file_kind
from helpers.corpus import run_inprocess

ROOT = Path(__file__).resolve().parent.parent
FORMAT_CHECKS = {"docker-size": lambda v: units.size_bytes(v) is not None, "docker-log-size": units.log_size_ok,
                 "docker-start-period": units.start_period_ok}


def _nodes(node: object, path: tuple = ()):
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from _nodes(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _nodes(v, path + (i,))


def _editors_patterns(node: dict) -> list[str]:
    return [e["not"]["pattern"] for e in node.get("allOf", [])
            if str(e.get("$comment", "")).startswith(EDITORS_ONLY) and "not" in e]


# --- the schemas carry the refusals ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["recipe", "cluster"])
def test_each_format_carries_its_editor_pattern(kind: str) -> None:
    full = schema(kind)
    formatted = [(p, n) for p, n in _nodes(full) if n.get("format") in units.EDITOR_REFUSALS]
    assert formatted
    for path, node in formatted:
        assert _editors_patterns(node) == [units.EDITOR_REFUSALS[node["format"]]], (
            f"{path}: run python3 tools/schema_editor_refusals.py")
    assert full["definitions"]["noNul"]["not"]["pattern"] == NUL
    strings = [(p, n) for p, n in _nodes(full) if n.get("type") == "string" and "enum" not in n and "not" not in p]
    unguarded = [p for p, n in strings
                 if {"$ref": "#/definitions/noNul"} not in n.get("allOf", []) and not n.get("pattern", "").endswith("$")]
    assert not unguarded, f"strings an editor lets a NUL through: {unguarded} (python3 tools/schema_editor_refusals.py)"


def test_the_mount_target_refuses_the_root() -> None:
    container = schema("recipe")["definitions"]["mount"]["properties"]["container"]
    assert CONTAINER_ROOT in _editors_patterns(container)


@pytest.mark.parametrize("fmt", sorted(units.EDITOR_REFUSALS))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_an_editor_pattern_refuses_only_what_recipegen_refuses(fmt: str, data: st.DataObject) -> None:
    value = data.draw(st.from_regex(units.EDITOR_REFUSALS[fmt], fullmatch=True))
    assert not FORMAT_CHECKS[fmt](value), f"the editors' pattern refuses {value!r}, which recipegen accepts"


@settings(max_examples=300, deadline=None)
@given(value=st.from_regex(CONTAINER_ROOT, fullmatch=True))
def test_the_root_pattern_is_the_root(value: str) -> None:
    from generator.resolve.model import container_target

    assert container_target(value) == "/"


# --- over every fixture: what the schema refuses, validate refuses ---------------------------------------------

def _fixtures() -> list[Path]:
    found = []
    for top in ("tests/corpus", "tests/lint", "tests/golden", "tests/peers", "recipes"):
        found += sorted(p for p in (ROOT / top).rglob("*.toml") if "expected" not in p.parts)
    return found + [ROOT / "cluster.toml"]


def _editor_errors(path: Path) -> list[str] | None:
    """What an editor says of the file with the full schema (no formats checked); None: not TOML."""
    try:
        data = tomllib.loads(path.read_text("utf-8").removeprefix("\ufeff"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    validator = jsonschema.Draft7Validator(schema(file_kind(path)))
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(data)]


FIXTURES = _fixtures()


def test_every_fixture_is_read() -> None:
    assert len(FIXTURES) > 150, len(FIXTURES)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(ROOT)))
def test_what_the_schema_refuses_validate_refuses(path: Path) -> None:
    errors = _editor_errors(path)
    if not errors:
        return
    cluster = ROOT / "tests" / "lint" / "cluster.toml"
    run = run_inprocess("validate", str(path), "--cluster", str(cluster))
    assert run.exit_code == 1 and " error" in run.stderr, (
        f"the schema refuses {path.relative_to(ROOT)} ({errors[:3]}), validate passes it:\n{run.stderr}")


# --- the issue's cases ------------------------------------------------------------------------------------------

BASE = 'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.34.0"\nmodel = "Qwen/Qwen3-32B"\n'
CASES = {
    "health_start_period 1ns": 'health_start_period = "1ns"\n',
    "health_start_period 999us": 'health_start_period = "999us"\n',
    "health_start_period 0.5ms": 'health_start_period = "0.5ms"\n',
    "health_start_period -1s": 'health_start_period = "-1s"\n',
    "log_max_size 0": 'log_max_size = "0"\n',
    "log_max_size 0m": 'log_max_size = "0m"\n',
    "memory_limit oversized": 'memory_limit = "99999999999999999999g"\n',
    "memory_limit 1e30": 'memory_limit = "1e30"\n',
    "shm_size oversized": 'shm_size = "9999999999t"\n',
    "mount on /": '[[extra_mounts]]\nhost = "/srv"\ncontainer = "/"\n',
    "mount on //.": '[[extra_mounts]]\nhost = "/srv"\ncontainer = "//."\n',
    "NUL in name": 'name = "a\\u0000b"\n',
    "NUL in env": '[env]\nA = "a\\u0000b"\n',
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_issues_cases_are_refused_by_validate_and_the_schema(case: str, tmp_path: Path) -> None:
    path = tmp_path / "r" / "recipe.toml"
    path.parent.mkdir()
    text = BASE + CASES[case]
    path.write_text(text, "utf-8")
    run = run_inprocess("validate", str(path))
    assert run.exit_code == 1 and " error" in run.stderr, run.stderr
    assert _editor_errors(path), f"the schema accepts {case}"
    tombi = shutil.which("tombi")
    if tombi is None:
        if os.environ.get("CI"):
            pytest.fail("`tombi` is not installed; CI must have it (pip install -e '.[test]')")
        return
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema" / "recipe.schema.json").write_text(json.dumps(schema("recipe")), "utf-8")
    path.write_text("#:schema ../schema/recipe.schema.json\n" + text, "utf-8")
    lint = subprocess.run([tombi, "lint", "--offline", str(path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "NO_COLOR": "1"}, cwd=tmp_path)
    assert lint.returncode != 0, f"tombi accepts {case}:\n{lint.stdout}{lint.stderr}"


def test_what_no_schema_can_say_the_descriptions_say() -> None:
    """A quote may open in one `args` element and close in the next (the elements are joined, then split): no
    per-item pattern can tell an unterminated one, so the description says it."""
    props = schema("recipe")["properties"]
    for key in ("args", "ray_args"):
        assert re.search(r"unterminated quote", props[key]["description"]), key
    assert "1ms" in props["health_start_period"]["description"]
    assert "int64" in props["memory_limit"]["description"] and "int64" in props["shm_size"]["description"]
    assert "NUL" in schema("recipe")["description"] and "NUL" in schema("cluster")["description"]


def test_the_hostile_values_validate_accepts_the_schema_accepts(tmp_path: Path) -> None:
    """The other direction on the hostile-values corpus (tests/test_hostile_values.py): what validate accepts and
    Compose reads (`1ns` as a stop grace period, `2µs`, `"unlimited"` ulimits, date-like strings) the editors
    accept too."""
    from helpers.hostile import ACCEPTED, cluster_text, recipe_text

    refused = []
    for i, (recipe_line, cluster_line) in enumerate(ACCEPTED):
        for name, text in (("recipe.toml", recipe_text(recipe_line)), ("cluster.toml", cluster_text(cluster_line))):
            path = tmp_path / str(i) / name
            path.parent.mkdir(exist_ok=True)
            path.write_text(text, "utf-8")
            errors = _editor_errors(path)
            if errors:
                refused.append(f"{recipe_line if name == 'recipe.toml' else cluster_line}: {errors}")
    assert not refused, refused
