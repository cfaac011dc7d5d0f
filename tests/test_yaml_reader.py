"""The read-back parser (verify.read_yaml) gives back every value the renderer writes, as Compose reads it.

yaml-rs 0.1 typed quoted "2024-05-01" as a date, so `build` crashed after `validate` said ok. The property: any
string a recipe can hold, rendered as a value or as a key, reads back as that very string ($ doubled: Compose
interpolates `$` and the renderer escapes it on purpose).
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from generator.render.templates import key, yaml_scalar
from generator.write.verify import read_yaml

DATE_LIKE = ["2024-05-01", "12:30:00", "2024-05-01T00:00:00Z", "2024-05-01 10:00:00.5+02:00", "1:30", "190:20:30",
             "2001-12-14t21:59:43.10-05:00", "20240501", "on", "off", "yes", "no", "y", "n", "~", "null", "NULL",
             "True", "0x1F", "0o17", "017", "1_000", ".inf", ".NaN", "1e3", "<<", "="]
TEXT = st.one_of(st.sampled_from(DATE_LIKE), st.text(st.characters(exclude_categories=["Cs"]), max_size=30))


@given(TEXT)
@settings(max_examples=400, deadline=None)
@example("2024-05-01")
def test_value_reads_back_as_the_string(value: str) -> None:
    got = read_yaml(f"v: {yaml_scalar(value)}\n")["v"]
    assert type(got) is str and got == value.replace("$", "$$")


@given(st.one_of(st.sampled_from(DATE_LIKE), st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)))
@settings(max_examples=200, deadline=None)
def test_key_reads_back_as_the_string(name: str) -> None:
    got = list(read_yaml(f"{yaml_scalar(key(name))}: x\n"))
    assert got == [name] and type(got[0]) is str


@pytest.mark.parametrize("plain, want", [("on", "on"), ("2024-05-01", "2024-05-01"), ("true", True), ("-1", -1),
                                          ("all", "all"), ("", None)])
def test_plain_scalars_as_compose_reads_them(plain: str, want: object) -> None:
    got = read_yaml(f"v: {plain}\n")["v"]
    assert got == want and type(got) is type(want)


def test_repeated_key_is_an_error() -> None:
    """yaml.v3 refuses it ("mapping key already defined"): keeping the last would hide a renderer bug."""
    with pytest.raises(ValueError):
        read_yaml("a: 1\na: 2\n")
