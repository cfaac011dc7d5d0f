"""Deploy commands of `recipegen`: up, down, ps/status, logs, images. Each builds a deployment, chooses its backend
(`--swarm`), runs the action (generator.deploy.actions) and formats the result; the heavy modules are imported
inside the commands.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click

from generator.cli.compile import cluster_option, compile_recipe, inputs
from generator.cli.hold import holding, lock_wait_option
from generator.cli.table import table

if TYPE_CHECKING:
    from generator.deploy.actions import DownResult
    from generator.deploy.backends import Backend
    from generator.deploy.backends.base import Removal
    from generator.deploy.findings import Finding
    from generator.deploy.group import GroupRecord
    from generator.deploy.probe import ProbeResult
    from generator.deploy.targets import CompiledDeployment, Deployment


def compiled(recipe: str, cluster_path: Path | None, out_dir: Path | None) -> CompiledDeployment:
    """The recipe compiled now and checked against out/ (up, images)."""
    from generator.deploy.targets import deployment

    given = inputs(cluster_path, out_dir, (recipe,))
    plan, files, _ = compile_recipe(recipe, given)
    return deployment(plan, files, given.out)


def from_out(recipe: str, cluster_path: Path | None, out_dir: Path | None) -> Deployment:
    """The recipe as out/ has it (down, ps, logs: a recipe that no longer compiles can still be stopped)."""
    from generator.deploy.targets import deployment_from_out

    given = inputs(cluster_path, out_dir, (recipe,))
    return deployment_from_out(given.project.recipe_id(recipe), given.cluster, given.out)


def backend_for(dep: Deployment, swarm: bool, change: bool) -> Backend:
    """The chosen backend, once it can act from here; otherwise its findings and exit 1."""
    from generator.deploy.backends import choose

    backend = choose(swarm, dep.cluster)
    refused = backend.ready(dep, change)
    if refused:
        for f in refused:
            click.echo(f"{f.node or dep.project}: {f.message}", err=True)
        sys.exit(1)
    return backend


def said(f: Finding) -> str:
    """A finding's message, with its fix when the message does not already give it."""
    return f.message if not f.fix or f.fix in f.message else f"{f.message} ({f.fix})"


out_option = click.option("--out", "out_dir", type=click.Path(path_type=Path),
                          help="Folder holding the compiled stacks (default: out/).")
swarm_option = click.option("--swarm", is_flag=True, help="Use the Swarm stack (out/<id>/stack.yaml) through a "
                                                          "manager's context instead of per-node compose files.")

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def recipe_target(swarm: bool = True) -> Decorator:
    """RECIPE, --cluster, --out (and --swarm): what every command acting on a deployed recipe takes."""
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        options = [click.argument("recipe"), cluster_option, out_option] + ([swarm_option] if swarm else [])
        for option in reversed(options):
            fn = option(fn)
        return fn
    return decorate


@click.command()
@recipe_target()
@click.option("--timeout", default=1800.0, show_default=True, help="Seconds to wait for the head to serve.")
@click.option("--keep", is_flag=True, help="On failure, leave what started running (for debugging).")
@click.option("--sync", is_flag=True, help="First put the image and the models on every node (`images`, `models`).")
@lock_wait_option
@click.option("--probe-timeout", default=600.0, show_default=True,
              help="Seconds the first real request may take once the head serves (it may compile CUDA graphs).")
@click.option("--no-probe", is_flag=True, help="Stop once the head lists the model; send no real request.")
def up(recipe: str, cluster_path: Path | None, out_dir: Path | None, swarm: bool, timeout: float, keep: bool,
       sync: bool, lock_wait: float, probe_timeout: float, no_probe: bool) -> None:
    """Preflight every node, start RECIPE's ranks, wait until the head serves the model, then send it one real
    request (a streamed chat completion) and print its time to first token and decode rate. The nodes are held
    meanwhile: no other recipegen command changes them (see `recipegen unlock`).

    First, once: this machine's Docker Compose and each node's Engine against the versions the files' headers
    name; an older one is one line and nothing starts."""
    from generator.deploy.actions import up_bound

    dep = compiled(recipe, cluster_path, out_dir)
    backend = backend_for(dep, swarm, change=True)  # before any node is held: this machine cannot act
    probe = None if no_probe else probe_timeout
    with holding(dep.targets, dep.project, f"recipegen up {dep.project}", lock_wait,
                 None if sync else up_bound(dep, timeout + (probe or 0)), cluster_path):
        _up(dep, backend, timeout, keep, sync, probe, swarm)


