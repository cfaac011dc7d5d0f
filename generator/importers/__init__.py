"""`recipegen import`: peer recipe files (eugr/spark-vllm-docker v1, spark-arena/sparkrun v2) as recipes.

One importer per peer format behind one interface (base.Importer); the file's own `recipe_version` picks it.
The action returns data (ImportResult); the CLI only formats it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from generator.diagnostics import Diagnostic, RecipegenError, display_path
from generator.importers.base import ImportedRecipe, Importer, ImportOptions as ImportOptions, peer_key
from generator.importers.buildable import refuse_unbuildable
from generator.importers.clusters import (ImportedCluster, cluster_exists, convert_cluster, is_cluster_file,
                                         write_cluster)
from generator.importers.eugr import EugrImporter
from generator.importers.passenv import refuse_tokens
from generator.importers.sparkrun import SparkrunImporter
from generator.importers.writer import exists, render, schema_error, write_recipes
from generator.importers.yamlfile import YamlFile, read
from generator.resolve.model import RECIPE_ID

IMPORTERS: tuple[Importer, ...] = (EugrImporter(), SparkrunImporter())


class ImportUsageError(ValueError):
    """The files and options given cannot be imported together (the CLI's usage error, exit 2)."""


@dataclass(frozen=True)
class ClusterResult:
    target: Path
    text: str
    imported: ImportedCluster
    written: bool


@dataclass(frozen=True)
class ImportResult:
    recipe_id: str
    folder: Path
    text: str
    imported: ImportedRecipe
    written: bool


def recipe_id_from(stem: str) -> str:
    """A file stem made a valid recipe id: lower case, runs of other characters (dots too) become one '-'."""
    return re.sub(r"[^a-z0-9_-]+", "-", stem.lower()).strip("-_") or "imported"


def convert_file(path: Path, options: ImportOptions) -> tuple[ImportedRecipe, str]:
    """The import and its recipe TOML, which holds no secret and is a recipe the schema accepts."""
    doc = read(path)
    for importer in IMPORTERS:
        if importer.accepts(doc):
            imported = importer.convert(doc, options)
            refuse_tokens(doc, imported.fields + imported.bench)
            text = render(imported)
            _refuse_invalid(doc, imported, text)
            return imported, text
    if "recipe_version" not in doc.data:
        raise RecipegenError(Diagnostic(display_path(path), 1, 1, None, "not an eugr or sparkrun recipe: no "
                                        "recipe_version, command, container or model"))
    version = doc.data.get("recipe_version")
    raise doc.error("recipe_version", f"recipe_version {version!r} is neither eugr's \"1\" nor sparkrun's \"2\"")


def _prepare(path: Path, rid: str, recipes_dir: Path, options: ImportOptions, force: bool,
             dry_run: bool, cluster_file: Path | None = None) -> ImportResult:
    """One recipe file converted, checked as `validate` and `build` would check it (against `cluster_file`), and
    its target checked; nothing written yet."""
    if not RECIPE_ID.fullmatch(rid):
        raise RecipegenError(Diagnostic(display_path(path), None, None, "--id",
                                        f"'{rid}' is not a recipe id (lower-case letters, digits, '_' and '-')"))
    imported, text = convert_file(path, options)
    refuse_unbuildable(read(path), imported, text, rid, recipes_dir.parent, cluster_file)
    folder = recipes_dir / rid
    if not dry_run and path.resolve().is_relative_to(folder.resolve()):  # --force would delete the file itself
        raise RecipegenError(Diagnostic(display_path(path), None, None, None,
                                        f"lies in {display_path(folder)}, the folder the import replaces: move it "
                                        "out first, or import it with another --id"))
    if not dry_run and not force and folder.exists():  # early; checked again at the swap
        raise exists(folder)
    return ImportResult(rid, folder, text, imported, not dry_run)


def _refuse_invalid(doc: YamlFile, imported: ImportedRecipe, text: str) -> None:
    """A value the recipe schema refuses (`validate` would) is one line at the peer key it came from."""
    error = schema_error(text, "recipe")
    if error is None:
        return
    key = error.key or ""
    table, _, name = key.partition(".")
    sources = {f.key: f.source for f in imported.fields}
    sources |= {f"env.{v.name}": v.source for v in imported.env} | {f"bench.{f.key}": f.source for f in imported.bench}
    source = sources.get(f"{table}.{name.split('.')[0]}") or sources.get(table, "")
    raise doc.error(peer_key(doc, key or "recipe_version", source),
                    f"the recipe's `{key}` would be invalid: {error.message}")


def import_files(files: list[Path], recipes_dir: Path, cluster_target: Path, recipe_id: str | None,
                 options: ImportOptions, force: bool = False, dry_run: bool = False,
                 ) -> tuple[list[ImportResult], ClusterResult | None]:
    """Every file read and converted, and every target checked, before anything is written, and every recipe
    staged before any is swapped in: one bad file (or mod) and nothing is written. Recipe files become
    recipes/<id>/; a cluster file (eugr's .env, a sparkrun cluster file) the project's cluster.toml."""
    clusters = [f for f in files if is_cluster_file(f)]
    recipes = [f for f in files if f not in clusters]
    if len(clusters) > 1:
        raise ImportUsageError("one cluster file at a time: it becomes the project's cluster.toml")
    if recipe_id is not None and len(recipes) != 1:
        raise ImportUsageError("--id names one recipe: give one recipe FILE with it")
    if recipe_id is not None and not RECIPE_ID.fullmatch(recipe_id):
        raise ImportUsageError(f"--id '{recipe_id}' is not a recipe id (lower-case letters, digits, '_' and '-')")
    ids = [recipe_id or recipe_id_from(f.stem) for f in recipes]
    if len(set(ids)) < len(ids):
        raise ImportUsageError(f"two FILES would both become recipe '{max(ids, key=ids.count)}': import them "
                               f"one at a time with --id")
    cluster = None
    if clusters:
        imported, text = convert_cluster(clusters[0])
        if not dry_run and not force and cluster_target.exists():  # early; the write checks again
            raise cluster_exists(cluster_target)
        cluster = ClusterResult(cluster_target, text, imported, not dry_run)
    results = [_prepare(f, rid, recipes_dir, options, force, dry_run, cluster_target)
               for f, rid in zip(recipes, ids)]
    if not dry_run:
        write_recipes([(r.folder, r.text, r.imported) for r in results], force,
                      before_swap=lambda: write_cluster(cluster.target, cluster.text, force) if cluster else None)
    return results, cluster
