#!/usr/bin/env python3
"""Write into schema/*.schema.json the refusals editors can check: each format's not-pattern
(generator/read/units.py: EDITOR_REFUSALS), the NUL refusal on every string a pattern does not already close
(definitions/noNul), and the container's root on a mount's `container` (generator/read/schemas.py). Idempotent:
the entries it wrote before are replaced, everything else (descriptions, hand-written keys) is kept, so a schema
that gained a property is brought in line by running it again:

    python3 tools/schema_editor_refusals.py

tests/test_schema_agrees.py fails while a format or a string lacks its entry. recipegen itself validates without
these entries (schemas.checked_schema): its own checks are exact.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from generator.read.schemas import CONTAINER_ROOT, EDITORS_ONLY, NUL  # noqa: E402
from generator.read.units import EDITOR_REFUSALS  # noqa: E402

WHAT = {"docker-size": "a size beyond int64 bytes, in the forms a pattern can tell (recipegen checks every size "
                       "exactly)",
        "docker-log-size": "a log size of 0 (dockerd: more than 0)",
        "docker-start-period": "a start period dockerd refuses: below 0, or one term above 0 and under 1ms "
                               "(recipegen checks sums too)"}
NO_NUL = {"$ref": "#/definitions/noNul"}


def _ours(entry: Any) -> bool:
    return entry == NO_NUL or (isinstance(entry, dict) and str(entry.get("$comment", "")).startswith(EDITORS_ONLY))


def _closed(pattern: str) -> bool:
    """An anchored pattern of explicit classes (no `.`, `[^`, `\\S`) lets no NUL through."""
    return pattern.endswith("$") and not re.search(r"\[\^|\\S|(?<!\\)\.", pattern)


def _walk(node: Any, path: tuple[Any, ...]) -> None:
    if isinstance(node, list):
        for i, value in enumerate(node):
            _walk(value, path + (i,))
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key not in ("allOf", "not"):
            _walk(value, path + (key,))
    if path and path[-1] == "noNul":
        return
    entries = [e for e in node.get("allOf", []) if not _ours(e)]
    if node.get("format") in EDITOR_REFUSALS:
        entries.append({"$comment": f"{EDITORS_ONLY} {WHAT[node['format']]}",
                        "not": {"type": "string", "pattern": EDITOR_REFUSALS[node["format"]]}})
    types = node.get("type")
    if (types == "string" or isinstance(types, list) and "string" in types) and not (
            "enum" in node or "const" in node or _closed(node.get("pattern", ""))):
        entries.append(NO_NUL)
    if path[-3:] == ("mount", "properties", "container"):
        entries.append({"$comment": f"{EDITORS_ONLY} the container's root, `/` however written (Docker refuses it)",
                        "not": {"type": "string", "pattern": CONTAINER_ROOT}})
    if entries:
        node["allOf"] = entries
    else:
        node.pop("allOf", None)


def main() -> None:
    for kind in ("recipe", "cluster"):
        path = ROOT / "schema" / f"{kind}.schema.json"
        data = json.loads(path.read_text("utf-8"))
        data.setdefault("definitions", {})["noNul"] = {
            "$comment": f"{EDITORS_ONLY} a NUL character, which no argument, variable or path can hold",
            "not": {"type": "string", "pattern": NUL}}
        _walk(data, ())
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        text = text.replace("\u00b5s|\u03bcs", "\\u00b5s|\\u03bcs")  # as the shape patterns were written
        text = re.sub(r'"allOf": \[\n\s*\{\n\s*"\$ref": "#/definitions/noNul"\n\s*\}\n\s*\]',
                      '"allOf": [{"$ref": "#/definitions/noNul"}]', text)
        path.write_text(text, "utf-8")


if __name__ == "__main__":
    main()
