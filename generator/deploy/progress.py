"""Live per-node progress of `up`: a rich table on a terminal, one line per change otherwise (CI, pipes)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from rich.live import Live
    from rich.table import Table


class LiveTable:
    """A rich table redrawn in place on a terminal (stderr); nothing drawn otherwise (CI, pipes), where the
    subclass prints a line per change instead. Subclasses draw `_table`."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self._live: Live | None = None

    def __enter__(self) -> Self:
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self._table(), console=Console(stderr=True), refresh_per_second=4)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def _table(self) -> Table:
        raise NotImplementedError


class Progress(LiveTable):
    def __init__(self, nodes: list[str], head: str) -> None:
        super().__init__()
        self.states = {n: "waiting" for n in nodes}
        self.head = head

    def update(self, node: str, state: str) -> None:
        self.states[node] = state
        if self._live is not None:
            self._live.update(self._table())
        else:
            print(f"[{time.monotonic() - self.started:6.1f}s] {node}: {state}", file=sys.stderr, flush=True)

    def _table(self) -> Table:
        from rich.table import Table

        table = Table("node", "role", "state", title=f"up ({time.monotonic() - self.started:.0f}s)")
        for node, state in self.states.items():
            table.add_row(node, "head" if node == self.head else "worker", state)
        return table
