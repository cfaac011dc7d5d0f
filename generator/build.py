"""`recipegen build`: recipes + cluster -> plans -> rendered, verified files -> out/ (all or nothing)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Iterator
from pathlib import Path

from generator.check.router import routed, router_findings
from generator.check.rules import lint_cluster, lint_recipe
from generator.diagnostics import Diagnostic, RecipegenError, Severity, display_path
from generator.plan.nodes import plan_recipe
from generator.plan.metrics import METRICS_DIR
from generator.plan.router import ROUTER_DIR, plan_router
from generator.plan.types import WATCH_FILE, RecipePlan
from generator.render.templates import render_node, render_stack, render_watch
from generator.render.router import render_router
from generator.render.sizes import launcher_sizes
from generator.resolve.load import load_cluster, load_recipe
from generator.resolve.model import Cluster, Recipe
from generator.resolve.project import Project
from generator.write.compare import stamp
from generator.write.verify import verify_compose


# Below this many recipes a process pool costs more (fork, pickling the texts back) than it saves.
PARALLEL_FROM = 24


@dataclass
class BuildResult:
    recipe_ids: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # path relative to out/ -> text
    warnings: list[Diagnostic] = field(default_factory=list)
    recipes: list[Recipe] = field(default_factory=list)  # loaded, when asked for (keep_recipes)
    watched: list[list[str]] = field(default_factory=list)  # what the compile read beyond the inputs (uptodate.py)


@dataclass(frozen=True)
class _Outcome:
    """What compiling one recipe gives back across a process boundary: texts and findings, and the loaded recipe
    when a side stack needs it (pickled only then: it costs ~1 ms a recipe)."""

    recipe_id: str | None  # None: the recipe failed, and `findings` say why
    files: dict[str, str]
    findings: list[Diagnostic]
    recipe: Recipe | None = None
    watched: list[list[str]] = field(default_factory=list)


def compile_recipes(recipe_paths: list[Path], cluster: Cluster, root: Path, out_dir: Path,
                    strict: bool = False, on_result: Callable[[str, dict[str, str]], None] | None = None,
                    keep_recipes: bool = False) -> BuildResult:
    """Compile every recipe, collecting every recipe's errors before failing (one run shows them all).

    Recipes compile independently, so large trees use every core; results keep the input order, so the
    output stays byte-identical however the work was split. `on_result` sees each recipe's files as they
    arrive (the writer stages them while the rest compiles). With `keep_recipes`, the loaded recipes come back
    too (the side stacks read them: nothing is loaded twice)."""
    work = [(path, cluster, root, out_dir, strict, keep_recipes) for path in recipe_paths]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if len(work) >= PARALLEL_FROM and cores > 1:
        import multiprocessing

        # fork: the workers inherit the loaded modules, compiled schemas and templates of this process.
        pool = multiprocessing.get_context("fork").Pool(cores)
        outcomes: Iterator[_Outcome] = pool.imap(_compile_star, work, chunksize=max(1, len(work) // (cores * 8)))
    else:
        pool = None
        outcomes = (_compile_outcome(*item) for item in work)
    result = BuildResult()
    errors: list[Diagnostic] = []
    try:
        for outcome in outcomes:
            recipe_id = outcome.recipe_id
            if recipe_id is None:
                errors.extend(outcome.findings)
                continue
            result.recipe_ids.append(recipe_id)
            result.files.update(outcome.files)
            result.warnings.extend(outcome.findings)
            if outcome.recipe is not None:
                result.recipes.append(outcome.recipe)
            result.watched += outcome.watched
            if on_result is not None and not errors:  # once one recipe failed nothing will be written
                on_result(recipe_id, outcome.files)
    finally:
        if pool is not None:
            pool.terminate()
    if errors:  # a parent shared by several recipes reports its errors once
        raise RecipegenError(list(dict.fromkeys(errors + result.warnings)))
    return result


def _compile_star(item: tuple[Path, Cluster, Path, Path, bool, bool]) -> _Outcome:
    return _compile_outcome(*item)


def _compile_outcome(path: Path, cluster: Cluster, root: Path, out_dir: Path, strict: bool,
                     keep_recipe: bool = False) -> _Outcome:
    try:
        plan, files, findings = compile_one(path, cluster, root, out_dir, strict)
    except RecipegenError as exc:
        return _Outcome(None, {}, exc.diagnostics)
    return _Outcome(plan.recipe.id, files, findings, plan.recipe if keep_recipe else None,
                    watched(plan.recipe, root))


def watched(recipe: Recipe, root: Path) -> list[list[str]]:
    """What compiling `recipe` read beyond the inputs a no-change build hashes (generator/write/uptodate.py):
    parents and mods outside recipes/ (by content), its model's folder in the Hugging Face cache (by stat, for
    the fit rules); ["uncached", model] for a model in a mounted folder (the next build compiles)."""
    from generator.resolve.modelfiles import hub_cache
    from generator.resolve.modelid import read_model

    recipes = (root / "recipes").resolve()
    paths = [doc.path for doc in recipe.documents] + [m.folder for m in recipe.mods if m.folder is not None]
    found = [["tree", str(p.resolve())] for p in paths if not p.resolve().is_relative_to(recipes)]
    if recipe.docker_image_dir:  # which candidate folder holds the build context decides the files' `build:`
        from generator.resolve.buildcontext import find_build_context

        context = find_build_context(recipe, root)
        found += [["stats", str(c / (recipe.dockerfile or "Dockerfile"))] for c in (context.looked if context else ())]
    model = read_model(recipe.model)
    if model.cache_folder is None:
        return found + [["uncached", recipe.model]]
    return found + [["stats", str(hub_cache() / model.cache_folder)]]


def compile_one(path: Path, cluster: Cluster, root: Path, out_dir: Path,
                strict: bool = False) -> tuple[RecipePlan, dict[str, str], list[Diagnostic]]:
    recipe = load_recipe(path, root / "recipes")
    findings = lint_recipe(recipe, cluster, launcher_sizes)
    failing = [f for f in findings if f.fails(strict)]
    if failing:
        raise RecipegenError(findings)
    plan = plan_recipe(recipe, cluster, root, out_dir)
    files = {f"{recipe.id}/{node.node.name}/compose.yaml": stamp(render_node(plan, node.rank)) for node in plan.nodes}
    files[f"{recipe.id}/stack.yaml"] = stamp(render_stack(plan))
    for name, text in files.items():
        verify_compose(text, f"{out_dir.name}/{name}")
    watch = render_watch(plan)
    if watch is not None:  # the Swarm stack's config file: Python, not YAML
        files[f"{recipe.id}/{WATCH_FILE}"] = stamp(watch)
    return plan, files, findings


def cluster_shown(cluster: Cluster, root: Path) -> str:
    """The cluster file as every header names it: relative to the project, so out/ is the same on every clone."""
    try:
        return cluster.path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return cluster.path.name


def compile_router(recipes: list[Recipe], cluster: Cluster, root: Path, out_dir: Path) -> dict[str, str]:
    """out/_router/'s files (none when the cluster has no `[router]`), from every recipe of the project: the
    recipes it routes must not share a served name, nor its port another listener (check/router.py)."""
    if cluster.router is None:
        return {}
    problems = router_findings(recipes, cluster)
    if any(p.is_error for p in problems):  # warnings are validate's to show
        raise RecipegenError(problems)
    plan = plan_router(routed(recipes, cluster), cluster, cluster_shown(cluster, root))
    files = render_router(plan, stamp)
    for name, text in files.items():
        if name.endswith(".yaml"):
            verify_compose(text, f"{out_dir.name}/{name}")
    return files


def compile_metrics(recipes: list[Recipe], cluster: Cluster, root: Path, out_dir: Path) -> dict[str, str]:
    """out/_metrics/'s files (none when the cluster has no `[metrics]`): the metrics stack over every recipe of the
    project (each one's scrape target is a file of its own, put in by `up`), checked like every compose file."""
    from generator.check.metrics import metrics_findings
    from generator.plan.metrics import plan_metrics
    from generator.render.metrics import render_metrics

    if cluster.metrics is None:
        return {}
    problems = metrics_findings(recipes, cluster)
    if any(p.is_error for p in problems):
        raise RecipegenError(problems)
    files = render_metrics(plan_metrics(recipes, cluster, cluster_shown(cluster, root)), stamp)
    for name, text in files.items():
        if name.endswith(("compose.yaml", "stack.yaml")):
            verify_compose(text, f"{out_dir.name}/{name}")
    return files


@dataclass(frozen=True)
class SideStack:
    """A stack compiled from every recipe of the project into out/<folder>/, beside the recipes' own: the router,
    and the next one (a metrics stack) the same way: add a SideStack to SIDE_STACKS, nothing else changes.

    `wanted`: does this cluster ask for it (when no side stack is wanted, no recipe is kept or loaded for them).
    `compile`: (the project's recipes, loaded once, in recipes/ order; cluster; project root; out/) -> its files,
    every path under `folder/`; {} removes the folder from out/. Its errors fail the build like a recipe's."""

    folder: str
    wanted: Callable[[Cluster], bool]
    compile: Callable[[list[Recipe], Cluster, Path, Path], dict[str, str]]


SIDE_STACKS: tuple[SideStack, ...] = (
    SideStack(ROUTER_DIR, lambda cluster: cluster.router is not None, compile_router),
    SideStack(METRICS_DIR, lambda cluster: cluster.metrics is not None, compile_metrics),
)


@dataclass
class ProjectBuild(BuildResult):
    """A build of the project: what `build`, `build --check` and `diff` all compare with (or write to) out/."""

    folders: list[str] = field(default_factory=list)  # out/'s folders this build owns: recipes, then side stacks
    dropped: list[str] = field(default_factory=list)  # side-stack folders no longer asked for: removed from out/
    prune: bool = False  # a whole build: the folders of recipes that are gone are removed too


def compile_project(project: Project, cluster: Cluster, out_dir: Path, refs: tuple[str, ...] = (),
                    strict: bool = False, on_result: Callable[[str, dict[str, str]], None] | None = None
                    ) -> ProjectBuild:
    """The one compile pipeline: the recipes named (all when none), then every side stack from all the project's
    recipes, so even a one-recipe build leaves out/ current. Each recipe is loaded once: the named ones by their
    compile, the others only loaded (not linted or rendered). `on_result` sees each folder's files as they come."""
    paths = project.recipe_paths(refs)
    if not paths:
        raise RecipegenError(Diagnostic(str(project.recipes_dir), None, None, None, "no recipes to build"))
    sides = [side for side in SIDE_STACKS if side.wanted(cluster)]
    compiled = compile_recipes(paths, cluster, project.root, out_dir, strict, on_result, keep_recipes=bool(sides))
    build = ProjectBuild(compiled.recipe_ids, compiled.files, compiled.warnings, compiled.recipes, compiled.watched,
                         folders=list(compiled.recipe_ids), prune=not refs)
    build.dropped = [side.folder for side in SIDE_STACKS if side not in sides]
    recipes, broken = _whole_project(project, paths, compiled.recipes) if sides else ([], [])
    for side in sides:
        if broken:  # left as it was, said in one line: out/ is stale there until that recipe loads again
            build.warnings.append(Diagnostic(f"{display_path(out_dir)}/{side.folder}", None, None, None,
                                             f"not rebuilt: {', '.join(broken)} does not load (`recipegen validate` "
                                             "says why), and this stack is built from every recipe",
                                             Severity.WARNING))
            continue
        files = side.compile(recipes, cluster, project.root, out_dir)
        if not files:
            build.dropped.append(side.folder)
            continue
        if on_result is not None:
            on_result(side.folder, files)
        build.files.update(files)
        build.folders.append(side.folder)
    return build


def _whole_project(project: Project, compiled_paths: list[Path], compiled: list[Recipe]
                   ) -> tuple[list[Recipe], list[str]]:
    """Every recipe of the project in recipes/ order (then any named from elsewhere): the compiled ones as they
    are, the rest loaded; and the files of those that do not load (a side stack without them would be wrong)."""
    by_path = {path.resolve(): recipe for path, recipe in zip(compiled_paths, compiled)}
    recipes: list[Recipe] = []
    broken: list[str] = []
    for path in project.all_recipes():
        recipe = by_path.pop(path.resolve(), None)
        if recipe is None:
            try:
                recipe = load_recipe(path, project.recipes_dir)
            except RecipegenError:
                broken.append(display_path(path))
                continue
        recipes.append(recipe)
    return recipes + list(by_path.values()), broken


def load_checked_cluster(path: Path) -> tuple[Cluster, list[Diagnostic]]:
    """The cluster and its lint warnings; refused with its findings when one is an error (a secret would
    reach out/)."""
    if not path.exists():
        raise RecipegenError(Diagnostic(str(path), None, None, None, "cluster file not found (use --cluster PATH)"))
    cluster = load_cluster(path)
    findings = lint_cluster(cluster.document)
    if any(f.is_error for f in findings):
        raise RecipegenError(findings)
    return cluster, findings