def _up(dep: CompiledDeployment, backend: Backend, timeout: float, keep: bool, sync: bool,
        probe_timeout: float | None, swarm: bool = False) -> None:
    from generator.deploy import actions
    from generator.deploy.findings import Severity, errors
    from generator.deploy.progress import Progress

    if sync:
        from generator.cli.models import sync_before_up

        sync_before_up(dep)
    found = actions.check(dep, backend)
    for f in found:
        if f.severity in (Severity.NOTE, Severity.WARNING):
            click.echo(f"{f.node}: {said(f)}", err=True)
    failed = errors(found)
    for f in failed:
        click.echo(f"{f.node or dep.project}: {'preflight: ' if f.node else ''}{said(f)}", err=True)
    if failed and any(f.node for f in failed):
        click.echo(f"preflight failed on {len({f.node for f in failed})} node(s); nothing was started", err=True)
    if failed:
        sys.exit(1)
    from generator.deploy.router import join

    with Progress([t.name for t in dep.targets], dep.head.name) as progress:
        result = actions.launch(dep, backend, timeout, keep, progress.update, found, probe_timeout,
                                router=lambda d: join(d, swarm))
    if result.ok:
        if result.probe is not None:
            click.echo(f"{dep.project}: first request: {probe_line(result.probe)}")
        click.echo(f"{dep.project}: serving {dep.plan.served_model_name} at {result.url}")
        if result.router is not None:
            from generator.cli.router import report_up

            report_up(dep.project, result.router)
        if not result.routed:  # the recipe serves, but the one endpoint does not reach it
            sys.exit(1)
        from generator.cli.metrics import after_up as metrics_after_up

        if not metrics_after_up(dep, swarm):  # it serves, but is not watched
            sys.exit(1)
        return
    click.echo(f"{dep.project}: up failed: {result.failure}", err=True)
    for name, text in result.last_logs.items():
        click.echo(f"--- last log lines of {name} ---", err=True)
        for line in text.splitlines():
            click.echo(f"{name} | {line}", err=True)
    if result.cleanup is not None:
        _report_cleanup(dep.project, result.cleanup)
    sys.exit(1)


def _report_cleanup(project: str, removals: list[Removal]) -> None:
    """What a failed `up` removed: only what it started; an earlier deployment's containers are named, left."""
    for r in removals:
        said = [f"removed {', '.join(r.removed)}" if r.removed else "nothing of this up to remove"]
        if r.kept:
            said.append(f"left {', '.join(r.kept)} (there before this up: `recipegen down {project}` removes it)")
        if r.error:
            said.append(f"FAILED: {r.error}")
        click.echo(f"{r.node}: {'; '.join(said)}", err=True)
    failed = [r.node for r in removals if r.error]
    if failed:
        click.echo(f"{project}: could not clean {', '.join(failed)}; `recipegen down {project}` once they answer",
                   err=True)
    elif not any(r.kept for r in removals):
        click.echo(f"{project}: nothing of it runs on any node", err=True)


def probe_line(result: ProbeResult) -> str:
    """`TTFT <n> ms, <n> tok/s` and the answer's first words: one line a person reads at a glance."""
    rate = f"{result.decode_tps:.1f} tok/s" if result.decode_tps is not None else "? tok/s"
    words = result.text.split()
    said = " ".join(words[:8]) + (" ..." if len(words) > 8 else "")
    ttft = f"{result.ttft_ms:.0f}" if result.ttft_ms is not None else "?"
    return f"TTFT {ttft} ms, {rate} ({result.tokens} tokens, counted from the {result.counted}): \"{said}\""


@click.command()
@recipe_target(swarm=False)
@click.option("--probe-timeout", default=600.0, show_default=True, help="Seconds the request may take.")
@click.option("--via-router", is_flag=True, help="Through the cluster's router (its first node), as a client sends "
                                                  "it, instead of to the head.")
