"""The JSON Schemas (schema/*.json, shipped in the package) and schema validation with compiler-style messages.

The schema files are the single source of truth: editors read them through `#:schema` directives and this
module validates with the very same files. Each validator is compiled once per process.
"""

from __future__ import annotations

import datetime
import difflib
import json
import re
from functools import cache
from typing import Any, Iterable, Iterator

from generator.diagnostics import Diagnostic
from generator.read.resources import read_data
from generator.read.tomldoc import KeyPath, TomlDocument, format_key
from generator.read.units import (DURATION_SHAPE, SIZE_SHAPE, duration_ns, duration_ok, log_size_ok, size_bytes,
                                  size_overflows, start_period_ok)

SCHEMA_NAMES = ("recipe", "cluster")


def schema_text(kind: str) -> str:
    return read_data("schema", f"{kind}.schema.json")


@cache
def schema(kind: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(schema_text(kind))
    return loaded


# Refusals the schemas state for editors, which check no custom format and no NUL: each an `allOf` entry whose
# $comment begins "editors:" (or a $ref to a definition that is one). recipegen judges the same values exactly,
# with the formats and its NUL check, so it validates without them: one message per value, its own.
EDITORS_ONLY = "editors:"
CONTAINER_ROOT = r"^(/+\.{0,2})+/*$"  # `/`, `//`, `/.`, `/..`: the container's root, which Docker refuses to mount
NUL = r"\u0000"


def _editors_only(entry: Any, definitions: dict[str, Any]) -> bool:
    ref = entry.get("$ref", "") if isinstance(entry, dict) else ""
    if ref.startswith("#/definitions/"):
        entry = definitions.get(ref.removeprefix("#/definitions/"), {})
    return isinstance(entry, dict) and str(entry.get("$comment", "")).startswith(EDITORS_ONLY)


def _without_editors_only(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_without_editors_only(v, definitions) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _without_editors_only(v, definitions) for k, v in node.items()}
    if isinstance(node.get("allOf"), list):
        kept = [e for e in out["allOf"] if not _editors_only(e, definitions)]
        if kept:
            out["allOf"] = kept
        else:
            del out["allOf"]
    return out


@cache
def checked_schema(kind: str) -> dict[str, Any]:
    """The schema recipegen validates with: the editors' stand-ins for its exact checks left out."""
    full = schema(kind)
    stripped: dict[str, Any] = _without_editors_only(full, full.get("definitions", {}))
    return stripped


# Formats the schemas name for what a pattern cannot say: the value must be one Docker reads (generator/read/units.py
# reproduces its parsers). Editors ignore formats they do not know; where a pattern can give the shape, it does.
# A value of the wrong shape is the pattern's to report (one message per value), so those formats pass it.
FORMATS = {
    "docker-size": lambda value: not isinstance(value, str) or not SIZE_SHAPE.fullmatch(value)
    or size_bytes(value) is not None,
    "docker-log-size": lambda value: not isinstance(value, str) or log_size_ok(value),
    "go-duration": lambda value: not isinstance(value, str) or not DURATION_SHAPE.fullmatch(value)
    or duration_ok(value),
    "docker-start-period": lambda value: not isinstance(value, str) or not DURATION_SHAPE.fullmatch(value)
    or start_period_ok(value),
    "go-duration-window": lambda value: not isinstance(value, str) or not DURATION_SHAPE.fullmatch(value)
    or not any(c.isalpha() for c in value) or (duration_ns(value) or 0) >= 10**9,  # a bare 0: the pattern's
}
_FORMAT_WORDS = {
    "docker-size": "is not valid here: not a size Docker reads (a number and an optional unit: `32g`, `32gb`, "
                   "`32GiB`, `32 GB`), or beyond int64 bytes",
    "docker-log-size": "is not valid here: not a log size dockerd reads (more than 0: `100m`, `100M`, `1.5g`, `100MB`)",
    "go-duration": "is not a Go duration that fits in int64 nanoseconds",
    "go-duration-window": "is not valid here: the group watch counts restarts in a window of whole seconds, so it "
                          "must be a Go duration of at least 1s (`30m`, `1h`); a shorter one would silently be 1s",
    "docker-start-period": "is not valid here: not a start period dockerd takes (a Go duration, `0` or at least 1ms: "
                           "`30m`, `1h`)",
}


@cache
def _validator(kind: str) -> Any:
    import jsonschema  # imported here: only commands that validate pay for it

    # draft-07 counts 2.0 as an integer; TOML tells 2 from 2.0, and `--tensor-parallel-size "2.0"` or a float
    # ulimit is what Docker and the engines refuse: an integer is a TOML integer.
    checker = jsonschema.Draft7Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool))
    strict = jsonschema.validators.extend(jsonschema.Draft7Validator, type_checker=checker,
                                          validators={"pattern": _pattern})
    formats = jsonschema.FormatChecker([])
    for name, check in FORMATS.items():
        formats.checks(name)(check)
    return strict(checked_schema(kind), format_checker=formats)


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
    """jsonschema's `pattern`, with `$` meaning the end as JSON Schema's ECMA-262 regexes (and editors, and
    jsonschema_rs) read it: Python's `$` also matches before a final newline, which let `"spark1\n"` through."""
    import jsonschema

    if validator.is_type(instance, "string") and not _ecma(pattern).search(instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


@cache
def _ecma(pattern: str) -> re.Pattern[str]:
    """The pattern with every `$` outside a character class (and not escaped) made `\\Z`."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        in_class = (in_class or c == "[") and not (in_class and c == "]")
        out.append("\\Z" if c == "$" and not in_class else c)
        i += 1
    return re.compile("".join(out))


@cache
def _fast_validator(kind: str) -> Any:
    import jsonschema_rs

    return jsonschema_rs.Draft7Validator(checked_schema(kind), formats=FORMATS, validate_formats=True)


def _unusual_values(value: Any, path: KeyPath = ()) -> Iterator[tuple[KeyPath, Any]]:
    """Values the fast validator cannot judge (TOML dates and times: JSON has none; 2.0, which draft-07 counts
    as an integer) and strings holding NUL, which no argument, variable or path can carry."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _unusual_values(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _unusual_values(v, path + (i,))
    elif isinstance(value, (datetime.date, datetime.time)) or (isinstance(value, float) and value.is_integer()):
        yield path, value
    elif isinstance(value, str) and "\x00" in value:
        yield path, value


def validate_document(doc: TomlDocument, kind: str) -> list[Diagnostic]:
    """All schema violations of one document, each pointing at the offending key or value."""
    unusual = list(_unusual_values(doc.data))
    if doc.data and not unusual and _fast_validator(kind).is_valid(doc.data):
        return []  # the common case, in microseconds; the detailed validator below explains failures
    found: list[Diagnostic] = [doc.diagnostic(path, "contains a NUL character (\\u0000): no process argument, "
                                                    "environment variable or path can hold one")
                               for path, value in unusual if isinstance(value, str)]
    for error in _validator(kind).iter_errors(doc.data):
        found.extend(_to_diagnostics(doc, error))
    if not doc.data and not doc.text.strip("\ufeff \t\r\n"):
        found = [doc.diagnostic((), f"file is empty; a {kind} needs at least {_required_hint(kind)}")]
    return sorted(set(found), key=lambda d: (d.line or 0, d.col or 0, d.message))


def valid_part(data: dict[str, Any], kind: str) -> tuple[dict[str, Any], set[str]] | None:
    """The document without its invalid keys, and those keys (as messages name them), so the lint rules can still
    read the rest (`validate` reports schema and lint findings of a file at once); None when what is left
    cannot stand (a required key is missing or wrong, or the whole document is)."""
    import copy

    data, dropped = copy.deepcopy(data), set[str]()
    for _ in range(8):  # each pass removes at least one key; nested problems surface one level at a time
        _stand_in(data, kind, dropped)
        errors = list(_validator(kind).iter_errors(data))
        if not errors:
            return data, dropped
        for error in errors:
            path = list(error.absolute_path)
            if error.validator == "additionalProperties":
                extras = set(error.instance) - set(error.schema.get("properties", {}))
                cuts = [path + [k] for k in extras]
            elif "propertyNames" in error.relative_schema_path:
                cuts = [path + [error.instance]]
            else:  # cut at the table key above the first array index: an array loses all its elements or none
                first_index = next((i for i, part in enumerate(path) if isinstance(part, int)), len(path))
                cuts = [path[:first_index]]
            for cut in cuts:
                if not cut:
                    return None
                parent = data
                for part in cut[:-1]:
                    parent = parent[part]
                if isinstance(parent, dict):
                    parent.pop(cut[-1], None)
                    dropped.add(format_key(tuple(cut)))
    return None


# A recipe missing its image or model (or giving an invalid one) still has flags, env and mounts to lint: a
# stand-in takes the key's place, the key counts as dropped, and the findings that read it are left out
# (validate's _unless_dropped). Without a valid `engine` nothing about the flags can be said: no stand-in.
STAND_INS: dict[str, dict[str, Any]] = {
    "recipe": {"docker_image": "recipegen.invalid/stand-in:0", "model": "recipegen-invalid/stand-in"},
    "cluster": {"name": "stand-in", "nodes": [{"name": "stand-in", "address": "192.0.2.1", "context": "stand-in"}]},
}


def _stand_in(data: dict[str, Any], kind: str, dropped: set[str]) -> None:
    import copy

    if "extends" in data:
        return
    for key, value in STAND_INS.get(kind, {}).items():
        if key not in data:
            data[key] = copy.deepcopy(value)
            dropped.add(key)


def _required_hint(kind: str) -> str:
    required = schema(kind).get("required") or schema(kind)["anyOf"][1]["required"]
    return ", ".join(required)


def _to_diagnostics(doc: TomlDocument, error: Any) -> Iterable[Diagnostic]:
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
    if validator in ("anyOf", "oneOf") and error.context and all(e.absolute_path == error.absolute_path
                                                                  for e in error.context):
        # one value, several accepted shapes (an integer or "unlimited"): one line naming them all
        choices = " or ".join(_describe(branch) for branch in sub[validator])
        yield doc.diagnostic(path, f"expected {choices}, got {_toml_type(value)} {_shown(value)}")
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


def _describe(branch: dict[str, Any]) -> str:
    if "const" in branch:
        return json.dumps(branch["const"])
    kind = branch.get("type", "value")
    text = _TYPE_NAMES.get(kind, kind) if isinstance(kind, str) else " or ".join(_TYPE_NAMES.get(k, k) for k in kind)
    bounds = [f"at least {branch['minimum']}"] if "minimum" in branch else []
    bounds += [f"at most {branch['maximum']}"] if "maximum" in branch else []
    return text + (f" ({', '.join(bounds)})" if bounds else "")


def _table_name(path: tuple[str | int, ...]) -> str:
    from generator.read.tomldoc import format_key

    return format_key(path)


_TYPE_NAMES = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
               "array": "an array", "object": "a table"}


