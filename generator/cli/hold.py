"""The lock every command that changes nodes holds while it works (generator/deploy/lock.py), as the CLI shows
it: `--lock-wait`, and a refusal naming each holder and, for a stale lock, the command that breaks it."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from generator.cli.params import seconds

if TYPE_CHECKING:
    from generator.deploy.targets import OnNode

lock_wait_option = click.option(
    "--lock-wait", type=str, callback=seconds(), default="0", show_default=True, metavar="SECONDS",
    help="How long to wait for nodes another recipegen command (from any machine) is changing; 0: refuse at once, "
         "naming it.")


@contextmanager
def holding(nodes: Sequence[OnNode], recipe: str, command: str, wait: float, bound: float | None,
            cluster_path: Path | None) -> Iterator[None]:
    """Hold the nodes for the block; when another command holds one: say who, exit 1, nothing done."""
    from generator.deploy.lock import Claim, NodesBusy, busy_lines
    from generator.deploy.lock import holding as hold

    try:
        with hold(nodes, Claim.of(recipe, command, bound), wait):
            yield
    except NodesBusy as exc:
        for line in busy_lines(exc, f" --cluster {cluster_path}" if cluster_path else ""):
            click.echo(line, err=True)
        click.echo(f"{recipe or 'cluster'}: {len(exc.holders)} node(s) busy; nothing was done", err=True)
        sys.exit(1)
