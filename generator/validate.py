"""`recipegen validate`: schema and lint findings for recipes and cluster files, all at once."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from generator.diagnostics import Diagnostic, RecipegenError, display_path
from generator.lint import lint_cluster, lint_recipe
from generator.model import Cluster
from generator.project import Project
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


def _expand(path: Path) -> list[Path]:
    """A folder of recipe folders (recipes/) stands for every recipe in it."""
    if path.is_dir() and not (path / RECIPE_FILE).exists():
        inside = sorted(p / RECIPE_FILE for p in path.iterdir() if (p / RECIPE_FILE).is_file())
        if inside:
            return inside
    return [path]


def validate_paths(paths: list[Path], cluster_path: Path | None) -> list[Diagnostic]:
    project = Project.find()
    if not paths:
        paths = project.cluster_files() + project.all_recipes()
        if not paths:
            raise RecipegenError(Diagnostic(display_path(project.root), None, None, None,
                                            "nothing to validate: no recipes/ and no cluster.toml here"))
    paths = [p for path in paths for p in _expand(path)]
    findings: list[Diagnostic] = []
    cluster: Cluster | None = None
    cluster_file = cluster_path or project.default_cluster
    if cluster_path is not None or cluster_file.is_file():
        # The recipes' cluster-dependent rules need it: a broken or missing one is a finding of its own.
        schema_problems: list[Diagnostic] = []
        found: list[Diagnostic] = []
        try:
            document = load_checked(cluster_file, "cluster", schema_problems)
            found += _unless_dropped(lint_cluster(document), document.dropped)
            cluster = cluster_from_document(document)
            if document.dropped:  # defaults in place of its invalid values: no ground to lint recipes on
                cluster = None
        except RecipegenError as exc:
            found += exc.diagnostics
        findings += sorted(dict.fromkeys(schema_problems + found), key=lambda d: (d.file, d.line or 0, d.col or 0))
    for path in paths:
        schema_problems: list[Diagnostic] = []  # reported with the lint findings of the valid rest, by line
        found: list[Diagnostic] = []
        try:
            if file_kind(path) == "cluster":
                if cluster is None or path.resolve() != cluster.path.resolve():
                    document = load_checked(path, "cluster", schema_problems)
                    found += _unless_dropped(lint_cluster(document), document.dropped)
                    cluster_from_document(document)
            else:
                recipe = load_recipe(path, project.recipes_dir, schema_problems)
                dropped = {key for doc in recipe.documents for key in doc.dropped}
                found += _unless_dropped(lint_recipe(recipe, cluster), dropped)
        except RecipegenError as exc:
            found += exc.diagnostics
        findings += sorted(dict.fromkeys(schema_problems + found), key=lambda d: (d.file, d.line or 0, d.col or 0))
    return list(dict.fromkeys(findings))


# Rules reading several keys: when one of them was dropped as invalid, the default that replaced it would make
# the rule report a problem that is not there.
_READS = {"parallel-size": {"tensor_parallel_size", "pipeline_parallel_size", "required_nodes", "nodes"},
          "too-many-nodes": {"required_nodes", "nodes"}, "pass-env": {"env", "pass_env"},
          "cudagraph-capture": {"args"}, "duplicate-flag": {"args"}, "sglang-backend": {"engine"}}


def _unless_dropped(findings: list[Diagnostic], dropped: set[str] | frozenset[str]) -> list[Diagnostic]:
    def stands(d: Diagnostic) -> bool:
        key = d.key or ""
        about_dropped = any(key == k or key.startswith((k + ".", k + "[")) or k.startswith((key + ".", key + "["))
                            for k in dropped)
        return not about_dropped and not (_READS.get(d.rule or "", set()) & dropped)
    return [d for d in findings if stands(d)] if dropped else findings
