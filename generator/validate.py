"""`recipegen validate`: schema and lint findings for recipes and cluster files, all at once."""

from __future__ import annotations

from pathlib import Path

from generator.diagnostics import Diagnostic, RecipegenError
from generator.lint import lint_cluster, lint_recipe
from generator.model import Cluster
from generator.project import Project
from generator.resolve import RECIPE_FILE, load_checked, load_cluster, load_recipe


def file_kind(path: Path) -> str:
    """recipe.toml is a recipe; a file whose #:schema names the cluster schema, or that has [[nodes]], a cluster."""
    if path.name == RECIPE_FILE or path.is_dir():
        return "recipe"
    try:
        head = path.read_text("utf-8", errors="replace")
    except OSError:
        return "recipe"
    first = head.lstrip().splitlines()[0] if head.strip() else ""
    if first.startswith("#:schema"):
        return "cluster" if "cluster" in first else "recipe"
    return "cluster" if "[[nodes]]" in head or path.name.startswith("cluster") else "recipe"


def validate_paths(paths: list[Path], cluster_path: Path | None) -> list[Diagnostic]:
    project = Project.find()
    if not paths:
        paths = project.cluster_files() + project.all_recipes()
    findings: list[Diagnostic] = []
    cluster: Cluster | None = None
    cluster_file = cluster_path or project.default_cluster
    if cluster_path is not None or cluster_file.is_file():
        # The recipes' cluster-dependent rules need it: a broken or missing one is a finding of its own.
        try:
            findings += lint_cluster(load_checked(cluster_file, "cluster"))
            cluster = load_cluster(cluster_file)
        except RecipegenError as exc:
            findings += exc.diagnostics
    for path in paths:
        try:
            if file_kind(path) == "cluster":
                findings += lint_cluster(load_checked(path, "cluster"))
                load_cluster(path)
            else:
                findings += lint_recipe(load_recipe(path, project.recipes_dir), cluster)
        except RecipegenError as exc:
            findings += exc.diagnostics
    return list(dict.fromkeys(findings))
