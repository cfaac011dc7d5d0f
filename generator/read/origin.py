"""Where a value was written: the one type every stage shares to point at a file and line.

It lives below the loader (tomldoc makes Origins) and the data objects (model holds them), so neither imports
the other for it.
"""

from __future__ import annotations

from typing import Any, Callable


class Origin:
    """Where a value was written: a file, line and column, and which layer that file is (for `explain`).

    The position is found on first use (`locate`, giving a line or an object with .line and .col): positions
    cost a second parse of the file, which only diagnostics and `explain` need, never a clean build. Two
    origins are equal by layer, file and line.
    """

    __slots__ = ("layer", "file", "_line", "_col", "_locate")

    def __init__(self, layer: str, file: str | None = None, line: int | None = None,
                 locate: Callable[[], Any] | None = None, col: int | None = None):
        self.layer = layer  # "recipe", "parent recipe <id>", "cluster", "node <name>", "compiler", "default"
        self.file = file
        self._line = line
        self._col = col
        self._locate = locate

    def _resolve(self) -> None:
        if self._line is None and self._locate is not None:
            found, self._locate = self._locate(), None
            self._line, self._col = (found, None) if isinstance(found, int) else (found.line, found.col)

    @property
    def line(self) -> int | None:
        self._resolve()
        return self._line

    @property
    def col(self) -> int | None:
        self._resolve()
        return self._col

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
