"""What `up`, `down`, `ps`, `smoke` and `bench` say about the cluster's router (formatting only: the actions are
generator/deploy/router.py). A cluster without `[router]` (or an out/ without _router/) makes these say nothing.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from generator.cli.table import table

if TYPE_CHECKING:
    from generator.deploy.backends.router import RouterDeployment
    from generator.deploy.targets import Deployment

UP_WAIT = 15.0  # seconds for the router's health checks to see a new head (two checks at 1s, a reload)
DOWN_WAIT = 10.0


def router_of(dep: Deployment) -> RouterDeployment | None:
    """The cluster's router when it routes this recipe (`[router] recipes` may leave it out)."""
    from generator.deploy.router import router_from_out

    routed = dep.cluster.router.recipes if dep.cluster.router is not None else None
    if routed is not None and dep.project not in routed:
        return None
    return router_from_out(dep.cluster, dep.out_dir)


def after_up(dep: Deployment, swarm: bool) -> bool:
    """Bring the router up or to the current config, then wait until it routes to the recipe; False: it failed."""
    from generator.deploy.backends.router import choose_router
    from generator.deploy.router import apply, wait_backend

    router = router_of(dep)
    if router is None:
        return True
    applied = apply(router, choose_router(swarm, dep.cluster))
    for a in applied:
        click.echo(f"router {a.node}: {a.action}" if a.ok else f"router {a.node}: FAILED: {a.error}",
                   err=not a.ok)
    if not all(a.ok for a in applied):
        return False
    said = wait_backend(router, dep.project, up=True, timeout=UP_WAIT)
    ok = True
    for target in router.targets:
        health = said[target.name]
        if isinstance(health, str) or not health.up:
            ok = False
            click.echo(f"router {target.name}: does not route to {dep.project}: "
                       f"{health if isinstance(health, str) else f'{health.status} ({health.check})'}", err=True)
        else:
            click.echo(f"{dep.project}: also at {router.url(target)}/v1 (the router on {target.name})")
    return ok


def after_down(dep: Deployment, swarm: bool) -> None:
    """Say that the router took the recipe's backend out (its health checks do, within a few seconds); a router
    that is not running is not asked."""
    from dataclasses import replace

    from generator.deploy.backends.router import choose_router
    from generator.deploy.router import running_targets, wait_backend

    router = router_of(dep)
    if router is None:
        return
    router = replace(router, targets=running_targets(router, choose_router(swarm, dep.cluster)))
    for node, health in wait_backend(router, dep.project, up=False, timeout=DOWN_WAIT).items():
        if isinstance(health, str):
            click.echo(f"router {node}: {health}", err=True)
        elif health.up:
            click.echo(f"router {node}: still routes to {dep.project} ({health.status})", err=True)
        else:
            click.echo(f"router {node}: {dep.project} taken out ({health.status}, {health.check}): its models get "
                       "a 503 naming them")


def show_ps(dep: Deployment, swarm: bool) -> None:
    """The router's rows under a recipe's table: each router node, its container, this recipe's backend."""
    from generator.deploy.backends.router import choose_router
    from generator.deploy.router import status

    router = router_of(dep)
    if router is None:
        return
    rows = []
    for node in status(router, choose_router(swarm, dep.cluster)):
        health = node.backends.get(dep.project)
        backend = f"{health.status} ({health.check})" if health else (node.error or "not routed")
        rows.append([node.container.node, node.url, node.container.container, node.container.state,
                     node.container.uptime, backend])
    table(f"router ({dep.cluster.name})", ["node", "url", "container", "state", "uptime", f"{dep.project} backend"],
          rows)


def router_url(dep: Deployment) -> tuple[str, str | None]:
    """The first router node's base URL and the API key the deploying shell gives it; exit 1 without a router."""
    from generator.deploy.router import router_from_out

    router = router_of(dep)
    if router is None:
        why = ("its [router] does not route this recipe (add it to `recipes`)" if dep.cluster.router is not None
               and router_from_out(dep.cluster, dep.out_dir) is not None else
               "has no [router] built in out/ (add one to the cluster file and run `recipegen build`)")
        click.echo(f"{dep.project}: --via-router: cluster '{dep.cluster.name}' {why}", err=True)
        sys.exit(1)
    return router.url(router.targets[0]), os.environ.get(router.api_key_env) or None
