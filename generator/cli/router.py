"""What `up`, `down`, `ps`, `smoke` and `bench` say about the cluster's router: formatting only, the actions are
generator/deploy/router.py. A cluster without `[router]` (or an out/ without _router/) makes these say nothing.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from generator.cli.table import table

if TYPE_CHECKING:
    from generator.deploy.router import BackendHealth, RouterPs, RouterUp
    from generator.deploy.targets import Deployment


def _health(health: BackendHealth) -> str:
    return f"{health.status} ({health.check})"


def report_up(project: str, router: RouterUp) -> None:
    """The router step of `up`: what was done on each router node, then whether each routes to the recipe."""
    from generator.deploy.router import BackendHealth

    for a in router.applied:
        click.echo(f"router {a.node}: {a.action}" if a.ok else f"router {a.node}: FAILED: {a.error}", err=not a.ok)
    for node, health in router.routes.items():
        if isinstance(health, BackendHealth) and health.up:
            click.echo(f"{project}: also at {router.urls[node]}/v1 (the router on {node})")
        else:
            said = _health(health) if isinstance(health, BackendHealth) else health
            click.echo(f"router {node}: does not route to {project}: {said}", err=True)


def report_down(project: str, said: dict[str, BackendHealth | str]) -> None:
    """Each running router node's word on the recipe's head after `down`."""
    for node, health in said.items():
        if isinstance(health, str):
            click.echo(f"router {node}: {health}", err=True)
        elif health.up:
            click.echo(f"router {node}: still routes to {project} ({health.status}; another recipe at its head "
                       "may serve there)", err=True)
        else:
            click.echo(f"router {node}: {project} taken out ({_health(health)}): its models get a 503 naming them")


def show_ps(project: str, cluster: str, router: RouterPs) -> None:
    """The router's rows under a recipe's table: each router node, its container, this recipe's head there, and
    which recipe holds that head now (from the containers' label on the head node)."""
    held = router.holders if isinstance(router.holders, str) else ", ".join(router.holders) or "no recipe runs"
    rows = []
    for node in router.nodes:
        health = node.backends.get(router.backend or "")
        backend = _health(health) if health else (node.error or "not routed")
        rows.append([node.container.node, node.url, node.container.container, node.container.state,
                     node.container.uptime, backend, held])
    table(f"router ({cluster})", ["node", "url", "container", "state", "uptime", f"{project} head", "head held by"],
          rows)


def router_url(dep: Deployment) -> tuple[str, str | None]:
    """`--via-router`: the first router node's base URL and the API key; exit 1 (said) without a router."""
    from generator.deploy.router import router_of, via_router, without_router

    router = router_of(dep)
    if router is None:
        click.echo(f"{dep.project}: --via-router: cluster '{dep.cluster.name}' {without_router(dep)}", err=True)
        sys.exit(1)
    return via_router(router)