def smoke(recipe: str, cluster_path: Path | None, out_dir: Path | None, probe_timeout: float,
          via_router: bool) -> None:
    """Send RECIPE's running head one real request (what `up` ends with); exit 1 when it fails."""
    from generator.cli.router import router_url
    from generator.deploy.probe import probe

    dep = compiled(recipe, cluster_path, out_dir)
    url, key = router_url(dep) if via_router else (dep.url, None)
    result = probe(url, dep.plan.served_model_name, probe_timeout, key)
    if not result.ok:
        click.echo(f"{dep.project}: the request to {result.model} at {result.url} failed: {result.error}", err=True)
        sys.exit(1)
    click.echo(f"{dep.project}: {probe_line(result)}")


def _report_down(result: DownResult, err: bool = False) -> None:
    for o in result.stopped:
        if not o.ok:
            click.echo(f"{o.node}: FAILED: {o.error}", err=True)
        elif o.node in result.left:
            click.echo(f"{o.node}: FAILED: still there after {result.waited:.0f}s: {', '.join(result.left[o.node])}",
                       err=True)
        else:
            click.echo(f"{o.node}: down", err=err)
    if result.ok:
        click.echo(f"{result.project}: nothing of it runs on any node", err=err)
        return
    failed = ", ".join(result.failed)
    rest = " the other nodes are clean;" if len(result.failed) < len(result.stopped) else ""
    click.echo(f"{result.project}: could not clean {failed};{rest} run down again once they answer", err=True)


@click.command()
@recipe_target()
@lock_wait_option
def down(recipe: str, cluster_path: Path | None, out_dir: Path | None, swarm: bool, lock_wait: float) -> None:
    """Stop and remove RECIPE's containers on every node at once; returns once none is left (or says where).

    Compose must be as new as the files' headers name (it reads them to stop the project)."""
    from generator.deploy import actions

    dep = from_out(recipe, cluster_path, out_dir)
    backend = backend_for(dep, swarm, change=True)
    from generator.cli.metrics import before_down

    with holding(dep.targets, dep.project, f"recipegen down {dep.project}", lock_wait,
                 actions.down_bound(dep), cluster_path):
        before_down(dep)  # stopped on purpose: not scraped any more, so no alert (once the nodes are held)
        result = actions.down(dep, backend)
    _report_down(result)
    if not result.ok:
        sys.exit(1)
    from generator.deploy.router import leave

    said = leave(dep, swarm)
    if said is not None:
        from generator.cli.router import report_down

        report_down(dep.project, said)


@click.command()
@recipe_target()
def ps(recipe: str, cluster_path: Path | None, out_dir: Path | None, swarm: bool) -> None:
    """One table of RECIPE's ranks across nodes: node, context, container, state, health, status."""
    from generator.deploy import actions

    from generator.deploy.targets import display_name

    dep = from_out(recipe, cluster_path, out_dir)
    result = actions.ps(dep, backend_for(dep, swarm, change=False))
    name = display_name(dep)
    if name and name != dep.project:  # a title: printable, and no rich markup (`[b]`) taken from a recipe
        from rich.markup import escape

        name = escape("".join(ch if ch.isprintable() else "?" for ch in name))
    table(f"{dep.project} ({name})" if name and name != dep.project else dep.project, ["node", "context", "container", "state", "health", "uptime", "status"],
          [[r.node, r.context, r.container, r.state, r.health, r.uptime, r.status] for r in result.ranks])
    for line in group_lines(dep.project, result.group):
        click.echo(line)
    from generator.deploy import router

    routing = router.ps(dep, swarm)
    if routing is not None:
        from generator.cli.router import show_ps

        show_ps(dep.project, dep.cluster.name, routing)
    from generator.cli.metrics import show_ps as show_metrics

    show_metrics(dep)
    from generator.deploy.lock import unlock_hint

    for name, holder in result.held.items():
        hint = unlock_hint([name], f" --cluster {cluster_path}" if cluster_path else "")
        stale = f"; looks stale: {holder.stale} (`{hint}` breaks it)" if holder.stale else ""
        click.echo(f"{name}: held by {holder.describe()}{stale}")
    unreachable = result.unreachable
    if unreachable:  # a table of question marks is not a status: scripts must see it failed
        every = "every node" if len(unreachable) == len(result.ranks) else \
            f"{len(unreachable)} of {len(result.ranks)} nodes"
        click.echo(f"{dep.project}: {every} unreachable: {', '.join(unreachable)} (`recipegen contexts` checks "
                   "them)", err=True)
        sys.exit(1)
    if result.group is not None and result.group.halted:  # stopped for good: a status scripts must see
        sys.exit(1)


