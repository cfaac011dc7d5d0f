"""`recipegen build`: recipes + cluster -> plans -> rendered, verified files -> out/ (all or nothing)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Iterator
from pathlib import Path

from generator.check.router import routed, router_findings
from generator.check.rules import lint_cluster, lint_recipe
from generator.diagnostics import Diagnostic, RecipegenError
from generator.plan.nodes import plan_recipe
from generator.plan.router import plan_router
from generator.plan.types import RecipePlan
from generator.render.templates import large_blocks, render_node, render_stack
from generator.render.router import render_router
from generator.render.sizes import launcher_sizes
from generator.resolve.load import load_cluster, load_recipe
from generator.resolve.model import Cluster, Recipe
from generator.write.compare import stamp
from generator.write.verify import verify_compose


# Below this many recipes a process pool costs more (fork, pickling the texts back) than it saves.
PARALLEL_FROM = 24


@dataclass
class BuildResult:
    recipe_ids: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # path relative to out/ -> text
    warnings: list[Diagnostic] = field(default_factory=list)


@dataclass(frozen=True)
class _Outcome:
    """What compiling one recipe gives back across a process boundary: texts and findings, not the plan."""

    recipe_id: str | None  # None: the recipe failed, and `findings` say why
    files: dict[str, str]
    findings: list[Diagnostic]


def compile_recipes(recipe_paths: list[Path], cluster: Cluster, root: Path, out_dir: Path,
                    strict: bool = False, on_result: Callable[[str, dict[str, str]], None] | None = None
                    ) -> BuildResult:
    """Compile every recipe, collecting every recipe's errors before failing (one run shows them all).

    Recipes compile independently, so large trees use every core; results keep the input order, so the
    output stays byte-identical however the work was split. `on_result` sees each recipe's files as they
    arrive (the writer stages them while the rest compiles)."""
    work = [(path, cluster, root, out_dir, strict) for path in recipe_paths]
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
            if on_result is not None and not errors:  # once one recipe failed nothing will be written
                on_result(recipe_id, outcome.files)
    finally:
        if pool is not None:
            pool.terminate()
    if errors:  # a parent shared by several recipes reports its errors once
        raise RecipegenError(list(dict.fromkeys(errors + result.warnings)))
    return result


def _compile_star(item: tuple[Path, Cluster, Path, Path, bool]) -> _Outcome:
    return _compile_outcome(*item)


def _compile_outcome(path: Path, cluster: Cluster, root: Path, out_dir: Path, strict: bool) -> _Outcome:
    try:
        plan, files, findings = compile_one(path, cluster, root, out_dir, strict)
    except RecipegenError as exc:
        return _Outcome(None, {}, exc.diagnostics)
    return _Outcome(plan.recipe.id, files, findings)


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
    blocks = large_blocks()
    for name, text in files.items():
        verify_compose(text, f"{out_dir.name}/{name}", blocks)
    return plan, files, findings


def compile_router(recipe_paths: list[Path], cluster: Cluster, root: Path, out_dir: Path) -> dict[str, str]:
    """out/_router/'s files (none when the cluster has no `[router]`), from every recipe of the project: the
    recipes it routes must not share a served name, nor its port another listener (check/router.py)."""
    if cluster.router is None:
        return {}
    recipes = [load_recipe(path, root / "recipes") for path in recipe_paths]
    problems = router_findings(recipes, cluster)
    if any(p.is_error for p in problems):  # warnings are validate's to show
        raise RecipegenError(problems)
    plan = plan_router(routed(recipes, cluster), cluster, shown_cluster(cluster, root))
    files = render_router(plan, stamp)
    for name, text in files.items():
        if name.endswith(".yaml"):
            verify_compose(text, f"{out_dir.name}/{name}")
    return files


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


def compile_metrics(recipes: list[Recipe], cluster: Cluster, cluster_source: str, out_dir: Path) -> dict[str, str]:
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
    files = render_metrics(plan_metrics(recipes, cluster, cluster_source), stamp)
    for name, text in files.items():
        if name.endswith(("compose.yaml", "stack.yaml")):
            verify_compose(text, f"{out_dir.name}/{name}")
    return files


def compile_side_stacks(recipe_paths: list[Path], cluster: Cluster, root: Path, out_dir: Path) -> dict[str, str]:
    """The stacks every recipe of the project feeds, beside the recipes' own: the router, the metrics stack."""
    files = compile_router(recipe_paths, cluster, root, out_dir)
    if cluster.metrics is not None:
        recipes = [load_recipe(path, root / "recipes") for path in recipe_paths]
        files.update(compile_metrics(recipes, cluster, shown_cluster(cluster, root), out_dir))
    return files


def shown_cluster(cluster: Cluster, root: Path) -> str:
    """The cluster file as every header names it: relative to the project, so out/ is the same on every clone."""
    try:
        return cluster.path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return cluster.path.name
