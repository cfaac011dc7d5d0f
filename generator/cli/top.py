"""`recipegen top`: every recipe of the project, live, a row each: its nodes, state, tokens/s, requests running and
waiting, KV cache in use, TTFT p50 and the head container's restarts. It reads each head's /metrics directly (no
Prometheus needed), all heads at once, and redraws in place (rich Live); in a pipe it prints one table and exits.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from generator.cli.compile import cluster_option, inputs

if TYPE_CHECKING:
    from rich.table import Table

    from generator.deploy.enginemetrics import Row, Watch


def _fmt(value: float | None, form: str) -> str:
    return "-" if value is None else form.format(value)


def table(rows: list[Row], title: str) -> Table:
    from rich.table import Table

    colours = {"serving": "green", "idle": "cyan", "stalled": "bold red", "down": "red", "no answer": "bold red"}
    grid = Table("recipe", "nodes", "state", "tok/s", "running", "waiting", "KV %", "TTFT p50", "restarts",
                 title=title)
    for r in rows:
        colour = colours.get(r.state, "yellow")
        grid.add_row(r.recipe, r.nodes, f"[{colour}]{r.state}[/]", _fmt(r.tokens_per_s, "{:.1f}"),
                     _fmt(r.running, "{:.0f}"), _fmt(r.waiting, "{:.0f}"),
                     _fmt(None if r.kv is None else 100 * r.kv, "{:.1f}"),
                     _fmt(None if r.ttft_p50 is None else 1000 * r.ttft_p50, "{:.0f} ms"), r.restarts)
    return grid


def watches(recipes: tuple[str, ...], cluster_path: Path | None) -> list[Watch]:
    from generator.deploy.enginemetrics import Watch
    from generator.plan.metrics import engine_target
    from generator.resolve.load import load_recipe

    given = inputs(cluster_path, None, recipes)
    found = []
    for path in given.project.recipe_paths(recipes):
        target = engine_target(load_recipe(path, given.project.recipes_dir), given.cluster)
        head = next(n for n in given.cluster.nodes if n.name == target.head)
        found.append(Watch(target, f"{'https' if target.tls else 'http'}://{head.ssh_host}:{target.port}",
                           context=head.context))
    return found


def _restarts(watch: Watch) -> None:
    """The head container's restart count (docker inspect through its node's context), when docker answers."""
    from generator.deploy.docker import Docker, DockerError
    from generator.deploy.names import container_name

    try:
        info = Docker(watch.context).inspect_container(container_name(watch.target.recipe_id))
    except (DockerError, OSError):
        watch.restarts = "?"
        return
    watch.restarts = "-" if info is None else str(info.get("RestartCount", "?"))


def refresh(found: list[Watch], with_restarts: bool) -> list[Row]:
    from generator.deploy.enginemetrics import row
    from generator.deploy.targets import each

    def one(watch: Watch) -> None:
        watch.read()
        if with_restarts:
            _restarts(watch)

    each(found, one, key=lambda w: w.target.recipe_id)
    now = time.monotonic()
    return [row(w, now) for w in found]


@click.command()
@click.argument("recipes", nargs=-1)
@cluster_option
@click.option("--interval", default=2.0, show_default=True, help="Seconds between two reads of every head.")
@click.option("--once", is_flag=True, help="Read twice (one interval apart, for the rates), print, exit.")
@click.option("--no-docker", is_flag=True, help="Do not ask the nodes' docker for restarts (only HTTP).")
def top(recipes: tuple[str, ...], cluster_path: Path | None, interval: float, once: bool, no_docker: bool) -> None:
    """A live view of every recipe's head (RECIPES: only these): state, tok/s, requests, KV cache, TTFT, restarts."""
    from rich.console import Console
    from rich.live import Live

    found = watches(recipes, cluster_path)
    title = f"recipegen top ({len(found)} recipe(s), every {interval:g}s; Ctrl-C ends)"
    refresh(found, not no_docker)
    if once or not sys.stdout.isatty():
        time.sleep(interval)
        Console(width=None if sys.stdout.isatty() else 200).print(table(refresh(found, not no_docker), title))
        return
    try:
        with Live(table(refresh(found, False), title), refresh_per_second=4, screen=False) as live:
            while True:
                time.sleep(interval)
                live.update(table(refresh(found, not no_docker), title))
    except KeyboardInterrupt:
        pass
