"""`recipegen validate`: schema and lint findings for recipes and cluster files, all at once."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from generator.diagnostics import Diagnostic, RecipegenError, display_path
from generator.lint import lint_cluster, lint_recipe
from generator.model import Cluster
from generator.project import Project, skipped_entries
from generator.resolve import RECIPE_FILE, cluster_from_document, load_checked, load_recipe

_SCHEMA_DIRECTIVE = re.compile(r"^#:schema\s+(\S+)")


def file_kind(path: Path) -> str:
    """A recipe.toml is a recipe; otherwise the file's `#:schema` directive says, else its content: a cluster
    has a list of [[nodes]] tables, or is named like one."""
    if path.name == RECIPE_FILE or not path.is_file():
        return "recipe"
    try:
        text = path.read_text("utf-8", errors="replace")
    except OSError:
        return "recipe"  # load_toml reports why it cannot be read
    directive = _SCHEMA_DIRECTIVE.match(text.lstrip("\ufeff \t\r\n"))
    if directive:
        return "cluster" if "cluster" in directive[1] else "recipe"
    try:
        nodes = tomllib.loads(text.lstrip("\ufeff")).get("nodes")
    except tomllib.TOMLDecodeError:
        nodes = None
    if isinstance(nodes, list) and nodes and all(isinstance(n, dict) for n in nodes):
        return "cluster"
    return "cluster" if path.name.startswith("cluster") else "recipe"


def _expand(path: Path) -> tuple[list[Path], list[Diagnostic]]:
    """A folder of recipe folders (recipes/) stands for every recipe in it; what it leaves out is said."""
    if path.is_dir() and not (path / RECIPE_FILE).exists() and not (path / RECIPE_FILE).is_symlink():
        inside = sorted(p / RECIPE_FILE for p in path.iterdir() if (p / RECIPE_FILE).is_file())
        if inside:
            return inside, skipped_entries(path)
    return [path], []


def validate_paths(paths: list[Path], cluster_path: Path | None) -> list[Diagnostic]:
    project = Project.of([str(p) for p in paths], cluster_path)
    findings: list[Diagnostic] = []
    if not paths:
        paths = project.cluster_files() + project.all_recipes()
        findings += project.skipped_recipes()
        if not paths:
            raise RecipegenError(findings + [Diagnostic(display_path(project.root), None, None, None,
                                                        "nothing to validate: no recipes/ and no cluster.toml here")])
    expanded = []
    for path in paths:
        found, skipped = _expand(path)
        expanded += found
        findings += skipped
    paths = expanded
    cluster: Cluster | None = None
    cluster_file = cluster_path or project.default_cluster
    if cluster_path is not None or cluster_file.is_file():
        # The recipes' cluster-dependent rules need it: a broken or missing one is a finding of its own.
        try:
            document = load_checked(cluster_file, "cluster")
            findings += lint_cluster(document)
            cluster = cluster_from_document(document)
        except RecipegenError as exc:
            findings += exc.diagnostics
    for path in paths:
        try:
            if file_kind(path) == "cluster":
                if cluster is None or path.resolve() != cluster.path.resolve():
                    document = load_checked(path, "cluster")
                    findings += lint_cluster(document)
                    cluster_from_document(document)
            else:
                findings += lint_recipe(load_recipe(path, project.recipes_dir), cluster)
        except RecipegenError as exc:
            findings += exc.diagnostics
    return list(dict.fromkeys(findings))
