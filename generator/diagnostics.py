"""Errors and lint findings as values: they travel up to the CLI, which prints them one per line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path


# Characters that would end or hide the line a diagnostic promises (Python's str.splitlines breaks at \x1c-\x1e,
# \x85, U+2028 and U+2029 too; \x1b starts terminal escapes): a recipe's value quoted in a message shows them
# escaped, as Python's repr does. Tab stays.
_NOT_ON_ONE_LINE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    return _NOT_ON_ONE_LINE.sub(lambda m: repr(m[0])[1:-1], text)


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"  # information a rule found (a model's KV capacity): never fails, not even with --strict


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One finding, compiler style: `file:line:col: severity[rule]: key: message`."""

    file: str
    line: int | None
    col: int | None
    key: str | None
    message: str
    severity: Severity = Severity.ERROR
    rule: str | None = None

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}:{self.col or 1}"
        kind = self.severity.value + (f"[{self.rule}]" if self.rule else "")
        key = f"{self.key}: " if self.key else ""
        return one_line(f"{where}: {kind}: {key}{self.message}")

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def fails(self, strict: bool) -> bool:
        """Errors fail; warnings fail with --strict; notes never."""
        return self.is_error or (strict and self.severity is Severity.WARNING)


class ExternalError(Exception):
    """A program recipegen drives (the docker CLI) failed; its message is one line for the user."""


class RecipegenError(Exception):
    """Raised with the diagnostics that stop a command; the CLI prints them and exits 1."""

    def __init__(self, diagnostics: list[Diagnostic] | Diagnostic):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics = diagnostics
        super().__init__("\n".join(map(str, diagnostics)))


def display_path(path: str | Path) -> str:
    """Paths as the user typed them when under the working directory, relative; absolute otherwise."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)
