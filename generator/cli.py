"""The `recipegen` command line. Commands import what they use inside their bodies, so `--help` and
`validate` never pay for the deploy stack (python-on-whales, pydantic).

Exit codes: 0 success; 1 invalid input, failed check or failed deploy; 2 usage error.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from generator.diagnostics import Diagnostic, RecipegenError


def _print(diagnostics: list[Diagnostic]) -> None:
    for d in diagnostics:
        click.echo(str(d), err=True)


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except RecipegenError as exc:
            _print(exc.diagnostics)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="recipegen")
def main() -> None:
    """Compile LLM-serving recipes into Docker Compose / Swarm stacks for DGX Spark clusters, and deploy them."""


cluster_option = click.option("--cluster", "cluster_path", type=click.Path(path_type=Path),
                              help="Cluster file (default: cluster.toml of the project).")


@main.command()
@click.argument("recipes", nargs=-1)
@cluster_option
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Output folder (default: out/).")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 when the output folder differs from a fresh build.")
@click.option("--strict", is_flag=True, help="Lint warnings fail the build too.")
def build(recipes: tuple[str, ...], cluster_path: Path | None, out_dir: Path | None, check: bool, strict: bool) -> None:
    """Compile RECIPES (recipe.toml files, their folders or ids; none = every recipe under recipes/)."""
    from generator.build import compile_recipes, load_default_cluster
    from generator.output import differences, write_tree
    from generator.project import Project

    project = Project.find()
    paths = [project.recipe_path(r) for r in recipes] if recipes else project.all_recipes()
    if not paths:
        raise RecipegenError(Diagnostic(str(project.recipes_dir), None, None, None, "no recipes to build"))
    out = out_dir or project.default_out
    cluster = load_default_cluster(cluster_path or project.default_cluster)
    result = compile_recipes(paths, cluster, project.root, out, strict)
    _print(result.warnings)
    ids = [plan.recipe.id for plan in result.plans]
    prune = not recipes
    if check:
        diffs = differences(out, result.files, ids, prune)
        for d in diffs[:20]:
            click.echo(f"{out / d.path}: {d.kind}", err=True)
        if diffs:
            more = f" ({len(diffs) - 20} more not shown)" if len(diffs) > 20 else ""
            click.echo(f"{out}: {len(diffs)} file(s) differ from a fresh build{more}; run `recipegen build`", err=True)
            sys.exit(1)
        click.echo(f"{out}: up to date ({len(result.files)} files)")
        return
    diffs = write_tree(out, result.files, ids, prune)
    click.echo(f"{out}: {len(result.files)} files for {len(ids)} recipe(s), {len(diffs)} changed")


@main.command()
@click.argument("files", nargs=-1, type=click.Path(path_type=Path))
@cluster_option
@click.option("--strict", is_flag=True, help="Warnings fail too.")
def validate(files: tuple[Path, ...], cluster_path: Path | None, strict: bool) -> None:
    """Check recipes and cluster files against the schemas and the lint rules (none = the whole project)."""
    from generator.validate import validate_paths

    findings = validate_paths(list(files), cluster_path)
    _print(findings)
    failed = [f for f in findings if f.is_error or strict]
    if failed:
        sys.exit(1)
    if not findings:
        click.echo("ok")


@main.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("schema"), show_default=True,
              help="Folder to write recipe.schema.json and cluster.schema.json into.")
def schema(out_dir: Path) -> None:
    """Write the JSON Schemas (draft-07) that editors and CI validate recipes and clusters with."""
    from generator.schemas import SCHEMA_NAMES, schema_text

    out_dir.mkdir(parents=True, exist_ok=True)
    for name in SCHEMA_NAMES:
        target = out_dir / f"{name}.schema.json"
        text = schema_text(name)
        if not target.exists() or target.read_text("utf-8") != text:
            tmp = target.with_suffix(".tmp")
            tmp.write_text(text, "utf-8")
            tmp.replace(target)
        click.echo(str(target))


def _plan(recipe: str, cluster_path: Path | None):
    from generator.build import compile_one, load_default_cluster
    from generator.project import Project

    project = Project.find()
    cluster = load_default_cluster(cluster_path or project.default_cluster)
    return compile_one(project.recipe_path(recipe), cluster, project.root, project.default_out)


@main.command()
@click.argument("recipe")
@cluster_option
@click.option("--node", "node_name", help="Only this node.")
def explain(recipe: str, cluster_path: Path | None, node_name: str | None) -> None:
    """Show the resolved RECIPE and each node's exact command and environment, with where each value came from."""
    from generator.explain import explain as explain_plan

    plan, _, warnings = _plan(recipe, cluster_path)
    if node_name and node_name not in {n.node.name for n in plan.nodes}:
        raise click.BadParameter(f"'{node_name}' is not one of the recipe's nodes: "
                                 f"{', '.join(n.node.name for n in plan.nodes)}", param_hint="--node")
    for title, lines in explain_plan(plan, node_name):
        click.secho(title, bold=True)
        width = min(max((len(line.text) for line in lines), default=0), 72)
        for line in lines:
            origin = f"  # {line.origin}" if line.origin else ""
            note = f"; {line.note}" if line.note else ""
            click.echo(f"  {line.text.ljust(width)}{origin}{note}" if origin else f"  {line.text}")
        click.echo()
    _print(warnings)


