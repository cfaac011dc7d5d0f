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
from generator.model import Cluster, Node
from generator.plan import LABEL_PREFIX, NodePlan, RecipePlan

T = TypeVar("T")


@dataclass(frozen=True)
class Target:
    """One node of a deployed recipe. `plan` is there when the recipe was compiled for this command (up,
    images); down, ps and logs work from out/ alone, so a recipe that no longer compiles can still be stopped."""

    node: Node
    compose_file: Path
    plan: NodePlan | None = None

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def docker(self) -> Docker:
        return Docker(self.node.context)


@dataclass(frozen=True)
class Deployment:
    project: str  # the recipe id: Compose project and Swarm stack name
    cluster: Cluster
    out_dir: Path
    targets: tuple[Target, ...]  # head (rank 0) first
    plan: RecipePlan | None = None

    @property
    def head(self) -> Target:
        return self.targets[0]

    @property
    def label(self) -> str:
        return f"{LABEL_PREFIX}.recipe={self.project}"

    @property
    def stack_file(self) -> Path:
        return self.out_dir / self.project / "stack.yaml"

    @property
    def url(self) -> str | None:
        """Where the head serves; known from the plan only."""
        if self.plan is None:
            return None
        return f"http://{self.head.node.ssh_host}:{self.plan.serve_port}"


def deployment(plan: RecipePlan, files: dict[str, str], out_dir: Path, require_current: bool = True) -> Deployment:
    """The deployer runs the committed files; they must be what the recipe compiles to now."""
    from generator.output import differences

    if require_current:
        stale = differences(out_dir, files, [plan.recipe.id], prune=False)
        if stale:
            raise RecipegenError(Diagnostic(str(out_dir / plan.recipe.id), None, None, None,
                                            f"out/ is not current for this recipe ({stale[0].path}: {stale[0].kind}); "
                                            "run `recipegen build` first"))
    targets = tuple(Target(node.node, out_dir / plan.recipe.id / node.node.name / "compose.yaml", node)
                    for node in plan.nodes)
    return Deployment(plan.recipe.id, plan.cluster, out_dir, targets, plan)


def deployment_from_out(recipe_id: str, cluster: Cluster, out_dir: Path) -> Deployment:
    """The nodes a compiled recipe was written for, read from out/<id>/<node>/compose.yaml (rank from its labels)."""
    from generator.verify import read_yaml

    folder = out_dir / recipe_id
    files = sorted(folder.glob("*/compose.yaml")) if folder.is_dir() else []
    if not files:
        raise RecipegenError(Diagnostic(str(folder), None, None, None,
                                        "nothing compiled for this recipe here (run `recipegen build`)"))
    known = {node.name: node for node in cluster.nodes}
    ranked = []
    for file in files:
        name = file.parent.name
        if name not in known:
            raise RecipegenError(Diagnostic(str(file), None, None, None, f"node '{name}' is not in cluster "
                                                                         f"'{cluster.name}' ({cluster.path})"))
        try:
            labels = read_yaml(file.read_text("utf-8"))["services"]["engine"].get("labels", {})
            rank = int(labels.get(f"{LABEL_PREFIX}.rank", 0))
        except (ValueError, KeyError, TypeError, OSError) as exc:
            raise RecipegenError(Diagnostic(str(file), None, None, None, f"not a compose file recipegen "
                                                                         f"wrote: {exc}")) from None
        ranked.append((rank, Target(known[name], file)))
    return Deployment(recipe_id, cluster, out_dir, tuple(t for _, t in sorted(ranked, key=lambda r: r[0])))


def each(targets: tuple[Target, ...] | list[Target], fn: Callable[[Target], T],
         key: Callable[[Target], str] = lambda t: t.name) -> dict[str, T | BaseException]:
    """Run fn on every node at once; a node's exception is its result, never the others' problem.
    Results are keyed by `key(target)`, by default its `.name`."""
    def guarded(target: Target):
        try:
            return fn(target)
        except Exception as exc:  # noqa: BLE001 - reported per node by the caller
            return exc

    with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        results = list(pool.map(guarded, targets))
    return {key(t): r for t, r in zip(targets, results)}
