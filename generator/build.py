"""`recipegen build`: recipes + cluster -> plans -> rendered, verified files -> out/ (all or nothing)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from generator.diagnostics import Diagnostic, RecipegenError
from generator.lint import lint_cluster, lint_recipe
from generator.model import Cluster
from generator.plan import RecipePlan, plan_recipe
from generator.render import render_node, render_stack
from generator.resolve import load_cluster, load_recipe
from generator.verify import verify_compose


@dataclass
class BuildResult:
    plans: list[RecipePlan] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # path relative to out/ -> text
    warnings: list[Diagnostic] = field(default_factory=list)


def compile_recipes(recipe_paths: list[Path], cluster: Cluster, root: Path, out_dir: Path,
                    strict: bool = False) -> BuildResult:
    """Compile every recipe, collecting every recipe's errors before failing (one run shows them all)."""
    result = BuildResult()
    errors: list[Diagnostic] = []
    for path in recipe_paths:
        try:
            plan, files, warnings = compile_one(path, cluster, root, out_dir, strict)
        except RecipegenError as exc:
            errors.extend(exc.diagnostics)
            continue
        result.plans.append(plan)
        result.files.update(files)
        result.warnings.extend(warnings)
    if errors:
        raise RecipegenError(errors + result.warnings)
    return result


def compile_one(path: Path, cluster: Cluster, root: Path, out_dir: Path,
                strict: bool = False) -> tuple[RecipePlan, dict[str, str], list[Diagnostic]]:
    recipe = load_recipe(path, root / "recipes")
    findings = lint_recipe(recipe, cluster)
    failing = [f for f in findings if f.is_error or strict]
    if failing:
        raise RecipegenError(findings)
    plan = plan_recipe(recipe, cluster, root, out_dir)
    files = {f"{recipe.id}/{node.node.name}/compose.yaml": render_node(plan, node.rank) for node in plan.nodes}
    files[f"{recipe.id}/stack.yaml"] = render_stack(plan)
    for name, text in files.items():
        verify_compose(text, f"{out_dir.name}/{name}")
    return plan, files, findings


def load_default_cluster(path: Path) -> Cluster:
    """The cluster, refused with its findings when one of them is an error (a secret would reach out/)."""
    if not path.exists():
        raise RecipegenError(Diagnostic(str(path), None, None, None, "cluster file not found (use --cluster PATH)"))
    cluster = load_cluster(path)
    findings = lint_cluster(cluster.document)
    if any(f.is_error for f in findings):
        raise RecipegenError(findings)
    return cluster
