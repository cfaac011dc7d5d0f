"""Check every rendered file before anything is written: it must parse as YAML, say what the plan says,
and pass the compose-spec JSON Schema (the copy vendored in check-jsonschema, the one editors and CI use).
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache
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


def verify_compose(text: str, shown: str) -> dict[str, Any]:
    """Parse and schema-check one generated file."""
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
