"""Cluster commands of `recipegen`: contexts, swarm setup, cluster probe, doctor, unlock. They act on the nodes, not
on a recipe; the heavy modules are imported inside the commands."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from generator.deploy.findings import Finding

from generator.cli.compile import cluster_option, inputs
from generator.cli.hold import holding, lock_wait_option
from generator.cli.table import table as _table


@click.command()
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


@click.group()
def swarm() -> None:
    """Docker Swarm as the engine: label nodes, check their GPU resources."""


@swarm.command("setup")
@cluster_option
@click.option("--init", is_flag=True, help="Create the swarm on the first node and join the others when missing.")
@lock_wait_option
def swarm_setup(cluster_path: Path | None, init: bool, lock_wait: float) -> None:
    """Label each node with its cluster name (placement), check it advertises an NVIDIA_GPU resource. Idempotent."""
    from generator.deploy.swarm_setup import setup
    from generator.deploy.targets import OnNode
    from generator.diagnostics import Diagnostic, RecipegenError

    cluster = inputs(cluster_path).cluster
    try:
        with holding([OnNode(n) for n in cluster.nodes], "", "recipegen swarm setup", lock_wait, None, cluster_path):
            rows = setup(cluster, init)
    except LookupError as exc:
        raise RecipegenError(Diagnostic(str(cluster.path), None, None, None, str(exc))) from None
    _table(f"swarm of {cluster.name}", ["node", "context", "node id", "state", "manager", "label", "GPU"],
           [[r.node, r.context, (r.node_id or "-")[:12], r.state, "yes" if r.manager else "-",
             "ok" if r.labelled else "-", r.gpu or "-"] for r in rows])
    problems = [f for r in rows for f in r.findings]
    for f in problems:
        click.echo(f"{f.node}: {f.message}", err=True)
    if problems:
        sys.exit(1)


@click.group("cluster")
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
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from generator.cluster.probe import write_atomic
    from generator.cluster.probe.render import summary_rows
    from generator.cluster.probe.run import probe_cluster
    from generator.diagnostics import display_path

    if len(set(contexts)) != len(contexts):
        raise click.BadParameter("a context is named twice", param_hint="--context")
    if write_path is not None and write_path.exists() and not force:
        click.echo(f"{display_path(write_path)}: exists; pass --force to replace it", err=True)
        sys.exit(1)
    run = probe_cluster(list(contexts), name, user, hf_cache, image, timeout, write_path or Path("cluster.toml"))
    for f in run.failures:
        click.echo(f"{f.node}: probe failed: {_probe_failure(f)}", err=True)
    if run.failures or run.proposal is None:
        click.echo(f"could not probe {len(run.failures)} of {len(contexts)} node(s); nothing proposed", err=True)
        sys.exit(1)
    shown = Table("node", "context", "management", "fabric", "state", "RDMA", "GPU", "memlock", "probe image",
                  title=f"cluster {name}: what the nodes show")
    for row in summary_rows(run.facts, run.proposal):
        shown.add_row(*(escape(v) for v in row))
    Console(stderr=True, width=None if sys.stderr.isatty() else 200).print(shown)  # stdout is the file
    for note in run.proposal.notes:
        click.echo(f"undecided: {note}", err=True)
    if write_path is None:
        click.echo(run.text, nl=False)
        return
    for problem in run.invalid:
        click.echo(f"the proposed cluster file does not validate {problem} (check --name, --user and --hf-cache)",
                   err=True)
    if run.invalid:
        sys.exit(1)
    try:
        write_atomic(write_path, run.text, force)
    except (FileExistsError, OSError) as exc:
        click.echo(f"{display_path(write_path)}: {exc}", err=True)
        sys.exit(1)
    click.echo(f"{display_path(write_path)}: written ({len(run.facts)} node(s)); check it with "
               f"`recipegen doctor --cluster {display_path(write_path)}`")


def _probe_failure(failure: Finding) -> str:
    """Why a node could not be probed; for a context that does not exist, how to make it (probe needs one per
    node before any cluster file exists, so `recipegen contexts --create` cannot help yet)."""
    from generator.deploy import findings as codes

    if failure.code != codes.CONTEXT_MISSING:
        return failure.message
    return (f"context '{failure.node}' does not answer: no such context on this machine; make it with "
            f"`docker context create {failure.node} --docker host=ssh://USER@HOST` (the Spark's login and address)")


@click.command()
@cluster_option
@click.option("--image", help="Image to run the check containers in (default: a small one present on each node).")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds each node has to answer.")
@click.option("--no-reach", is_flag=True, help="Skip the TCP reachability test between the nodes.")
def doctor(cluster_path: Path | None, image: str | None, timeout: float, no_reach: bool) -> None:
    """Check the cluster file against the live nodes: contexts, Engine and Compose versions, fabric interfaces
    and addresses, subnet, reachability, GPU runtime, memlock. Exit 1 when any finding is an error."""
    from rich.markup import escape

    from generator.cluster.doctor import doctor as run_doctor
    from generator.deploy.findings import Severity

    cluster = inputs(cluster_path).cluster
    findings = run_doctor(cluster, image=image, timeout=timeout, reach=not no_reach)
    order = {n.name: i for i, n in enumerate(cluster.nodes)}
    rank = list(Severity)
    findings.sort(key=lambda f: (order.get(f.node, len(order)), rank.index(f.severity)))
    style = {Severity.ERROR: "[red]error[/red]", Severity.WARNING: "[yellow]warning[/yellow]",
             Severity.NOTE: "note", Severity.OK: "[green]ok[/green]"}
    _table(f"doctor: cluster {cluster.name}", ["node", "check", "", "finding", "fix"],
           [[escape(f.node), escape(f.code), style[f.severity], escape(f.message), escape(f.fix)] for f in findings])
    errors = [f for f in findings if f.severity is Severity.ERROR]
    warnings = [f for f in findings if f.severity is Severity.WARNING]
    click.echo(f"{len(errors)} error(s), {len(warnings)} warning(s)", err=bool(errors))
    if errors:
        sys.exit(1)


@click.command()
@click.argument("nodes", nargs=-1)
@cluster_option
@click.option("--force", is_flag=True, help="Break a lock even when its holder may still be working.")
def unlock(nodes: tuple[str, ...], cluster_path: Path | None, force: bool) -> None:
    """Break the lock a recipegen command left on NODES (default: every node of the cluster) when it died without
    letting go (SIGKILL, a lost machine). Only a stale lock is broken (its process on this host is gone, or it
    outlived its own bound) unless --force: a lock held by a command still working elsewhere stays."""
    from generator.deploy.docker import node_reason
    from generator.deploy.lock import break_lock, locks
    from generator.deploy.targets import OnNode

    cluster = inputs(cluster_path).cluster
    known = {n.name: n for n in cluster.nodes}
    if set(nodes) - set(known):
        raise click.BadParameter(f"{', '.join(sorted(set(nodes) - set(known)))} not among {', '.join(known)}",
                                 param_hint="NODES")
    targets = [OnNode(known[n]) for n in (nodes or known)]
    failed = False
    for target, holder in zip(targets, locks(targets).values()):
        if holder is None:
            click.echo(f"{target.name}: not held")
        elif isinstance(holder, Exception):  # the line every command gives for a node it cannot reach
            failed = True
            said = node_reason(target.node.context, holder)
            click.echo(f"{target.name}: FAILED: {said}", err=True)
        elif holder.stale or force:
            break_lock(target, holder)
            why = f"stale: {holder.stale}" if holder.stale else "--force"
            click.echo(f"{target.name}: broke the lock of {holder.describe()} ({why})")
        else:
            failed = True
            click.echo(f"{target.name}: held by {holder.describe()}, which may still be working; left (wait for it, "
                       "or --force)", err=True)
    if failed:
        sys.exit(1)

