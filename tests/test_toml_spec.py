"""recipegen reads TOML as the TOML spec has it, refusing what the editors' servers refuse.

tomllib refuses every invalid case of the toml-test suite (toml-lang/toml-test @d168c2a: all 509 files under
tests/invalid/), but it reads an integer of any size, which the spec forbids: "Arbitrary 64-bit signed integers
(from -2^63 to 2^63-1) should be accepted and handled losslessly. If an integer cannot be represented
losslessly, an error must be thrown." tombi refuses such a file ("invalid integer: number too large to fit in
target type"); recipegen must refuse it too, in one line naming the file, line and key, before it reaches out/.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from generator.diagnostics import RecipegenError
from generator.read.tomldoc import parse_toml
from helpers.corpus import Expect, assert_expected, run_inprocess

# (TOML line, the key recipegen names, whether the spec allows it)
INTEGERS = [
    ("A = 9223372036854775807", "A", True),
    ("A = -9223372036854775808", "A", True),
    ("A = 0x7FFFFFFFFFFFFFFF", "A", True),
    ("A = 99999999999999999999", "A", False),
    ("A = 9223372036854775808", "A", False),
    ("A = -9223372036854775809", "A", False),
    ("A = +9_223_372_036_854_775_808", "A", False),
    ("A = 0xFFFFFFFFFFFFFFFF", "A", False),
    ("A = 0o1777777777777777777777", "A", False),
    ("A = 0b1" + "0" * 63, "A", False),
    ("A = [1, 99999999999999999999]", "A[1]", False),
    ("A = { b = [{ c = 99999999999999999999 }] }", "A.b[0].c", False),
]


@pytest.mark.parametrize("line, key, allowed", INTEGERS, ids=[line for line, _, _ in INTEGERS])
def test_integers_beyond_int64_are_refused(line: str, key: str, allowed: bool) -> None:
    text = f"x = 1\n{line}\n"
    if allowed:
        parse_toml(text, Path("t.toml"))
        return
    with pytest.raises(RecipegenError) as caught:
        parse_toml(text, Path("t.toml"))
    [diag] = caught.value.diagnostics
    assert (diag.line, diag.key) == (2, key), diag
    assert "64-bit" in diag.message and "\n" not in diag.message, diag.message


@pytest.mark.parametrize("line, key, allowed", INTEGERS, ids=[line for line, _, _ in INTEGERS])
def test_tombi_judges_them_alike(line: str, key: str, allowed: bool, tmp_path: Path) -> None:
    """tombi (the editors' server) as the oracle: it refuses exactly the integers recipegen refuses."""
    tombi = shutil.which("tombi")
    if tombi is None:
        if os.environ.get("CI"):
            pytest.fail("`tombi` is not installed; CI must have it (pip install -e '.[test]')")
        pytest.skip("`tombi` is not installed (pip install tombi)")
    (tmp_path / "t.toml").write_text(f"x = 1\n{line}\n", "utf-8")
    run = subprocess.run([tombi, "lint", "--offline", "t.toml"], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "NO_COLOR": "1"}, timeout=60)
    assert (run.returncode == 0) == allowed, run.stdout + run.stderr


def test_env_integer_beyond_int64_fails_validate(tmp_path: Path) -> None:
    """The issue's case: it passed `validate` and was written into out/."""
    path = tmp_path / "x" / "recipe.toml"
    path.parent.mkdir()
    path.write_text('engine = "vllm"\ndocker_image = "i"\nmodel = "org/m"\n[env]\nA = 99999999999999999999\n',
                    "utf-8")
    run = run_inprocess("validate", str(path))
    assert_expected(run, [Expect(path, 5, "env.A", None)], "validate")
    assert "64-bit" in run.stderr