@main.command()
@click.argument("recipes", nargs=-1)
@cluster_option
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Output folder (default: out/).")
def diff(recipes: tuple[str, ...], cluster_path: Path | None, out_dir: Path | None) -> None:
    """Show what a rebuild would change in out/, per node, as a unified diff."""
    import difflib

    from generator.build import compile_recipes, load_default_cluster
    from generator.output import differences
    from generator.project import Project

    project = Project.find()
    paths = [project.recipe_path(r) for r in recipes] if recipes else project.all_recipes()
    out = out_dir or project.default_out
    cluster = load_default_cluster(cluster_path or project.default_cluster)
    result = compile_recipes(paths, cluster, project.root, out)
    diffs = differences(out, result.files, [p.recipe.id for p in result.plans], prune=not recipes)
    for d in diffs:
        old = (out / d.path).read_text("utf-8").splitlines(True) if d.kind != "missing" and (out / d.path).is_file() else []
        new = result.files.get(d.path, "").splitlines(True)
        if d.kind == "stale" and d.path.endswith("/"):
            click.echo(f"--- {out / d.path} (would be removed: no such recipe)")
            continue
        click.echo("".join(difflib.unified_diff(old, new, f"a/{d.path}", f"b/{d.path}")), nl=False)
    if not diffs:
        click.echo(f"{out}: no changes")


# --- deploy -------------------------------------------------------------------------------------------------

def _deployment(recipe: str, cluster_path: Path | None, out_dir: Path | None, require_current: bool = True):
    from generator.build import compile_one, load_default_cluster
    from generator.deploy.targets import deployment
    from generator.project import Project

    project = Project.find()
    out = out_dir or project.default_out
    cluster = load_default_cluster(cluster_path or project.default_cluster)
    plan, files, _ = compile_one(project.recipe_path(recipe), cluster, project.root, out)
    return deployment(plan, files, out, require_current)


out_option = click.option("--out", "out_dir", type=click.Path(path_type=Path),
                          help="Folder holding the compiled stacks (default: out/).")


@main.command()
@click.argument("recipe")
@cluster_option
@out_option
@click.option("--timeout", default=1800.0, show_default=True, help="Seconds to wait for the head to serve.")
@click.option("--keep", is_flag=True, help="On failure, leave what started running (for debugging).")
def up(recipe: str, cluster_path: Path | None, out_dir: Path | None, timeout: float, keep: bool) -> None:
    """Preflight every node, start RECIPE's ranks, and wait until the head serves the model."""
    from generator.deploy.operate import DeployFailed, last_logs, start, stop, wait_until_serving
    from generator.deploy.preflight import preflight
    from generator.deploy.progress import Progress

    dep = _deployment(recipe, cluster_path, out_dir)
    reports = preflight(dep)
    problems = [(name, p) for name, r in reports.items() for p in r.problems]
    for name, report in reports.items():
        for note in report.notes:
            click.echo(f"{name}: {note}", err=True)
    if problems:
        for name, problem in problems:
            click.echo(f"{name}: preflight: {problem}", err=True)
        click.echo(f"preflight failed on {len({n for n, _ in problems})} node(s); nothing was started", err=True)
        sys.exit(1)
    with Progress([t.name for t in dep.targets], dep.head.name) as progress:
        try:
            failures = {n: e for n, e in start(dep).items() if e}
            if failures:
                raise DeployFailed("; ".join(f"{n}: start failed: {e}" for n, e in failures.items()))
            wait_until_serving(dep, timeout, progress.update)
        except (DeployFailed, KeyboardInterrupt) as exc:
            failed = exc
        else:
            failed = None
    if failed is None:
        click.echo(f"{dep.project}: serving {dep.plan.served_model_name} at {dep.url}")
        return
    click.echo(f"{dep.project}: up failed: {failed or 'interrupted'}", err=True)
    for name, text in last_logs(dep).items():
        click.echo(f"--- last log lines of {name} ---", err=True)
        for line in text.splitlines():
            click.echo(f"{name} | {line}", err=True)
    if not keep:
        for name, error in stop(dep).items():
            click.echo(f"{name}: {'stopped' if error is None else 'stop failed: ' + error}", err=True)
    sys.exit(1)