def _toml_type(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "an array",
            dict: "a table", datetime.datetime: "a TOML date-time", datetime.date: "a TOML date",
            datetime.time: "a TOML time"}.get(type(value), type(value).__name__)


def _shown(value: Any) -> str:
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat().replace("+00:00", "Z")
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, (dict, list)) else _toml_type(value)


def _message(validator: str, value: Any, sub: dict[str, Any], error: Any) -> str:
    shown = _shown(value)
    if validator == "type":
        wants = [sub["type"]] if isinstance(sub["type"], str) else sub["type"]
        got = _toml_type(value) + ("" if isinstance(value, (dict, list)) else f" {shown}")
        want = wants[0]
        hint = ""
        if isinstance(value, (datetime.date, datetime.time)) and want == "string":
            hint = f": quote it (\"{shown}\")"
        elif isinstance(value, float) and value.is_integer() and want == "integer":
            hint = f": write {int(value)}"
        return f"expected {' or '.join(_TYPE_NAMES.get(w, w) for w in wants)}, got {got}{hint}"
    if validator == "format" and sub.get("format") == "docker-size" and size_overflows(str(value)):
        return f"{shown} is larger than Docker can hold (int64 bytes)"
    if validator == "format" and sub.get("format") == "docker-start-period" and duration_ns(str(value)) is None:
        return f"{shown} {_FORMAT_WORDS['go-duration']}"
    if validator == "format" and sub.get("format") in _FORMAT_WORDS:
        return f"{shown} {_FORMAT_WORDS[sub['format']]}"
    if validator == "enum":
        choices = ", ".join(f"'{c}'" for c in sub["enum"])
        close = difflib.get_close_matches(str(value), [str(c) for c in sub["enum"]], n=1, cutoff=0.5)
        return f"{shown} is not one of {choices}" + (f"; did you mean '{close[0]}'?" if close else "")
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
        twice = next((v for i, v in enumerate(value) if v in value[:i]), None) if isinstance(value, list) else None
        return "items must be unique" + (f": {_shown(twice)} is given twice" if twice is not None else "")
    return str(error.message)
