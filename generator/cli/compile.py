"""The compile commands (build, validate, schema, explain, diff) and what every command starts from: its inputs
(project, cluster, out/) and the `--cluster` option. Commands import what they use inside their bodies, so
`--help` and `validate` never pay for the deploy modules, rich or Jinja.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from generator.diagnostics import Diagnostic, RecipegenError, Severity

if TYPE_CHECKING:
    from generator.build import ProjectBuild
    from generator.plan.types import RecipePlan
    from generator.resolve.model import Cluster
    from generator.resolve.project import Project


def print_diagnostics(diagnostics: list[Diagnostic]) -> None:
    for d in diagnostics:
        click.echo(str(d), err=True)


@dataclass(frozen=True)
class Inputs:
    """What every command starts from: the project, its cluster (with lint warnings) and the output folder."""

    project: "Project"
    cluster: "Cluster"
    cluster_warnings: list[Diagnostic]
    out: Path


def inputs(cluster_path: Path | None, out_dir: Path | None = None, refs: tuple[str, ...] = ()) -> Inputs:
    from generator.build import load_checked_cluster
    from generator.resolve.project import Project

    project = Project.of(refs, cluster_path)
    cluster, warnings = load_checked_cluster(cluster_path or project.default_cluster)
    return Inputs(project, cluster, warnings, out_dir or project.default_out)


cluster_option = click.option("--cluster", "cluster_path", type=click.Path(path_type=Path, readable=False),
                              help="Cluster file (default: cluster.toml of the project).")


@click.command()
@click.argument("recipes", nargs=-1)
@cluster_option
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Output folder (default: out/).")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 when the output folder differs from a fresh build.")
@click.option("--strict", is_flag=True, help="Lint warnings fail the build too.")
@click.option("--force", is_flag=True,
              help="Replace files in the output folder that were edited or not written by recipegen (they are lost).")
def build(recipes: tuple[str, ...], cluster_path: Path | None, out_dir: Path | None, check: bool, strict: bool,
          force: bool) -> None:
    """Compile RECIPES (recipe.toml files, their folders or ids; none = every recipe under recipes/)."""
    from generator.resolve.project import Project
    from generator.write import uptodate

    project = Project.of(recipes, cluster_path)
    out = out_dir or project.default_out
    run = uptodate.key(project.root, cluster_path or project.default_cluster, out, recipes, strict)
    digest = uptodate.inputs_digest(project.root, cluster_path or project.default_cluster)
    known = uptodate.recall(run, digest, out)
    if known is not None:  # the same inputs, and out/ as that run left it: say what it said
        for line in known.stderr:
            click.echo(line, err=True)
        click.echo(f"{out}: up to date ({known.files} files)" if check else
                   f"{out}: {known.files} files for {known.recipes} recipe(s), 0 changed")
        return
    said: list[Diagnostic] = []
    given = inputs(cluster_path, out_dir, recipes)
    project.check_out_dir(out)
    said += given.cluster_warnings + (project.skipped_recipes() if not recipes else [])
    print_diagnostics(said)
    if any(w.fails(strict) for w in given.cluster_warnings):
        sys.exit(1)
    result = (_check if check else _write)(given, recipes, strict, force)
    if not any(kind == "uncached" for kind, _ in result.watched):
        uptodate.remember(run, uptodate.Record(digest, result.watched, "", {}, [str(d) for d in said + result.warnings],
                                               len(result.files), len(result.recipe_ids)), out)


def _write(given: Inputs, recipes: tuple[str, ...], strict: bool, force: bool) -> ProjectBuild:
    from generator.build import compile_project
    from generator.write.journal import recover
    from generator.write.lock import held
    from generator.write.output import Stager

    out = given.out
    # One build writes out/ at a time: another one's staging is not an interrupted build's to clean up, and
    # out/'s files are checked (replaceable?) under the same lock as the swap.
    with held(out.parent):
        print_diagnostics(recover(out))  # a build killed mid-swap: finish it first, and say so
        with Stager(out, force) as stager:  # stages folders as they compile; nothing lands unless all do
            result = compile_project(given.project, given.cluster, out, recipes, strict, on_result=stager.offer)
            diffs = stager.commit(result.folders, result.prune, result.dropped)
    print_diagnostics(result.warnings)
    for d in diffs:
        if d.kind in ("symlink", "stray"):
            click.echo(f"{_shown_in(out, d.path)}: replaced ({_KIND[d.kind]})", err=True)
    click.echo(f"{out}: {len(result.files)} files for {len(result.recipe_ids)} recipe(s), {len(diffs)} changed")
    return result


def _check(given: Inputs, recipes: tuple[str, ...], strict: bool, force: bool) -> ProjectBuild:
    from generator.build import compile_project
    from generator.write.compare import differences
    from generator.write.journal import leftover_problems

    out = given.out
    result = compile_project(given.project, given.cluster, out, recipes, strict)
    print_diagnostics(result.warnings)
    interrupted = leftover_problems(out)
    print_diagnostics(interrupted)
    diffs = differences(out, result.files, result.folders, result.prune, result.dropped)
    for d in diffs[:20]:
        click.echo(f"{_shown_in(out, d.path)}: {_KIND.get(d.kind, d.kind)}", err=True)
    if diffs or interrupted:
        more = f" ({len(diffs) - 20} more not shown)" if len(diffs) > 20 else ""
        click.echo(f"{out}: {len(diffs) + len(interrupted)} difference(s) from a fresh build{more}; "
                   "run `recipegen build`", err=True)
        sys.exit(1)
    click.echo(f"{out}: up to date ({len(result.files)} files)")
    return result


def _shown_in(out: Path, relative: str) -> str:
    from generator.diagnostics import display_path

    return f"{display_path(out)}/{relative}"  # not resolved: a symlink is named, not its target


_KIND = {"symlink": "a symlink where recipegen writes a file", "stray": "an empty folder a build does not make"}


@click.command()
@click.argument("files", nargs=-1, type=click.Path(path_type=Path, readable=False))  # load says why
@cluster_option
@click.option("--strict", is_flag=True, help="Warnings fail too.")
def validate(files: tuple[Path, ...], cluster_path: Path | None, strict: bool) -> None:
    """Check recipes and cluster files against the schemas and the lint rules `build` runs, so what passes here
    builds (none = the whole project)."""
    from generator.validate import validate_paths

    findings = validate_paths(list(files), cluster_path)
    print_diagnostics(findings)
    if any(f.fails(strict) for f in findings):
        sys.exit(1)
    if all(f.severity is Severity.NOTE for f in findings):  # notes say what was found, not what is wrong
        click.echo("ok")


@click.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path),
              help="Folder to write recipe.schema.json and cluster.schema.json into (default: the project's schema/).")
def schema(out_dir: Path | None) -> None:
    """Write the JSON Schemas (draft-07) that editors and CI validate recipes and clusters with."""
    from generator.read.schemas import SCHEMA_NAMES, schema_text
    from generator.resolve.project import Project

    out_dir = out_dir or Project.find().root / "schema"
    if out_dir.exists() and not out_dir.is_dir():
        raise RecipegenError(Diagnostic(str(out_dir), None, None, None, "is a file, not a folder"))
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in SCHEMA_NAMES:
        target = out_dir / f"{name}.schema.json"
        text = schema_text(name)
        if not target.exists() or target.read_text("utf-8") != text:
            tmp = target.with_suffix(".tmp")
            tmp.write_text(text, "utf-8")
            tmp.replace(target)
        click.echo(str(target))


def compile_recipe(recipe: str, given: Inputs) -> tuple[RecipePlan, dict[str, str], list[Diagnostic]]:
    """RECIPE compiled for the given cluster and out/: (plan, files, findings)."""
    from generator.build import compile_one

    return compile_one(given.project.recipe_path(recipe), given.cluster, given.project.root, given.out)


@click.command()
@click.argument("recipe")
@cluster_option
@click.option("--node", "node_name", help="Only this node.")
def explain(recipe: str, cluster_path: Path | None, node_name: str | None) -> None:
    """Show the resolved RECIPE and each node's exact command and environment, with where each value came from.

    Values are byte for byte: control and invisible characters are escaped (bash $'...' in shell words, TOML
    \\uXXXX in values), never dropped."""
    from generator.explain import explain as explain_plan, fit_section

    plan, _, warnings = compile_recipe(recipe, inputs(cluster_path, refs=(recipe,)))
    if node_name and node_name not in {n.node.name for n in plan.nodes}:
        raise click.BadParameter(f"'{node_name}' is not one of the recipe's nodes: "
                                 f"{', '.join(n.node.name for n in plan.nodes)}", param_hint="--node")
    for title, lines in [*explain_plan(plan, node_name), fit_section(plan)]:
        click.secho(title, bold=True)
        width = min(max((len(line.text) for line in lines), default=0), 72)
        for line in lines:
            said = "; ".join(str(part) for part in (line.origin, line.note) if part)
            click.echo(f"  {line.text.ljust(width)}  # {said}" if said else f"  {line.text}")
        click.echo()
    print_diagnostics(warnings)


@click.command()
@click.argument("recipes", nargs=-1)
@cluster_option
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Output folder (default: out/).")
@click.option("--exit-code", is_flag=True, help="Exit 1 when there are changes (like git diff --exit-code).")
def diff(recipes: tuple[str, ...], cluster_path: Path | None, out_dir: Path | None, exit_code: bool) -> None:
    """Show what a rebuild would change in out/, per node, as a unified diff."""
    import difflib

    from generator.build import compile_project
    from generator.diagnostics import display_path
    from generator.write.compare import differences

    given = inputs(cluster_path, out_dir, recipes)
    out = given.out
    result = compile_project(given.project, given.cluster, out, recipes)
    diffs = differences(out, result.files, result.folders, result.prune, result.dropped)
    for d in diffs:
        shown = display_path(out / d.path)
        if d.kind == "stale" and d.path.endswith("/"):
            click.echo(f"--- {shown}/ (would be removed: no such recipe)")
            continue
        if d.kind in _KIND:
            click.echo(f"--- {_shown_in(out, d.path)} (would be replaced: {_KIND[d.kind]})")
            continue
        on_disk = out / d.path
        old = (on_disk.read_bytes().decode("utf-8", "replace").splitlines(True)
               if d.kind != "missing" and on_disk.is_file() else [])
        new = result.files.get(d.path, "").splitlines(True)
        click.echo("".join(difflib.unified_diff(old, new, f"a/{shown}", f"b/{shown}")), nl=False)
    if not diffs:
        click.echo(f"{display_path(out)}: no changes")
    elif exit_code:
        sys.exit(1)
