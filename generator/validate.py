"""`recipegen validate`: schema and lint findings for recipes and cluster files, all at once."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from generator.diagnostics import Diagnostic, RecipegenError, Severity, display_path
from generator.lint import RULES, lint_cluster, lint_recipe
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
        try:
            found, skipped = _expand(_by_id(path, project))
        except RecipegenError as exc:  # the other files are still checked
            findings += exc.diagnostics
            continue
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
    recipes_linted = False
    for path in paths:
        findings += _directive_findings(path)
        try:
            if file_kind(path) == "cluster":
                if cluster is None or path.resolve() != cluster.path.resolve():
                    document = load_checked(path, "cluster")
                    findings += lint_cluster(document)
                    cluster_from_document(document)
            else:
                findings += lint_recipe(load_recipe(path, project.recipes_dir), cluster)
                recipes_linted = True
        except RecipegenError as exc:
            findings += exc.diagnostics
    if recipes_linted and cluster is None and cluster_path is None:
        # `ok` would claim rules passed that never ran: name them and how to run them.
        skipped = ", ".join(r.id for r in RULES if r.needs_cluster)
        findings.append(Diagnostic(display_path(cluster_file), None, None, None,
                                   f"no cluster file, so the cluster-dependent rules ({skipped}) were skipped or "
                                   "checked against defaults; pass --cluster FILE", Severity.WARNING, "no-cluster"))
    return list(dict.fromkeys(findings))


def _by_id(path: Path, project: Project) -> Path:
    """`validate ID` like `build ID`: a name that is not a path but a recipe id under recipes/ is that recipe."""
    if path.exists() or path.is_symlink() or len(path.parts) != 1 or path.suffix in (".toml", ".tml"):
        return path
    by_id = project.recipes_dir / path / RECIPE_FILE
    if by_id.is_file():
        return by_id
    raise RecipegenError(Diagnostic(str(path), None, None, None,
                                    f"no such file, and no recipe id '{path}' under "
                                    f"{display_path(project.recipes_dir)}/ (looked for {display_path(by_id)})"))


def _directive_findings(path: Path) -> list[Diagnostic]:
    """A `#:schema` path that reaches no file breaks editors' checking without a word: say it here."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4096).decode("utf-8", "replace")
    except OSError:
        return []  # loading the file reports why it cannot be read
    for number, line in enumerate(head.lstrip("\ufeff").splitlines()[:20], 1):
        directive = _SCHEMA_DIRECTIVE.match(line)
        if not directive:
            if line.strip() and not line.lstrip().startswith("#"):
                return []  # directives sit in the leading comments
            continue
        target = directive[1]
        if "://" in target or (path.parent / target).is_file():
            return []
        return [Diagnostic(display_path(path), number, 1, None,
                           f"#:schema {target} is not a file relative to this file ({display_path(path.parent)}/); "
                           "editors then check nothing. In a subfolder, climb to schema/ (e.g. "
                           "`#:schema ../schema/cluster.schema.json`); `recipegen schema` writes schema/", Severity.WARNING, "schema-directive")]
    return []
