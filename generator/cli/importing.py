"""`recipegen import`: peer recipe files as recipes (generator/importers). Formats results only."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from generator.diagnostics import Diagnostic, Severity, display_path

if TYPE_CHECKING:  # `recipegen --help` imports no importer (nor PyYAML)
    from generator.importers.base import NotCarried


@click.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--id", "recipe_id", help="The recipe id (one FILE only); default: the file's stem made a valid id.")
@click.option("--ray", is_flag=True, help="eugr recipes: keep Ray on several nodes, as run-recipe.py's --ray does "
                                          "(its default runs vLLM's own multi-node backend).")
@click.option("--mods-dir", "mods_dirs", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Where else to look for a recipe's mods (repeatable): a mods folder or a checkout of "
                   "eugr/spark-vllm-docker; looked in after the file's own places, before sparkrun's checkout.")
@click.option("--dry-run", is_flag=True, help="Print the recipe TOML; write nothing.")
@click.option("--force", is_flag=True, help="Replace an existing recipe folder of the same id (or cluster.toml).")
def import_(files: tuple[Path, ...], recipe_id: str | None, ray: bool, mods_dirs: tuple[Path, ...], dry_run: bool,
            force: bool) -> None:
    """Import eugr/spark-vllm-docker (recipe_version 1) and sparkrun (2) recipe FILES as recipes/<id>/, and
    their cluster settings (eugr's .env, a sparkrun cluster file) as the project's cluster.toml.

    The recipe runs what the peer's launcher would run: the command rendered as the peer renders it, the
    compiler's flags turned into keys, the launcher's own defaults carried with a comment naming them. Every peer
    key without a recipegen home is named on stderr (and in the recipe's header). Nothing is written when any
    FILE fails; an existing recipe is replaced only with --force.
    """
    from generator.importers import ImportOptions, ImportUsageError, import_files
    from generator.resolve.project import Project

    project = Project.find()
    try:
        results, cluster = import_files(list(files), project.recipes_dir, project.default_cluster, recipe_id,
                                        ImportOptions(ray=ray, mods_dirs=mods_dirs), force=force, dry_run=dry_run)
    except ImportUsageError as exc:
        raise click.UsageError(str(exc)) from None
    if cluster is not None:
        _named(cluster.imported.source, cluster.imported.not_carried)
        if dry_run:
            click.echo(cluster.text, nl=False)
        else:
            click.echo(f"{display_path(cluster.imported.source)} ({cluster.imported.peer}) -> "
                       f"{display_path(cluster.target)}")
    for result in results:
        _named(result.imported.source, result.imported.not_carried)
        if dry_run:
            click.echo(result.text, nl=False)
        else:
            mods = f", {len(result.imported.mods)} mod(s)" if result.imported.mods else ""
            click.echo(f"{display_path(result.imported.source)} ({result.imported.peer}) -> "
                       f"{display_path(result.folder / 'recipe.toml')}{mods}")


def _named(source: Path, notes: tuple[NotCarried, ...]) -> None:
    for note in notes:
        click.echo(str(Diagnostic(display_path(source), note.line, None, note.key, note.message,
                                  Severity.WARNING, "not-carried")), err=True)

