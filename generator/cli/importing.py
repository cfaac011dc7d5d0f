"""`recipegen import`: peer recipe files as recipes (generator/importers). Formats results only."""

from __future__ import annotations

from pathlib import Path

import click

from generator.diagnostics import Diagnostic, RecipegenError, Severity, display_path


@click.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--id", "recipe_id", help="The recipe id (one FILE only); default: the file's stem made a valid id.")
@click.option("--ray", is_flag=True, help="eugr recipes: keep Ray on several nodes, as run-recipe.py's --ray does "
                                          "(its default runs vLLM's own multi-node backend).")
@click.option("--dry-run", is_flag=True, help="Print the recipe TOML; write nothing.")
@click.option("--force", is_flag=True, help="Replace an existing recipe folder of the same id.")
def import_(files: tuple[Path, ...], recipe_id: str | None, ray: bool, dry_run: bool, force: bool) -> None:
    """Import eugr/spark-vllm-docker (recipe_version 1) and sparkrun (2) recipe FILES as recipes/<id>/, and
    their cluster settings (eugr's .env, a sparkrun cluster file) as the project's cluster.toml.

    The recipe runs what the peer's launcher would run: the command rendered as the peer renders it, the
    compiler's flags turned into keys, the launcher's own defaults carried with a comment naming them. Every peer
    key without a recipegen home is named on stderr (and in the recipe's header). Nothing is written when any
    FILE fails; an existing recipe is replaced only with --force.
    """
    from generator.importers import ImportOptions, convert, import_recipe, recipe_id_from
    from generator.importers.clusters import convert_cluster, is_cluster_file, render_cluster, write_cluster
    from generator.model import RECIPE_ID
    from generator.project import Project

    if recipe_id is not None and len(files) > 1:
        raise click.UsageError("--id names one recipe: give one FILE with it")
    project = Project.find()
    options = ImportOptions(ray=ray)
    clusters = [f for f in files if is_cluster_file(f)]
    files = tuple(f for f in files if f not in clusters)
    if len(clusters) > 1:
        raise click.UsageError("one cluster file at a time: each becomes the project's cluster.toml")
    cluster_texts = [(f, convert_cluster(f)) for f in clusters]
    target = project.default_cluster
    if cluster_texts and not dry_run and not force and target.exists():
        raise RecipegenError(Diagnostic(display_path(target), None, None, None,
                                        "the project has a cluster file: pass --force to replace it"))
    ids = [recipe_id or recipe_id_from(f.stem) for f in files]
    if len(set(ids)) < len(ids):
        raise click.UsageError(f"two FILES would both become recipe '{max(ids, key=ids.count)}': import them "
                               f"one at a time with --id")
    for f, rid in zip(files, ids):  # every file is read and converted before anything is written
        if not RECIPE_ID.match(rid):
            raise RecipegenError(Diagnostic(display_path(f), None, None, "--id", f"'{rid}' is not a recipe id"))
        convert(f, options)
        if not dry_run and not force and (project.recipes_dir / rid).exists():
            raise RecipegenError(Diagnostic(display_path(project.recipes_dir / rid), None, None, None,
                                            "a recipe with this id exists: pass --force to replace it, or --id"))
    for f, cluster in cluster_texts:
        text = render_cluster(cluster)
        for note in cluster.not_carried:
            click.echo(str(Diagnostic(display_path(f), note.line, None, note.key, note.message,
                                      Severity.WARNING, "not-carried")), err=True)
        if dry_run:
            click.echo(text, nl=False)
        else:
            write_cluster(target, text)
            click.echo(f"{display_path(f)} ({cluster.peer}) -> {display_path(target)}")
    for f, rid in zip(files, ids):
        result = import_recipe(f, project.recipes_dir, rid, options, force=force, dry_run=dry_run)
        for note in result.imported.not_carried:
            click.echo(str(Diagnostic(display_path(f), note.line, None, note.key, note.message,
                                      Severity.WARNING, "not-carried")), err=True)
        if dry_run:
            click.echo(result.text, nl=False)
        else:
            mods = f", {len(result.imported.mods)} mod(s)" if result.imported.mods else ""
            click.echo(f"{display_path(f)} ({result.imported.peer}) -> "
                       f"{display_path(result.folder / 'recipe.toml')}{mods}")


COMMANDS = {"import": import_}