@main.command()
@click.argument("recipe")
@cluster_option
@out_option
def down(recipe: str, cluster_path: Path | None, out_dir: Path | None) -> None:
    """Stop and remove RECIPE's containers on every node at once."""
    from generator.deploy.operate import stop

    dep = _deployment(recipe, cluster_path, out_dir, require_current=False)
    results = stop(dep)
    for name, error in results.items():
        click.echo(f"{name}: {'down' if error is None else 'FAILED: ' + error}", err=error is not None)
    if any(results.values()):
        failed = ", ".join(n for n, e in results.items() if e)
        click.echo(f"{dep.project}: could not clean {failed}; the other nodes are clean", err=True)
        sys.exit(1)


@main.command()
@click.argument("recipe")
@cluster_option
@out_option
def ps(recipe: str, cluster_path: Path | None, out_dir: Path | None) -> None:
    """One table of RECIPE's ranks across nodes: node, context, container, state, health, uptime."""
    from rich.console import Console
    from rich.table import Table

    from generator.deploy.operate import rank_states

    dep = _deployment(recipe, cluster_path, out_dir, require_current=False)
    table = Table("node", "context", "container", "state", "health", "status", title=f"{dep.project} ({dep.url})")
    for rank in rank_states(dep):
        table.add_row(rank.node, rank.context, rank.container, rank.state, rank.health, rank.status)
    Console(width=200 if not sys.stdout.isatty() else None).print(table)


main.add_command(ps, name="status")


@main.command()
@click.argument("recipe")
@cluster_option
@out_option
@click.option("-f", "--follow", is_flag=True, help="Keep streaming.")
@click.option("--node", "nodes", multiple=True, help="Only this node (repeatable).")
@click.option("--tail", type=int, default=None, help="Lines from the end of each log.")
def logs(recipe: str, cluster_path: Path | None, out_dir: Path | None, follow: bool, nodes: tuple[str, ...],
         tail: int | None) -> None:
    """RECIPE's logs from every node, merged, each line prefixed by its node."""
    from generator.deploy.operate import follow_logs

    dep = _deployment(recipe, cluster_path, out_dir, require_current=False)
    known = {t.name for t in dep.targets}
    unknown = set(nodes) - known
    if unknown:
        raise click.BadParameter(f"{', '.join(sorted(unknown))} not among {', '.join(sorted(known))}",
                                 param_hint="--node")
    width = max(len(n) for n in known)
    for name, line in follow_logs(dep, follow, tail, set(nodes) or None):
        click.echo(f"{name.ljust(width)} | {line}")


@main.command()
@cluster_option
@click.option("--create", is_flag=True, help="Create the missing contexts as ssh://user@ssh_host.")
def contexts(cluster_path: Path | None, create: bool) -> None:
    """Each node's Docker context and whether it answers."""
    from generator.deploy.contexts import check_contexts

    from generator.build import load_default_cluster
    from generator.project import Project

    cluster = load_default_cluster(cluster_path or Project.find().default_cluster)
    rows = check_contexts(cluster, create)
    from rich.console import Console
    from rich.table import Table

    table = Table("node", "context", "endpoint", "answers", title=f"cluster {cluster.name}")
    for row in rows:
        table.add_row(row.node, row.context, row.endpoint or "-", row.answer)
    Console(width=200 if not sys.stdout.isatty() else None).print(table)
    if any(not row.ok for row in rows):
        sys.exit(1)
