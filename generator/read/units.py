"""Sizes and durations read exactly as Docker and Compose read them (Go), so a value they would refuse at `up`
is refused at `validate`, and one they accept is accepted: the JSON Schemas name these checks as formats
(`docker-size`, `docker-log-size`, `go-duration`, `docker-start-period`; generator/read/schemas.py).
"""

from __future__ import annotations

import math
import re

INT64_MAX = 2**63 - 1

# go-units (v0.5.0, what Compose and Docker 23+ vendor) parseSize, the one parser behind RAMInBytes (binary
# multiples: Compose's shm_size and mem_limit, the stack's memory limit) and FromHumanSize (decimal: dockerd's
# json-file `max-size`). Reproduced step by step, on UTF-8 bytes as Go indexes strings: the number is everything
# up to the last digit, `.` or space (a space there is dropped), read by strconv.ParseFloat; the suffix is empty,
# `b`, or a unit letter with an optional `b` or `ib`, any case. So `32g`, `32 GiB`, `1.5t`, `1e3k`, `+5` are
# sizes and `32gigs`, `-1`, `32i` are not. int64(float) beyond int64 is undefined in Go: refused here.
_BINARY = {c: 1024 ** (i + 1) for i, c in enumerate("kmgtp")}
_DECIMAL = {c: 1000 ** (i + 1) for i, c in enumerate("kmgtp")}
_GO_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_GO_HEX = re.compile(r"[+-]?0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+")
_GO_SPECIAL = re.compile(r"[+-]?(inf|infinity|nan)", re.I)


def _underscores_ok(text: str) -> bool:
    """strconv's underscoreOK: an underscore only between digits, or between a base prefix and a digit."""
    body = text[1:] if text[:1] in "+-" else text
    hexa = body[:2].lower() in ("0x", "0b", "0o")
    saw, start = ("0", 2) if hexa else ("^", 0)
    for ch in body[start:]:
        if ch.isascii() and (ch.isdigit() or body[:2].lower() == "0x" and ch.lower() in "abcdef"):
            saw = "0"
        elif ch == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
    return saw != "_"


def _go_parse_float(text: str) -> float | None:
    """strconv.ParseFloat(text, 64); None where it returns an error (a syntax error or out of range)."""
    if "_" in text:
        if not _underscores_ok(text):
            return None
        text = text.replace("_", "")
    if _GO_DECIMAL.fullmatch(text):
        value = float(text)
    elif _GO_HEX.fullmatch(text):
        try:
            value = float.fromhex(text)
        except (ValueError, OverflowError):
            return None
    elif _GO_SPECIAL.fullmatch(text):
        return float(text)
    else:
        return None
    return None if math.isinf(value) else value  # overflow: ErrRange


def _parse_size(text: str, units: dict[str, int]) -> float | None:
    raw = text.encode("utf-8")
    sep = max(raw.rfind(c) for c in b"0123456789. ")
    if sep == -1:
        return None
    number, suffix = (raw[:sep + 1], raw[sep + 1:]) if raw[sep:sep + 1] != b" " else (raw[:sep], raw[sep + 1:])
    size = _go_parse_float(number.decode("utf-8", "surrogateescape"))
    if size is None or size < 0:
        return None
    if suffix:
        if len(suffix) > 3:
            return None
        lower = suffix.decode("utf-8", "surrogateescape").lower().encode("utf-8", "surrogateescape")
        if lower[:1] == b"b":
            if len(lower) > 1:
                return None
        else:
            unit = units.get(lower[:1].decode("latin-1"))
            if unit is None or len(lower) == 2 and lower[1:] != b"b" or len(lower) == 3 and lower[1:] != b"ib":
                return None
            size *= unit
    return size


def _int64(size: float | None) -> int | None:
    if size is None or math.isnan(size) or size >= 2.0**63:
        return None
    return int(size)  # Go's int64(float64) truncates toward zero


# The schemas' patterns (editors check these; tests/test_units.py keeps them equal): a superset of what the
# parsers below accept, so a value of the wrong shape gets the pattern's message and the formats judge the rest.
SIZE_SHAPE = re.compile(r"[+0-9._]([0-9._a-zA-Z+-]*[0-9.])? ?[^0-9. ]{0,3}")
DURATION_SHAPE = re.compile(r"[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|" "\u00b5s|\u03bcs" r"|ms|s|m|h))+)")


