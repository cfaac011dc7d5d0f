"""Deploy commands of `recipegen`: up, down, ps/status, logs, images, contexts, swarm setup.

They act on the compiled plan and the committed out/ files through each node's Docker context; the heavy
modules are imported inside the commands.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from generator.cli import cluster_option, compile_recipe, inputs, main


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


def _table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(*columns, title=title)
    for row in rows:
        table.add_row(*row)
    Console(width=None if sys.stdout.isatty() else 200).print(table)


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
@click.option("--sync", is_flag=True, help="First put the image and the models on every node (`images`, `models`).")
def up(recipe: str, cluster_path: Path | None, out_dir: Path | None, swarm: bool, timeout: float, keep: bool,
       sync: bool) -> None:
    """Preflight every node, start RECIPE's ranks, and wait until the head serves the model."""
    from generator.deploy import swarm as swarm_mod
    from generator.deploy.operate import DeployFailed, last_logs, start, stop, wait_until_serving
    from generator.deploy.preflight import preflight
    from generator.deploy.progress import Progress

    dep = _deployment(recipe, cluster_path, out_dir)
    if sync:
        from generator.cli_models import sync_before_up

        sync_before_up(dep)
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


@main.command()
@cluster_option
@click.option("--create", is_flag=True, help="Create the missing contexts as ssh://user@ssh_host.")
def contexts(cluster_path: Path | None, create: bool) -> None:
    """Each node's Docker context and whether it answers."""
    from generator.deploy.contexts import check_contexts

    cluster = inputs(cluster_path).cluster
    rows = check_contexts(cluster, create)
    _table(f"cluster {cluster.name}", ["node", "context", "endpoint", "answers"],
           [[r.node, r.context, r.endpoint or "-", r.answer] for r in rows])
    if any(not row.ok for row in rows):
        sys.exit(1)


@main.group()
def swarm() -> None:
    """Docker Swarm as the engine: label nodes, check their GPU resources."""


@swarm.command("setup")
@cluster_option
@click.option("--init", is_flag=True, help="Create the swarm on the first node and join the others when missing.")
def swarm_setup(cluster_path: Path | None, init: bool) -> None:
    """Label each node with its cluster name (placement), check it advertises an NVIDIA_GPU resource. Idempotent."""
    from generator.deploy.swarm import setup
    from generator.diagnostics import Diagnostic, RecipegenError

    cluster = inputs(cluster_path).cluster
    try:
        rows = setup(cluster, init)
    except LookupError as exc:
        raise RecipegenError(Diagnostic(str(cluster.path), None, None, None, str(exc))) from None
    _table(f"swarm of {cluster.name}", ["node", "context", "node id", "state", "manager", "label", "GPU"],
           [[r.node, r.context, (r.node_id or "-")[:12], r.state, "yes" if r.manager else "-",
             "ok" if r.labelled else "-", r.gpu or "-"] for r in rows])
    problems = [(r.node, p) for r in rows for p in r.problems]
    for node, problem in problems:
        click.echo(f"{node}: {problem}", err=True)
    if problems:
        sys.exit(1)


@main.group("cluster")
def cluster_group() -> None:
    """Cluster files from the live nodes: probe them through their Docker contexts."""


@cluster_group.command("probe")
@click.option("--context", "contexts", multiple=True, required=True,
              help="A node's Docker context, in rank order (repeat: the first is the head).")
