"""An import never writes a recipe that `validate` or `build` would refuse: the recipe (with its mods) is staged in
a scratch folder of the project and the lint rules `validate` and `build` run are run on it, against the project's
cluster when it has one. The first error is one line at the peer key it came from, with the rule's own words, and
nothing is written (a mod too large for the compose files, a node count the cluster lacks, a flag value the
engine refuses ...)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from generator.diagnostics import RecipegenError
from generator.importers.base import ImportedRecipe, peer_key
from generator.importers.writer import write_staged
from generator.importers.yamlfile import YamlFile


def refuse_unbuildable(doc: YamlFile, imported: ImportedRecipe, text: str, recipe_id: str, project_root: Path,
                       cluster_file: Path | None) -> None:
    from generator.check.rules import lint_recipe
    from generator.render.sizes import launcher_sizes
    from generator.resolve.load import load_cluster, load_recipe

    cluster = None
    if cluster_file is not None and cluster_file.is_file():
        try:
            cluster = load_cluster(cluster_file)
        except RecipegenError:  # a broken cluster file is validate's finding of its own, not this import's
            cluster = None
    project_root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".recipegen-import-check-", dir=project_root))
    try:
        folder = write_staged(scratch / recipe_id, text, imported)
        try:
            findings = lint_recipe(load_recipe(folder / "recipe.toml"), cluster, launcher_sizes)
        except RecipegenError as exc:
            findings = exc.diagnostics
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    errors = [f for f in findings if f.is_error]
    if not errors:
        return
    first = errors[0]
    key = (first.key or "").split(".")[0].split("[")[0]
    sources = {f.key: f.source for f in imported.fields} | {"env": ""}
    rule = f"error[{first.rule}] " if first.rule else ""
    raise doc.error(peer_key(doc, key or "command", sources.get(key, "")),
                    f"the imported recipe would be refused by validate and build ({rule}{first.key or ''}: "
                    f"{first.message})")