# What editors can refuse of the formats' rules, as patterns the schemas state (`"not": {"pattern": ...}` in an
# `allOf` entry whose $comment begins "editors:"; recipegen validates with the formats themselves, exactly, and
# leaves those entries out). Each matches only values the formats refuse (tests/test_schema_agrees.py), the forms
# a pattern can tell; the rest is the description's to say.
# A size beyond int64 bytes: more digits than the unit allows (10^19 bytes, 10^16 k, ... 10^4 p, binary
# multiples), or a mantissa of at least 1 times 10^19 or more.
_UNIT = r" ?({u}|{u}[bB]|{u}[iI][bB])"
SIZE_BEYOND_INT64 = ("^\\+?0*(" + "|".join(
    [r"[1-9][0-9]{19,}(\.[0-9]*)? ?[bB]?"]
    + [f"[1-9][0-9]{{{digits},}}(\\.[0-9]*)?" + _UNIT.format(u=f"[{u}{u.upper()}]")
       for u, digits in zip("kmgtp", (16, 13, 10, 7, 4))]
    + [r"[1-9][0-9]*(\.[0-9]*)?[eE]\+?0*(19|[2-9][0-9]|[1-9][0-9]{2,}) ?([bB]|[kKmMgGtTpP]([bB]|[iI][bB])?)?"])
    + ")$")
# A log size of 0 bytes (dockerd: "max-size must be a positive number").
LOG_SIZE_ZERO = r"^\+?(0+\.?0*|\.0+) ?([bB]|[kKmMgGtTpP]([bB]|[iI][bB])?)?$"
# A start period dockerd refuses: negative, or one term above 0 and under 1ms (a sum of terms is left to the
# format: 500us500us is 1ms). Go drops fractions of a nanosecond, so `0.5ns` is 0 and fine.
_MICRO = "(us|\u00b5s|\u03bcs)"


def _nonzero_within(places: int) -> str:
    """A fraction's digits with one above 0 among the first `places`: (0.)[1-9], 0[1-9], 00[1-9] ..."""
    return "(" + "|".join("0" * i + "[1-9]" for i in range(places)) + ")[0-9]*"


START_PERIOD_UNDER_1MS = ("^(" + "|".join([
    r"-0*[1-9][0-9]*(\.[0-9]*)?(ns|us|\u00b5s|\u03bcs|ms|s|m|h).*",  # below 0 (by 1ns at least)
    r"\+?0*[1-9][0-9]{0,5}(\.[0-9]*)?ns",  # 1ns to 999999ns
    r"\+?0*[1-9][0-9]{0,2}(\.[0-9]*)?" + _MICRO,  # 1us to 999.9us
    r"\+?0*\." + _nonzero_within(3) + _MICRO,  # 0.001us to 0.999us
    r"\+?0*\." + _nonzero_within(6) + "ms",  # 0.000001ms to 0.999ms
    r"\+?0*\.000" + _nonzero_within(6) + "s",  # 0.000000001s to 0.000999s
]) + ")$")
EDITOR_REFUSALS = {"docker-size": SIZE_BEYOND_INT64, "docker-log-size": LOG_SIZE_ZERO,
                   "docker-start-period": START_PERIOD_UNDER_1MS}


def size_bytes(text: str) -> int | None:
    """units.RAMInBytes: bytes of a Docker size (binary multiples); None where Docker refuses it."""
    return _int64(_parse_size(text, _BINARY))


def size_overflows(text: str) -> bool:
    """A size Docker parses whose bytes int64 cannot hold (Go's conversion is then undefined)."""
    return _parse_size(text, _BINARY) is not None and size_bytes(text) is None


def human_size(text: str) -> int | None:
    """units.FromHumanSize: bytes with decimal multiples (`100m` is 100,000,000); None where Docker refuses it."""
    return _int64(_parse_size(text, _DECIMAL))


def log_size_ok(text: str) -> bool:
    """dockerd's json-file `max-size`: FromHumanSize, and more than 0 ("max-size must be a positive number");
    `""` leaves logging to the daemon (recipegen then writes no option)."""
    value = human_size(text)
    return text == "" or value is not None and value > 0


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


def duration_ok(text: str) -> bool:
    """time.ParseDuration accepts it (within int64 nanoseconds)."""
    return duration_ns(text) is not None


# dockerd refuses a healthcheck start period between 0 and 1 ms, negative ones included ("StartPeriod in
# Healthcheck cannot be less than 1ms"); 0 means none.
HEALTH_MIN_NS = 1_000_000


def start_period_ok(text: str) -> bool:
    ns = duration_ns(text)
    return ns is not None and (ns == 0 or ns >= HEALTH_MIN_NS)
