"""What the deployer acts on: each node of a compiled recipe, its context and its compose file in out/.

Built from the plan and the files on disk; nothing here re-derives a rank, an address or a flag.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

from generator.deploy.docker import Docker
from generator.diagnostics import Diagnostic, RecipegenError
from generator.plan import LABEL_PREFIX, NodePlan, RecipePlan

T = TypeVar("T")


@dataclass(frozen=True)
class Target:
    plan: NodePlan
    compose_file: Path
    model: str

    @property
    def name(self) -> str:
        return self.plan.node.name

    @property
    def docker(self) -> Docker:
        return Docker(self.plan.node.context)


@dataclass(frozen=True)
class Deployment:
    plan: RecipePlan
    targets: tuple[Target, ...]

    @property
    def project(self) -> str:
        return self.plan.recipe.id

    @property
    def head(self) -> Target:
        return self.targets[0]

    @property
    def label(self) -> str:
        return f"{LABEL_PREFIX}.recipe={self.project}"

    @property
    def url(self) -> str:
        node = self.head.plan.node
        return f"http://{node.ssh_host}:{self.plan.serve_port}"


def deployment(plan: RecipePlan, files: dict[str, str], out_dir: Path, require_current: bool = True) -> Deployment:
    """The deployer runs the committed files; they must be what the recipe compiles to now."""
    from generator.output import differences

    if require_current:
        stale = differences(out_dir, files, [plan.recipe.id], prune=False)
        if stale:
            raise RecipegenError(Diagnostic(str(out_dir / plan.recipe.id), None, None, None,
                                            f"out/ is not current for this recipe ({stale[0].path}: {stale[0].kind}); "
                                            "run `recipegen build` first"))
    targets = tuple(Target(node, out_dir / plan.recipe.id / node.node.name / "compose.yaml", plan.recipe.model)
                    for node in plan.nodes)
    return Deployment(plan, targets)


def each(targets: tuple[Target, ...] | list[Target], fn: Callable[[Target], T]) -> dict[str, T | BaseException]:
    """Run fn on every node at once; a node's exception is its result, never the others' problem."""
    def guarded(target: Target):
        try:
            return fn(target)
        except Exception as exc:  # noqa: BLE001 - reported per node by the caller
            return exc

    with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        results = list(pool.map(guarded, targets))
    return {t.name: r for t, r in zip(targets, results)}
