"""Tables on stdout: rich, full width on a terminal, 200 columns in a pipe (so scripts can grep whole rows)."""

from __future__ import annotations

import sys


def table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(*columns, title=title)
    for row in rows:
        table.add_row(*row)
    Console(width=None if sys.stdout.isatty() else 200).print(table)
