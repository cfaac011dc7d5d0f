"""Shared by the tests: moved from tests/test_corpus.py, which uses them too."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from click.testing import CliRunner
from generator.cli import main

TESTS = Path(__file__).resolve().parent.parent


ROOT = TESTS.parent


# file:line:col: severity[rule]: message   or, where no line applies,   file: severity[rule]: message
DIAG = re.compile(r"^(?P<file>.+?)(?::(?P<line>\d+):(?P<col>\d+))?: (?P<sev>error|warning)(?:\[[\w.-]+\])?: "
                  r"(?P<rest>.*)$")


@dataclass(frozen=True)
class Expect:
    file: Path
    line: int
    key: str
    text: str | None
    col: int | None = None


@dataclass
class Run:
    exit_code: int
    stdout: str
    stderr: str
    crash: str | None = None  # a Python exception that escaped the CLI, formatted

    @property
    def everything(self) -> str:
        return self.stdout + self.stderr + (self.crash or "")

    def diagnostics(self) -> list[re.Match]:
        return [m for m in map(DIAG.match, self.stderr.splitlines()) if m]


def run_inprocess(*args: str) -> Run:
    try:
        runner = CliRunner(mix_stderr=False)  # click 8.1
    except TypeError:
        runner = CliRunner()  # click >= 8.2 keeps stderr apart by itself
    result = runner.invoke(main, list(args))
    crash = None
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        crash = "Traceback (most recent call last):\n" + "".join(traceback.format_exception(*result.exc_info))
    return Run(result.exit_code, result.stdout, result.stderr, crash)


def shown(path: Path | str) -> str:
    """The path as the tool prints it when run from ROOT: relative under the working directory, else as given."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def assert_clean_failure(run: Run, context: str) -> list[re.Match]:
    """Exit code 1, no traceback, and every stderr line a one-line diagnostic; returns the diagnostics."""
    out = f"{context}\n--- exit {run.exit_code}\n--- stdout\n{run.stdout}--- stderr\n{run.stderr}{run.crash or ''}"
    assert run.crash is None, f"an exception escaped the CLI:\n{out}"
    assert "Traceback" not in run.everything, f"a traceback was printed:\n{out}"
    assert run.exit_code == 1, f"exit code {run.exit_code}, expected 1:\n{out}"
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert lines, f"no diagnostic printed:\n{out}"
    stray = [line for line in lines if not DIAG.match(line)]
    assert not stray, f"stderr lines that are not `file:line:col: severity: message` diagnostics: {stray}\n{out}"
    return run.diagnostics()


def _mentions(rest: str, key: str) -> bool:
    return re.search(rf"(?<![\w.-]){re.escape(key)}(?![\w-])", rest) is not None


def assert_expected(run: Run, expects: tuple[Expect, ...] | list[Expect], context: str) -> None:
    diags = assert_clean_failure(run, context)
    errors = [d for d in diags if d["sev"] == "error"]
    missing = []
    for e in expects:
        want_file = shown(e.file)
        hit = [d for d in errors if d["file"] == want_file and d["line"] == str(e.line) and _mentions(d["rest"], e.key)
               and (e.text is None or e.text in d["rest"]) and (e.col is None or d["col"] == str(e.col))]
        if not hit:
            where = f"{e.line}:{e.col}" if e.col else f"{e.line}"
            missing.append(f"{want_file}:{where}: {e.key}" + (f" ... {e.text}" if e.text else ""))
    assert not missing, (f"{context}: expected diagnostics not printed:\n  " + "\n  ".join(missing)
                         + "\n--- stderr\n" + run.stderr)
    assert len(errors) >= len(expects), f"{context}: {len(errors)} error(s) for {len(expects)} expected:\n{run.stderr}"
