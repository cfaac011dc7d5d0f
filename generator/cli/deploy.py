"""Deploy commands of `recipegen`: up, down, ps/status, logs, images.

They act on the compiled plan and the committed out/ files through each node's Docker context; the heavy
modules are imported inside the commands.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from generator.cli.compile import cluster_option, compile_recipe, inputs, main
from generator.cli.table import table as _table


def _deployment(recipe: str, cluster_path: Path | None, out_dir: Path | None, fresh: bool = True):
    """The recipe's deployment: compiled now and checked against out/ (up, images), or read from out/ alone
    (down, ps, logs: a recipe that no longer compiles can still be watched and stopped)."""
    from generator.deploy.targets import deployment, deployment_from_out

    given = inputs(cluster_path, out_dir, (recipe,))
    if not fresh:
        return deployment_from_out(given.project.recipe_id(recipe), given.cluster, given.out)
    plan, files, _ = compile_recipe(recipe, given)
    return deployment(plan, files, given.out)


def _need_compose(project: str) -> None:
    from generator.deploy.docker import compose_missing

    missing = compose_missing()
    if missing:
        click.echo(f"{project}: {missing}", err=True)
        sys.exit(1)


def _manager(dep):
    from generator.deploy.swarm import find_manager
    from generator.diagnostics import Diagnostic, RecipegenError

    try:
        return find_manager(dep.cluster)[0]
    except LookupError as exc:
        raise RecipegenError(Diagnostic(str(dep.cluster.path), None, None, None, str(exc))) from None


out_option = click.option("--out", "out_dir", type=click.Path(path_type=Path),
                          help="Folder holding the compiled stacks (default: out/).")
swarm_option = click.option("--swarm", is_flag=True, help="Use the Swarm stack (out/<id>/stack.yaml) through a "
                                                          "manager's context instead of per-node compose files.")


def recipe_target(swarm: bool = True):
    """RECIPE, --cluster, --out (and --swarm): what every command acting on a deployed recipe takes."""
    def decorate(fn):
        options = [click.argument("recipe"), cluster_option, out_option] + ([swarm_option] if swarm else [])
        for option in reversed(options):
            fn = option(fn)
        return fn
    return decorate


@main.command()
@recipe_target()
@click.option("--timeout", default=1800.0, show_default=True, help="Seconds to wait for the head to serve.")
@click.option("--keep", is_flag=True, help="On failure, leave what started running (for debugging).")
def up(recipe: str, cluster_path: Path | None, out_dir: Path | None, swarm: bool, timeout: float, keep: bool) -> None:
    """Preflight every node, start RECIPE's ranks, and wait until the head serves the model."""
    from generator.deploy import swarm as swarm_mod
    from generator.deploy.operate import DeployFailed, last_logs, start, stop, wait_until_serving
    from generator.deploy.preflight import preflight
    from generator.deploy.progress import Progress

    dep = _deployment(recipe, cluster_path, out_dir)
    manager = _manager(dep) if swarm else None
    if manager is None:
        _need_compose(dep.project)
    reports = preflight(dep)
    problems = [(name, p) for name, r in reports.items() for p in r.problems]
    if manager is not None:
        for other, nodes in swarm_mod.other_stacks(dep, manager).items():
            for node in sorted(nodes & {t.name for t in dep.targets}):
                problems.append((node, f"node is claimed by the stack of recipe '{other}'"))
    for name, report in reports.items():
        for note in report.notes:
            click.echo(f"{name}: {note}", err=True)
    if problems:
        for name, problem in problems:
            click.echo(f"{name}: preflight: {problem}", err=True)
        click.echo(f"preflight failed on {len({n for n, _ in problems})} node(s); nothing was started", err=True)
        sys.exit(1)
    states = (lambda d: swarm_mod.stack_states(d, manager)) if manager else None
    failed: BaseException | None = None
    with Progress([t.name for t in dep.targets], dep.head.name) as progress:
        try:
            if manager:
                swarm_mod.deploy(dep, manager)
            else:
                errors = {n: e for n, e in start(dep).items() if e}
                if errors:
                    raise DeployFailed("; ".join(f"{n}: start failed: {e}" for n, e in errors.items()))
            wait_until_serving(dep, timeout, progress.update, states)
        except (DeployFailed, KeyboardInterrupt) as exc:
            failed = exc
        except Exception as exc:  # a docker error mid-way: report it like the rest, then clean up
            failed = exc
    if failed is None:
        click.echo(f"{dep.project}: serving {dep.plan.served_model_name} at {dep.url}")
        return
    click.echo(f"{dep.project}: up failed: {str(failed) or 'interrupted'}", err=True)
    if not manager:
        for name, text in last_logs(dep).items():
            click.echo(f"--- last log lines of {name} ---", err=True)
            for line in text.splitlines():
                click.echo(f"{name} | {line}", err=True)
    if not keep:
        if manager:
            swarm_mod.remove(dep, manager)
            click.echo(f"{dep.project}: stack removed", err=True)
        else:
            for name, error in stop(dep).items():
                click.echo(f"{name}: {'stopped' if error is None else 'stop failed: ' + error}", err=True)
    sys.exit(1)


