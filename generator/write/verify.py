"""Check every rendered file before anything is written: it must parse as YAML, say what the plan says,
and pass the compose-spec JSON Schema (the copy vendored in check-jsonschema, the one editors and CI use).
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import ryaml

from generator.diagnostics import Diagnostic, RecipegenError


def read_yaml(text: str) -> Any:
    """Read YAML as Compose (Go yaml.v3) does: quoted scalars are strings, a plain `on` or `2024-05-01` is a
    string, a repeated key is an error. ryaml (Rust) is the one candidate measured that does all three, at a
    fifth of PyYAML's time (benchmarks/yaml_readers.py; yaml-rs 0.1 typed quoted "2024-05-01" as a date).
    Raises ValueError."""
    document: Any = ryaml.loads(text)  # type: ignore[attr-defined]  # ryaml ships no __all__
    return document


@cache
def _compose_validator() -> Any:
    import jsonschema_rs

    spec = importlib.util.find_spec("check_jsonschema")  # locate the file without importing the package
    if spec is None or not spec.submodule_search_locations:
        raise RecipegenError(Diagnostic("compose-spec", None, None, None,
                                        "the check-jsonschema package (which vendors the compose-spec schema) "
                                        "is not installed"))
    path = Path(spec.submodule_search_locations[0]) / "builtin_schemas" / "vendor" / "compose-spec.json"
    return jsonschema_rs.validator_for(json.loads(path.read_text("utf-8")))


# What a large block is replaced by before its file is parsed: a string, as the block is, for the schema.
BLOCK_READ_ONCE = '"recipegen: a block read back on its own"'


@lru_cache(maxsize=256)
def _reads_back(line_start: str, block: str, value: str) -> bool:
    """The block, after what its first line starts with in the file (`      - `, `    content: `), reads back as
    one scalar equal to value: its indentation is checked against that line's, as the whole file's parse would."""
    try:
        found = read_yaml(f"{line_start}{block}\n")
    except (ValueError, TypeError):
        return False
    scalars = found if isinstance(found, list) else list(found.values()) if isinstance(found, dict) else []
    return scalars == [value]


_KEY = 256  # a block's first characters: its indicator, indentation and first line (blocks are 4 KiB or more)


@lru_cache(maxsize=8)
def _index(blocks: tuple[tuple[str, str], ...]) -> dict[str, list[tuple[str, str]]]:
    index: dict[str, list[tuple[str, str]]] = {}
    for block, value in blocks:
        index.setdefault(block[:_KEY], []).append((block, value))
    return index


def _stand_in(text: str, blocks: tuple[tuple[str, str], ...]) -> str:
    """The text with each whole occurrence of a block that reads back as its value replaced by BLOCK_READ_ONCE.
    One scan: every block starts with YAML's `|`, so only the places holding one are looked up."""
    index = _index(blocks)
    pieces: list[str] = []
    start, at = 0, text.find("|")
    while at >= 0:
        for block, value in index.get(text[at:at + _KEY], ()):
            end = at + len(block)
            if text.startswith(block, at) and (end == len(text) or text[end] == "\n") \
                    and _reads_back(text[text.rfind("\n", 0, at) + 1:at], block, value):
                pieces += [text[start:at], BLOCK_READ_ONCE]
                start = end
                break
        at = text.find("|", max(at + 1, start))
    return "".join(pieces) + text[start:] if pieces else text


def verify_compose(text: str, shown: str, blocks: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    """Parse and schema-check one generated file. `blocks` (render's large_blocks) are read back once each, on
    their own after their line's start, and stand as one string in the file's own parse: the group watch is most of
    every rank's file, and reading it back in each was most of a large build's time. What the parse returns keeps
    the stand-in."""
    if blocks:
        text = _stand_in(text, blocks)
    try:
        document = read_yaml(text)
    except (ValueError, TypeError) as exc:  # a renderer bug, never a traceback
        raise RecipegenError(Diagnostic(shown, None, None, None, f"generated YAML does not read back: {exc}")) from None
    errors = list(_compose_validator().iter_errors(document))
    if errors:
        raise RecipegenError([
            Diagnostic(shown, None, None, "/".join(map(str, e.instance_path)) or None,
                       f"generated file violates the compose-spec schema: {e.message}") for e in errors])
    if not isinstance(document, dict):
        raise RecipegenError(Diagnostic(shown, None, None, None, "generated YAML is not a mapping"))
    return document
