"""Where a value was written: the one type every stage shares to point at a file and line.

It lives below the loader (tomldoc makes Origins) and the data objects (model holds them), so neither imports
the other for it.
"""

from __future__ import annotations

from typing import Callable


class Origin:
    """Where a value was written: a file and line, and which layer that file is (for `explain`).

    The line is found on first use (`locate`): positions cost a second parse of the file, which only
    diagnostics and `explain` need, never a clean build.
    """

    __slots__ = ("layer", "file", "_line", "_locate")

    def __init__(self, layer: str, file: str | None = None, line: int | None = None,
                 locate: Callable[[], int] | None = None):
        self.layer = layer  # "recipe", "parent recipe <id>", "cluster", "node <name>", "compiler", "default"
        self.file = file
        self._line = line
        self._locate = locate

    @property
    def line(self) -> int | None:
        if self._line is None and self._locate is not None:
            self._line, self._locate = self._locate(), None
        return self._line

    def _key(self) -> tuple[str, str | None, int | None]:
        return self.layer, self.file, self.line

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Origin) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Origin({self.layer!r}, {self.file!r}, {self.line!r})"

    def __str__(self) -> str:
        where = f" ({self.file}:{self.line})" if self.file and self.line else (f" ({self.file})" if self.file else "")
        return self.layer + where


COMPILER = Origin("compiler")
DEFAULT = Origin("default")
