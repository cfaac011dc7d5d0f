"""Sizes and durations read exactly as Docker and Compose read them (Go), so a value they would refuse at `up`
is refused at `validate`: the JSON Schemas name these checks as formats (`docker-size`, `go-duration`).
"""

from __future__ import annotations

import re

INT64_MAX = 2**63 - 1

# go-units RAMInBytes (shm_size, tmpfs size): binary multiples, case-insensitive, an optional `b` or `ib`
# after the unit (`32g`, `32G`, `32gb`, `32GiB`); the schema's pattern is this shape.
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(?:([kmgtp])(?:i?b)?|b)?", re.I)


def size_bytes(text: str) -> int | None:
    """Bytes of a Docker size, as Go's int64 holds them; None when Docker would refuse it or it overflows."""
    match = _SIZE.fullmatch(text)
    if not match:
        return None
    number = match[1]
    scale = 1024 ** ("kmgtp".index(match[2].lower()) + 1) if match[2] else 1
    whole, _, fraction = number.partition(".")
    value = int(whole) * scale + (int(fraction) * scale) // 10 ** len(fraction) if fraction else int(whole) * scale
    return value if value <= INT64_MAX else None


def size_fits(text: str) -> bool:
    """False only for a well-formed size beyond int64 bytes (the shape is the schema pattern's to report)."""
    return not _SIZE.fullmatch(text) or size_bytes(text) is not None


# time.ParseDuration's units; `µs` is U+00B5 (micro sign), `μs` U+03BC (Greek mu): Go takes both.
_UNIT_NS = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9,
            "h": 3600 * 10**9}
_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")


def duration_ns(text: str) -> int | None:
    """Nanoseconds of a Go duration (`90s`, `1h30m`, `1.5h`, `300ms`, `2us`, `0`); None where Go's
    time.ParseDuration returns an error (no unit, an unknown unit, a bare `.`, more than int64 nanoseconds)."""
    body = text[1:] if text[:1] in ("-", "+") else text
    if body == "0":
        return 0
    if not body:
        return None
    total, pos = 0, 0
    while pos < len(body):
        part = _PART.match(body, pos)
        if part is None or part.end() == pos:
            return None
        whole, fraction, unit = part[1], part[2], part[3]
        if not whole and not fraction or unit not in _UNIT_NS:  # `.s` has no digits; `1.` alone is fine in Go
            return None
        scale = _UNIT_NS[unit]
        total += int(whole or 0) * scale + (int(fraction) * scale // 10 ** len(fraction) if fraction else 0)
        pos = part.end()
    limit = INT64_MAX + (1 if text.startswith("-") else 0)
    return (-total if text.startswith("-") else total) if total <= limit else None


# The shape of a Go duration (the schema's pattern); duration_ns adds the int64 range.
DURATION_SHAPE = re.compile(r"[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h))+)")


def duration_fits(text: str) -> bool:
    """False only for a well-formed duration beyond int64 nanoseconds."""
    return not DURATION_SHAPE.fullmatch(text) or duration_ns(text) is not None
