"""The one TOML spelling of strings, keys and numbers (`cluster probe`, `recipegen import`) reads back as the value."""

from __future__ import annotations

import tomllib

from hypothesis import given
from hypothesis import strategies as st

from generator.read import tomltext


@given(name=st.text(min_size=1), value=st.text())
def test_any_key_and_string_read_back_exactly(name: str, value: str) -> None:
    assert tomllib.loads(f"{tomltext.key(name)} = {tomltext.basic_string(value)}\n") == {name: value}


@given(value=st.one_of(st.integers(min_value=-2**63, max_value=2**63 - 1), st.floats(allow_nan=False)))
def test_numbers_read_back_exactly(value: int | float) -> None:
    assert tomllib.loads(f"x = {tomltext.number(value)}\n")["x"] == value


def test_every_control_character_is_escaped() -> None:
    text = tomltext.basic_string("".join(map(chr, range(0x20))) + "\x7f\u2028\u2029")
    assert all(ord(ch) >= 0x20 and ch not in "\x7f\u2028\u2029" for ch in text)