@click.option("--write", "write_path", type=click.Path(path_type=Path), help="Write the proposed cluster file here.")
@click.option("--force", is_flag=True, help="With --write: replace an existing file.")
@click.option("--name", default="cluster", show_default=True, help="The cluster's name.")
@click.option("--user", help="Login user on the nodes (default: the contexts' ssh user, else root).")
@click.option("--hf-cache", help="Hugging Face cache folder on every node (default: ~/.cache/huggingface).")
@click.option("--image", help="Image to run the probe containers in (default: a small one present on each node).")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds each node has to answer.")
def cluster_probe(contexts: tuple[str, ...], write_path: Path | None, force: bool, name: str, user: str | None,
                  hf_cache: str | None, image: str | None, timeout: float) -> None:
    """Read each node's interfaces, RDMA devices, GPU runtime and memlock limit; propose a cluster file."""
    from generator.deploy.targets import each
    from generator.diagnostics import display_path
    from rich.markup import escape

    from generator.probe import ProbeError, gather, propose, write_atomic
    from generator.probe.render import render_cluster, summary_rows

    if len(set(contexts)) != len(contexts):
        raise click.BadParameter("a context is named twice", param_hint="--context")
    if write_path is not None and write_path.exists() and not force:
        click.echo(f"{display_path(write_path)}: exists; pass --force to replace it", err=True)
        sys.exit(1)

    results = each(list(contexts), lambda c: gather(c, image=image, timeout=timeout), key=str)
    failed = {c: r for c, r in results.items() if isinstance(r, BaseException)}
    for ctx, exc in failed.items():
        click.echo(f"{ctx}: probe failed: {exc if isinstance(exc, ProbeError) else repr(exc)}", err=True)
    if failed:
        click.echo(f"could not probe {len(failed)} of {len(contexts)} node(s); nothing proposed", err=True)
        sys.exit(1)
    facts = [results[c] for c in contexts]
    proposal = propose(facts, name=name, user=user, hf_cache=hf_cache)
    text = render_cluster(proposal)
    from rich.console import Console
    from rich.table import Table

    table = Table("node", "context", "management", "fabric", "state", "RDMA", "GPU", "memlock", "probe image",
                  title=f"cluster {name}: what the nodes show")
    for row in summary_rows(facts, proposal):
        table.add_row(*(escape(v) for v in row))
    Console(stderr=True, width=None if sys.stderr.isatty() else 200).print(table)  # stdout is the file
    for note in proposal.notes:
        click.echo(f"undecided: {note}", err=True)
    if write_path is None:
        click.echo(text, nl=False)
        return
    from generator.diagnostics import RecipegenError
    from generator.resolve import cluster_from_text

    try:  # the text must load as a cluster before it is written where the user asked
        cluster_from_text(text, write_path)
    except RecipegenError as exc:
        for d in exc.diagnostics:
            click.echo(f"the proposed cluster file does not validate ({d.key or 'file'}): {d.message} "
                       "(check --name, --user and --hf-cache)", err=True)
        sys.exit(1)
    try:
        write_atomic(write_path, text, force)
    except (FileExistsError, OSError) as exc:
        click.echo(f"{display_path(write_path)}: {exc}", err=True)
        sys.exit(1)
    click.echo(f"{display_path(write_path)}: written ({len(facts)} node(s)); check it with "
               f"`recipegen doctor --cluster {display_path(write_path)}`")


@main.command()
@cluster_option
@click.option("--image", help="Image to run the check containers in (default: a small one present on each node).")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds each node has to answer.")
@click.option("--no-reach", is_flag=True, help="Skip the TCP reachability test between the nodes.")
def doctor(cluster_path: Path | None, image: str | None, timeout: float, no_reach: bool) -> None:
    """Check the cluster file against the live nodes: contexts, fabric interfaces and addresses, subnet,
    reachability, GPU runtime, memlock. Exit 1 when any finding is an error."""
    from rich.markup import escape

    from generator.doctor import ERROR, OK, WARNING, doctor as run_doctor

    cluster = inputs(cluster_path).cluster
    findings = run_doctor(cluster, image=image, timeout=timeout, reach=not no_reach)
    order = {n.name: i for i, n in enumerate(cluster.nodes)}
    findings.sort(key=lambda f: (order.get(f.node, len(order)), {ERROR: 0, WARNING: 1, OK: 2}[f.level]))
    style = {ERROR: "[red]error[/red]", WARNING: "[yellow]warning[/yellow]", OK: "[green]ok[/green]"}
    _table(f"doctor: cluster {cluster.name}", ["node", "check", "", "finding", "fix"],
           [[escape(f.node), escape(f.check), style[f.level], escape(f.message), escape(f.fix)] for f in findings])
    errors = [f for f in findings if f.level == ERROR]
    warnings = [f for f in findings if f.level == WARNING]
    click.echo(f"{len(errors)} error(s), {len(warnings)} warning(s)", err=bool(errors))
    if errors:
        sys.exit(1)
