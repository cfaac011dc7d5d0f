"""`recipegen models`: the recipe's model and draft models on every node it uses, copied node to node."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from generator.cli.compile import cluster_option, compile_recipe, inputs
from generator.cli.hold import holding, lock_wait_option

if TYPE_CHECKING:
    from rich.progress import TaskID

    from generator.deploy.targets import CompiledDeployment
    from generator.plan.types import RecipePlan
    from generator.transfer.helpers import Peer


class _View:
    """Per-node progress (bytes, rate, ETA) with rich on a terminal; a line per node start and end otherwise."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                   TransferSpeedColumn)

        self.console = Console(stderr=True)
        self.tty = sys.stderr.isatty()
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                 TransferSpeedColumn(), TimeRemainingColumn(), console=self.console,
                                 disable=not self.tty)
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self) -> "_View":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)

    def start(self, node: str, model: str, total: int) -> None:
        self.tasks[node] = self.progress.add_task(f"{node} {model}", total=total)
        if not self.tty:
            click.echo(f"{node}: receiving {model} ({total} bytes)", err=True)

    def advance(self, node: str, done: int) -> None:
        if node in self.tasks:
            self.progress.update(self.tasks[node], completed=done)

    def note(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)


@click.command()
@click.argument("recipe")
@cluster_option
@lock_wait_option
def models(recipe: str, cluster_path: Path | None, lock_wait: float) -> None:
    """Put RECIPE's model and draft models (at its --revision, else main) in the Hugging Face cache of every
    node it uses: copied node to node over the fabric addresses by helper containers of the recipe's image,
    resumable, a second run copies nothing; downloaded on one node first when no node has a model."""
    from generator.deploy.targets import OnNode
    from generator.transfer.helpers import peers

    given = inputs(cluster_path, None, (recipe,))
    plan, _, _ = compile_recipe(recipe, given)
    with holding([OnNode(n.node) for n in plan.nodes], plan.recipe.id, f"recipegen models {plan.recipe.id}",
                 lock_wait, None, cluster_path):
        placed = place_models(plan, peers(plan.nodes))
    if not placed:
        sys.exit(1)


def place_models(plan: RecipePlan, targets: list[Peer]) -> bool:
    """`models` for a compiled recipe: progress, the summary table, failed nodes named. False on failure;
    Ctrl-C exits 130 once every helper container is gone."""
    from rich.console import Console
    from rich.table import Table

    from generator.transfer.models import human_size, revision, sync_models

    began = time.monotonic()
    try:
        with _View() as view:
            results = sync_models(targets, view, revision(plan.recipe), plan.cluster.transfer_port)
    except KeyboardInterrupt:
        click.echo(f"{plan.recipe.id}: interrupted; every helper container was removed (run again to resume)",
                   err=True)
        sys.exit(130)
    table = Table("node", "model", "result", "bytes", "time", "rate", title=f"models of {plan.recipe.id}")
    for r in results:
        rate = f"{human_size(int(r.bytes / r.seconds))}/s" if r.bytes and r.seconds else "-"
        table.add_row(r.node, r.model, r.action if not r.error else f"{r.action}: {r.error}",
                      human_size(r.bytes) if r.bytes else "-", f"{r.seconds:.2f}s" if r.seconds else "-", rate)
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    failed = sorted({r.node for r in results if r.failed})
    if failed:
        click.echo(f"{plan.recipe.id}: models not in place on {', '.join(failed)} "
                   f"({time.monotonic() - began:.0f}s)", err=True)
    return not failed


def sync_before_up(dep: CompiledDeployment) -> None:
    """`up --sync`: the image, then the models, on every node first; exit 1 naming what failed."""
    from generator.deploy.images import sync_images
    from generator.transfer.helpers import peers

    bad = [r for r in sync_images(dep) if r.finding]
    for r in bad:
        click.echo(f"{r.node}: image: {r.action}: {r.finding.message if r.finding else ''}", err=True)
    if bad:
        click.echo(f"{dep.project}: images not in place on {', '.join(r.node for r in bad)}; nothing was started",
                   err=True)
        sys.exit(1)
    if not place_models(dep.plan, peers(dep.plan.nodes)):
        click.echo(f"{dep.project}: nothing was started", err=True)
        sys.exit(1)

