"""`recipegen import`: peer recipe files (eugr/spark-vllm-docker v1, spark-arena/sparkrun v2) as recipes.

One importer per peer format behind one interface (base.Importer); the file's own `recipe_version` picks it.
The action returns data (ImportResult); the CLI only formats it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from generator.diagnostics import Diagnostic, RecipegenError, display_path
from generator.importers.base import ImportedRecipe, Importer, ImportOptions as ImportOptions
from generator.importers.eugr import EugrImporter
from generator.importers.sparkrun import SparkrunImporter
from generator.importers.writer import render, write_recipe
from generator.importers.yamlfile import read
from generator.model import RECIPE_ID

IMPORTERS: tuple[Importer, ...] = (EugrImporter(), SparkrunImporter())


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


def convert(path: Path, options: ImportOptions) -> ImportedRecipe:
    doc = read(path)
    for importer in IMPORTERS:
        if importer.accepts(doc):
            return importer.convert(doc, options)
    version = doc.data.get("recipe_version")
    raise doc.error("recipe_version", f"recipe_version {version!r} is neither eugr's \"1\" nor sparkrun's \"2\"")


def import_recipe(path: Path, recipes_dir: Path, recipe_id: str | None, options: ImportOptions,
                  force: bool = False, dry_run: bool = False) -> ImportResult:
    rid = recipe_id or recipe_id_from(path.stem)
    if not RECIPE_ID.match(rid):
        raise RecipegenError(Diagnostic(display_path(path), None, None, "--id",
                                        f"'{rid}' is not a recipe id (lower-case letters, digits, '_' and '-')"))
    imported = convert(path, options)
    text = render(imported)
    folder = recipes_dir / rid
    if dry_run:
        return ImportResult(rid, folder, text, imported, False)
    if folder.exists() and not force:
        raise RecipegenError(Diagnostic(display_path(folder), None, None, None,
                                        "a recipe with this id exists: pass --force to replace it, or --id"))
    write_recipe(folder, text, imported)
    return ImportResult(rid, folder, text, imported, True)
