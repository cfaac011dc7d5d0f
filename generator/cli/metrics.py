"""What `up`, `down` and `ps` say about the cluster's metrics stack (formatting only: the actions are
generator/deploy/metrics.py). A cluster without `[metrics]` (or an out/ without _metrics/) makes these say nothing.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from generator.cli.table import table

if TYPE_CHECKING:
    from generator.deploy.metrics import MetricsDeployment
    from generator.deploy.targets import Deployment


def metrics_of(dep: Deployment) -> MetricsDeployment | None:
    from generator.deploy.metrics import metrics_from_out

    return metrics_from_out(dep.cluster, dep.out_dir)


def after_up(dep: Deployment, swarm: bool) -> bool:
    """Bring the metrics stack up or up to date, then put the recipe's target in; False: it failed."""
    from generator.deploy.metrics import apply, set_target

    metrics = metrics_of(dep)
    if metrics is None:
        return True
    if not os.environ.get(metrics.password_env):
        click.echo(f"metrics: {metrics.password_env} is not set: Grafana does not start without its admin "
                   "password (Prometheus and the exporters do)", err=True)
    applied = apply(metrics, swarm)
    for a in applied:
        click.echo(f"metrics {a.node}: {a.action}" if a.ok else f"metrics {a.node}: FAILED: {a.error}", err=not a.ok)
    if not all(a.ok for a in applied):
        return False
    problem = set_target(metrics, dep.project, scraped=True)
    if problem is not None:
        click.echo(f"metrics: {dep.project} is not scraped: {problem}", err=True)
        return False
    click.echo(f"{dep.project}: scraped by {metrics.prometheus_url}, dashboard at {metrics.grafana_url}")
    return True


def before_down(dep: Deployment) -> None:
    """Take the recipe's target out before it stops, so stopping it on purpose never alerts; a stack that does
    not run is not asked (nothing scrapes the recipe then)."""
    from generator.deploy.metrics import set_target

    metrics = metrics_of(dep)
    if metrics is None:
        return
    problem = set_target(metrics, dep.project, scraped=False, wait=0)
    if problem is None:
        click.echo(f"metrics: {dep.project} taken out of Prometheus's targets (stopped on purpose: no alert)")
    elif not problem.startswith("no Prometheus"):
        click.echo(f"metrics: {dep.project} is still a target: {problem}", err=True)


def show_ps(dep: Deployment) -> None:
    """The metrics stack's rows under a recipe's table: every metrics container, and this recipe's target."""
    from generator.deploy.metrics import query, states, target_file_state

    metrics = metrics_of(dep)
    if metrics is None:
        return
    rows = [[s.node, s.container, s.state, s.status] for s in states(metrics)]
    table(f"metrics ({dep.cluster.name}): {metrics.prometheus_url}, Grafana {metrics.grafana_url}",
          ["node", "container", "state", "status"], rows)
    target = target_file_state(metrics, dep.project)
    if target == "scraped":
        try:
            ups = query(metrics, f'up{{job="engine",recipe="{dep.project}"}}')
            said = ", ".join(f"up={v[1]}" for r in ups if isinstance(v := r.get("value"), list)) or "no scrape yet"
        except (OSError, ValueError) as exc:
            said = f"Prometheus does not answer: {exc}"
        target = f"scraped ({said})"
    click.echo(f"{dep.project} target: {target}")
