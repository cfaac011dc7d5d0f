"""`recipegen validate`: schema and lint findings for recipes and cluster files, all at once."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from generator.check.metrics import metrics_findings
from generator.check.router import router_findings
from generator.check.rules import RULES, lint_cluster, lint_recipe
from generator.diagnostics import Diagnostic, RecipegenError, Severity, display_path
from generator.render.sizes import launcher_sizes
from generator.resolve.load import RECIPE_FILE, cluster_from_document, load_checked, load_recipe
from generator.resolve.model import Cluster
from generator.resolve.project import Project, skipped_entries

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
    cluster_file = cluster_path or project.default_cluster
    # broken, unreadable or a dangling link: its own findings say how, never "no cluster file"
    cluster_read = cluster_path is not None or cluster_file.exists() or cluster_file.is_symlink()
    cluster, cluster_findings = _cluster(cluster_file) if cluster_read else (None, [])
    findings += cluster_findings
    recipes_linted = False
    for path in paths:
        findings += _directive_findings(path / RECIPE_FILE if path.is_dir() else path)  # `validate recipes/<id>`
        schema_problems: list[Diagnostic] = []  # reported with the lint findings of the valid rest, by line
        found_here: list[Diagnostic] = []
        try:
            if file_kind(path) == "cluster":
                if cluster is None or path.resolve() != cluster.path.resolve():
                    document = load_checked(path, "cluster", schema_problems)
                    found_here += _unless_dropped(lint_cluster(document), document.dropped)
                    cluster_from_document(document)
            else:
                recipe = load_recipe(path, project.recipes_dir, schema_problems)
                dropped = {key for doc in recipe.documents for key in doc.dropped}
                found_here += _unless_dropped(lint_recipe(recipe, cluster, launcher_sizes), dropped)
                recipes_linted = True
        except RecipegenError as exc:
            found_here += exc.diagnostics
        findings += _by_line(schema_problems + found_here)
    if cluster is not None and (cluster.router is not None or cluster.metrics is not None):
        findings += _router_findings(project, cluster)
    if recipes_linted and cluster is None and not cluster_read:
        # `ok` would claim rules passed that never ran: name them and how to run them.
        rules = ", ".join(r.id for r in RULES if r.needs_cluster)
        findings.append(Diagnostic(display_path(cluster_file), None, None, None,
                                   f"no cluster file, so the cluster-dependent rules ({rules}) were skipped or "
                                   "checked against defaults; pass --cluster FILE", Severity.WARNING, "no-cluster"))
    return list(dict.fromkeys(findings))


def _cluster(cluster_file: Path) -> tuple[Cluster | None, list[Diagnostic]]:
    """The cluster the recipes' cluster-dependent rules need, and its own findings: a broken one is a finding of
    its own, and no ground to lint recipes on (None)."""
    schema_problems: list[Diagnostic] = []
    found: list[Diagnostic] = []
    cluster = None
    try:
        document = load_checked(cluster_file, "cluster", schema_problems)
        found += _unless_dropped(lint_cluster(document), document.dropped)
        cluster = cluster_from_document(document)
        if document.dropped:  # defaults in place of its invalid values
            cluster = None
    except RecipegenError as exc:
        found += exc.diagnostics
    return cluster, _by_line(schema_problems + found)


def _router_findings(project: Project, cluster: Cluster) -> list[Diagnostic]:
    """The router's checks across every recipe of the project (a served name two routed recipes claim, its port),
    whichever files were named: one recipe's name conflicts with another's. Recipes that do not load are left
    out here; their own findings say why."""
    recipes = []
    for path in project.all_recipes():
        try:
            recipes.append(load_recipe(path, project.recipes_dir))
        except RecipegenError:
            continue
    return router_findings(recipes, cluster) + metrics_findings(recipes, cluster)


def _by_line(found: list[Diagnostic]) -> list[Diagnostic]:
    """One file's schema and lint findings together, in the order a person reads the file."""
    return sorted(dict.fromkeys(found), key=lambda d: (d.file, d.line or 0, d.col or 0))


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
                           "`#:schema ../schema/cluster.schema.json`); `recipegen schema` writes schema/",
                           Severity.WARNING, "schema-directive")]
    return []


# Rules reading several keys: when one of them was dropped as invalid, the default that replaced it would make
# the rule report a problem that is not there.
_READS = {"parallel-size": {"tensor_parallel_size", "pipeline_parallel_size", "required_nodes", "nodes"},
          "too-many-nodes": {"required_nodes", "nodes"}, "pass-env": {"env", "pass_env"},
          "cudagraph-capture": {"args"}, "duplicate-flag": {"args"}, "sglang-backend": {"engine"},
          **{rule: {"model"} for rule in ("fit", "fit-context", "fit-capacity", "fit-unknown", "model-mount")},
          "engine-release": {"docker_image"}}


def _unless_dropped(findings: list[Diagnostic], dropped: set[str] | frozenset[str]) -> list[Diagnostic]:
    def stands(d: Diagnostic) -> bool:
        key = d.key or ""
        about_dropped = any(key == k or key.startswith((k + ".", k + "[")) or k.startswith((key + ".", key + "["))
                            for k in dropped)
        return not about_dropped and not (_READS.get(d.rule or "", set()) & dropped)
    return [d for d in findings if stands(d)] if dropped else findings