def group_lines(project: str, group: GroupRecord | None) -> list[str]:
    """What `ps` says of the group restarts: how many, the last one's time and cause, who caused them, and whether
    the recipe stopped at its bound."""
    if group is None or not group.restarts:
        return []
    from datetime import datetime, timezone

    when = datetime.fromtimestamp(group.last_time or 0, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    window = f"{group.window_s / 60:g}m" if group.window_s else "?"
    bound = f"; bound {group.limit} in {window}" if group.limit else ""
    line = f": {group.last_line}" if group.last_line else ""
    lines = [f"{project}: {group.restarts} group restart(s) ({group.recent} within the window{bound}), the last at "
             f"{when} ({group.last_cause}): {group.last_reason}{line}",
             f"{project}: restarts by rank: " + ", ".join(f"{who} {n}" for who, n in group.by_rank),
             f"{project}: restarts by cause: " + ", ".join(f"{kind} {n}" for kind, n in group.by_cause)]
    if group.memory_wait:
        lines.append(f"{project}: {group.memory_wait}")
    if group.halted:
        lines.append(f"{project}: STOPPED at its restart bound: {group.halted} (`recipegen down` then `up` starts "
                     "it afresh)")
    return lines


@click.command()
@recipe_target()
@click.option("-f", "--follow", is_flag=True, help="Keep streaming.")
@click.option("--node", "nodes", multiple=True, help="Only this node (repeatable).")
@click.option("--tail", type=int, default=None, help="Lines from the end of each log.")
def logs(recipe: str, cluster_path: Path | None, out_dir: Path | None, swarm: bool, follow: bool,
         nodes: tuple[str, ...], tail: int | None) -> None:
    """RECIPE's logs from every node, merged, each line prefixed by its node."""
    from generator.deploy import actions

    dep = from_out(recipe, cluster_path, out_dir)
    known = {t.name for t in dep.targets}
    if set(nodes) - known:
        raise click.BadParameter(f"{', '.join(sorted(set(nodes) - known))} not among {', '.join(sorted(known))}",
                                 param_hint="--node")
    streams = actions.logs(dep, backend_for(dep, swarm, change=False), dep.only(set(nodes) or known), follow, tail)
    width = max(len(n) for n in known)
    for name, line in streams.lines():
        click.echo(f"{name.ljust(width)} | {line}")
    if streams.failed:
        click.echo(f"{dep.project}: no logs from {', '.join(streams.failed)}", err=True)
        sys.exit(1)


@click.command()
@recipe_target(swarm=False)
@lock_wait_option
def images(recipe: str, cluster_path: Path | None, out_dir: Path | None, lock_wait: float) -> None:
    """Make RECIPE's image present, identical, on every node it uses (build there, or copy from a node: node to
    node where both ends can run a helper, else through this machine; each line says which)."""
    from generator.deploy.images import sync_images
    from generator.transfer.models import human_size

    dep = compiled(recipe, cluster_path, out_dir)
    try:
        with holding(dep.targets, dep.project, f"recipegen images {dep.project}", lock_wait, None, cluster_path):
            results = sync_images(dep)
    except KeyboardInterrupt:
        click.echo(f"{dep.project}: interrupted; every helper container was removed", err=True)
        sys.exit(130)
    for r in results:
        if r.finding:
            click.echo(f"{r.node}: {r.action}: {r.finding.message}", err=True)
        else:
            size = f" {human_size(r.bytes)} in {r.seconds:.1f}s," if r.bytes else ""
            click.echo(f"{r.node}: {r.action}{size} {(r.image_id or '?').removeprefix('sha256:')[:12]}")
    failed = [r.node for r in results if r.finding]
    if failed:
        click.echo(f"{dep.project}: image not in place on {', '.join(failed)}", err=True)
        sys.exit(1)

