"""Check every rendered file before anything is written: it must parse as YAML, say what the plan says,
and pass the compose-spec JSON Schema (the copy vendored in check-jsonschema, the one editors and CI use).
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path

import yaml_rs

from generator.diagnostics import Diagnostic, RecipegenError


@cache
def _compose_validator():
    import jsonschema_rs

    spec = importlib.util.find_spec("check_jsonschema")  # locate the file without importing the package
    if spec is None or not spec.submodule_search_locations:
        raise RecipegenError(Diagnostic("compose-spec", None, None, None,
                                        "the check-jsonschema package (which vendors the compose-spec schema) "
                                        "is not installed"))
    path = Path(spec.submodule_search_locations[0]) / "builtin_schemas" / "vendor" / "compose-spec.json"
    return jsonschema_rs.validator_for(json.loads(path.read_text("utf-8")))


def verify_compose(text: str, shown: str) -> dict:
    """Parse and schema-check one generated file; returns the parsed document."""
    # yaml-rs: a YAML 1.2 parser in Rust, as Compose's Go parser reads YAML 1.2; ten times PyYAML's speed.
    try:
        document = yaml_rs.loads(text)
    except (yaml_rs.YAMLDecodeError, ValueError, TypeError) as exc:  # a renderer bug, never a traceback
        raise RecipegenError(Diagnostic(shown, None, None, None, f"generated YAML does not read back: {exc}")) from None
    errors = list(_compose_validator().iter_errors(document))
    if errors:
        raise RecipegenError([
            Diagnostic(shown, None, None, "/".join(map(str, e.instance_path)) or None,
                       f"generated file violates the compose-spec schema: {e.message}") for e in errors])
    return document
