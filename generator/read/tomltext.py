"""TOML text recipegen writes itself (`cluster probe`'s proposal, `recipegen import`'s recipes and cluster files):
one spelling of a string, a key and a number, so every writer escapes alike and what it writes reads back as
exactly the value."""

from __future__ import annotations

import re

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# TOML's basic strings refuse control characters; U+2028/U+2029 are escaped too, as editors show them as breaks.
_ESCAPE = re.compile("[\x00-\x1f\x7f\u2028\u2029]")
_SHORT = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def basic_string(value: str) -> str:
    body = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + _ESCAPE.sub(lambda m: _SHORT.get(m[0], f"\\u{ord(m[0]):04x}"), body) + '"'


def key(name: str) -> str:
    """A bare key where TOML allows one, else a quoted key."""
    return name if _BARE_KEY.fullmatch(name) else basic_string(name)


def number(value: int | float) -> str:
    """An int as written; a float as the shortest text that reads back as it (TOML reads Python's `1e-05`,
    `inf`, `-inf` and `nan`)."""
    return str(value) if isinstance(value, int) else repr(value)
