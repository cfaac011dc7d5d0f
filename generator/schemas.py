"""The JSON Schemas (schema/*.json, shipped in the package) and schema validation with compiler-style messages.

The schema files are the single source of truth: editors read them through `#:schema` directives and this
module validates with the very same files. Each validator is compiled once per process.
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from typing import Any, Iterable

from generator.diagnostics import Diagnostic
from generator.resources import read_data
from generator.tomldoc import TomlDocument

SCHEMA_NAMES = ("recipe", "cluster")


def schema_text(kind: str) -> str:
    return read_data("schema", f"{kind}.schema.json")


@cache
def schema(kind: str) -> dict[str, Any]:
    return json.loads(schema_text(kind))


@cache
def _validator(kind: str):
    import jsonschema  # imported here: only commands that validate pay for it

    return jsonschema.Draft7Validator(schema(kind))


@cache
def _fast_validator(kind: str):
    import jsonschema_rs

    return jsonschema_rs.Draft7Validator(schema(kind))


def validate_document(doc: TomlDocument, kind: str) -> list[Diagnostic]:
    """All schema violations of one document, each pointing at the offending key or value."""
    if doc.data and _fast_validator(kind).is_valid(doc.data):
        return []  # the common case, in microseconds; the detailed validator below explains failures
    found: list[Diagnostic] = []
    for error in _validator(kind).iter_errors(doc.data):
        found.extend(_to_diagnostics(doc, error))
    if not doc.data and not doc.text.strip("\ufeff \t\r\n"):
        found = [doc.diagnostic((), f"file is empty; a {kind} needs at least {_required_hint(kind)}")]
    return sorted(set(found), key=lambda d: (d.line or 0, d.col or 0, d.message))


def _required_hint(kind: str) -> str:
    required = schema(kind).get("required") or schema(kind)["anyOf"][1]["required"]
    return ", ".join(required)


def _to_diagnostics(doc: TomlDocument, error) -> Iterable[Diagnostic]:
    path = tuple(error.absolute_path)
    validator, value, sub = error.validator, error.instance, error.schema
    if "propertyNames" in error.relative_schema_path:  # a bad key name: point at the key itself
        yield doc.diagnostic(path + (value,), f"'{value}' is not a valid name here", at_value=False)
        return
    if validator == "anyOf" and error.context and all(e.validator == "required" for e in error.context):
        # "extends, or engine + docker_image + model": a recipe without a parent misses the latter
        for inner in error.context:
            if "extends" not in inner.message:
                yield from _to_diagnostics(doc, inner)
        return
    if validator in ("if", "anyOf", "oneOf", "allOf") and error.context:
        for inner in error.context:
            yield from _to_diagnostics(doc, inner)
        return
    if validator == "additionalProperties":
        allowed = sorted(sub.get("properties", {}))
        for extra in sorted(set(value) - set(allowed)):
            hint = difflib.get_close_matches(extra, allowed, n=1, cutoff=0.6)
            suggestion = f"; did you mean '{hint[0]}'?" if hint else f" (allowed: {', '.join(allowed)})"
            yield doc.diagnostic(path + (extra,), f"unknown key '{extra}'{suggestion}", at_value=False)
        return
    if validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        where = f"in [{_table_name(path)}]" if path else "at top level"
        yield doc.diagnostic(path, f"missing required key '{missing}' {where}", at_value=False)
        return
    if validator == "dependencies":
        needs = error.message.split("'")[1]
        key = error.message.split("'")[3] if error.message.count("'") >= 4 else "?"
        yield doc.diagnostic(path + (key,), f"'{key}' only makes sense with '{needs}'", at_value=False)
        return
    yield doc.diagnostic(path, _message(validator, value, sub, error))


def _table_name(path: tuple) -> str:
    from generator.tomldoc import format_key

    return format_key(path)


_TYPE_NAMES = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
               "array": "an array", "object": "a table"}


def _toml_type(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "an array",
            dict: "a table"}.get(type(value), type(value).__name__)


def _message(validator: str, value: Any, sub: dict, error) -> str:
    shown = json.dumps(value, ensure_ascii=False) if not isinstance(value, (dict, list)) else _toml_type(value)
    if validator == "type":
        wants = [sub["type"]] if isinstance(sub["type"], str) else sub["type"]
        got = _toml_type(value) + ("" if isinstance(value, (dict, list)) else f" {shown}")
        return f"expected {' or '.join(_TYPE_NAMES.get(w, w) for w in wants)}, got {got}"
    if validator == "enum":
        choices = ", ".join(f"'{c}'" for c in sub["enum"])
        hint = difflib.get_close_matches(str(value), [str(c) for c in sub["enum"]], n=1, cutoff=0.5)
        return f"{shown} is not one of {choices}" + (f"; did you mean '{hint[0]}'?" if hint else "")
    if validator in ("pattern", "format"):
        examples = sub.get("examples")
        tail = f"; expected e.g. {', '.join(json.dumps(e) for e in examples[:2])}" if examples else ""
        return f"{shown} is not valid here{tail}"
    if validator in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        words = {"minimum": "at least", "maximum": "at most", "exclusiveMinimum": "more than",
                 "exclusiveMaximum": "less than"}
        return f"{shown} must be {words[validator]} {sub[validator]}"
    if validator == "minItems":
        return f"needs at least {sub['minItems']} item(s)"
    if validator == "minLength":
        return "must not be empty"
    if validator == "uniqueItems":
        return "items must be unique"
    return error.message