@main.command()
@recipe_target()
def down(recipe: str, cluster_path: Path | None, out_dir: Path | None, swarm: bool) -> None:
    """Stop and remove RECIPE's containers on every node at once."""
    from generator.deploy.operate import stop

    dep = _deployment(recipe, cluster_path, out_dir, fresh=False)
    if swarm:
        from generator.deploy.swarm import remove

        remove(dep, _manager(dep))
        click.echo(f"{dep.project}: stack removed")
        return
    _need_compose(dep.project)
    results = stop(dep)
    for name, error in results.items():
        click.echo(f"{name}: {'down' if error is None else 'FAILED: ' + error}", err=error is not None)
    if any(results.values()):
        failed = ", ".join(n for n, e in results.items() if e)
        rest = " the other nodes are clean;" if len(failed.split(", ")) < len(results) else ""
        click.echo(f"{dep.project}: could not clean {failed};{rest} run down again once they answer", err=True)
        sys.exit(1)


@main.command()
@recipe_target()
def ps(recipe: str, cluster_path: Path | None, out_dir: Path | None, swarm: bool) -> None:
    """One table of RECIPE's ranks across nodes: node, context, container, state, health, status."""
    from generator.deploy.operate import rank_states

    dep = _deployment(recipe, cluster_path, out_dir, fresh=False)
    if swarm:
        from generator.deploy.swarm import stack_states

        ranks = stack_states(dep, _manager(dep))
    else:
        ranks = rank_states(dep)
    _table(dep.project, ["node", "context", "container", "state", "health", "uptime", "status"],
           [[r.node, r.context, r.container, r.state, r.health, r.uptime, r.status] for r in ranks])
    unreachable = [r.node for r in ranks if r.state == "unreachable"]
    if unreachable:  # a table of question marks is not a status: scripts must see it failed
        every = "every node" if len(unreachable) == len(ranks) else f"{len(unreachable)} of {len(ranks)} nodes"
        click.echo(f"{dep.project}: {every} unreachable: {', '.join(unreachable)} (`recipegen contexts` checks "
                   "them)", err=True)
        sys.exit(1)


main.add_command(ps, name="status")


@main.command()
@recipe_target()
@click.option("-f", "--follow", is_flag=True, help="Keep streaming.")
@click.option("--node", "nodes", multiple=True, help="Only this node (repeatable).")
@click.option("--tail", type=int, default=None, help="Lines from the end of each log.")
def logs(recipe: str, cluster_path: Path | None, out_dir: Path | None, swarm: bool, follow: bool,
         nodes: tuple[str, ...], tail: int | None) -> None:
    """RECIPE's logs from every node, merged, each line prefixed by its node."""
    from generator.deploy.docker import Docker
    from generator.deploy.operate import follow_logs, log_commands

    dep = _deployment(recipe, cluster_path, out_dir, fresh=False)
    known = {t.name for t in dep.targets}
    if set(nodes) - known:
        raise click.BadParameter(f"{', '.join(sorted(set(nodes) - known))} not among {', '.join(sorted(known))}",
                                 param_hint="--node")
    chosen = set(nodes) or known
    if swarm:
        boss = Docker(_manager(dep).context)
        options = [*(["-f"] if follow else []), *(["--tail", str(tail)] if tail is not None else [])]
        commands = {t.name: boss.command("service", "logs", "--raw", *options, f"{dep.project}_{t.name}")
                    for t in dep.targets if t.name in chosen}
    else:
        commands = log_commands(dep, follow, tail, chosen)
    width = max(len(n) for n in known)
    for name, line in follow_logs(commands):
        click.echo(f"{name.ljust(width)} | {line}")
    failed = [name for name, command in commands.items() if isinstance(command, str) and command != "not started"]
    if failed:
        click.echo(f"{dep.project}: no logs from {', '.join(failed)}", err=True)
        sys.exit(1)


@main.command()
@recipe_target(swarm=False)
def images(recipe: str, cluster_path: Path | None, out_dir: Path | None) -> None:
    """Make RECIPE's image present, identical, on every node it uses (build there, or copy from a node)."""
    from generator.deploy.images import sync_images

    dep = _deployment(recipe, cluster_path, out_dir)
    results = sync_images(dep)
    for r in results:
        if r.error:
            click.echo(f"{r.node}: {r.action}: {r.error}", err=True)
        else:
            click.echo(f"{r.node}: {r.action} {(r.image_id or '?').removeprefix('sha256:')[:12]}")
    if any(r.error for r in results):
        sys.exit(1)
