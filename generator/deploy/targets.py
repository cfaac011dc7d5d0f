"""What the deployer acts on: each node of a compiled recipe, its context and its compose file in out/.

Two kinds, so the types say what is there: a `Deployment` read back from out/ alone (down, ps, logs: a recipe that
no longer compiles can still be watched and stopped) and a `CompiledDeployment`, compiled now and checked against
out/ (up, images), which always has its plan. Nothing here re-derives a rank, an address or a flag.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from generator.deploy.docker import Docker
from generator.deploy.names import ENGINE_SERVICE, NAME_LABEL, RANK_LABEL, recipe_filter
from generator.diagnostics import Diagnostic, RecipegenError
from generator.plan.types import NodePlan, RecipePlan
from generator.resolve.model import Cluster, Node

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741 - an item of a fan-out


@dataclass(frozen=True)
class OnNode:
    """Something recipegen does on one node: its name, and the Docker client of its context."""

    node: Node

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def docker(self) -> Docker:
        return Docker(self.node.context)


@dataclass(frozen=True)
class Target(OnNode):
    """One node of a deployed recipe."""

    compose_file: Path


@dataclass(frozen=True)
class Deployment:
    project: str  # the recipe id: Compose project and Swarm stack name
    cluster: Cluster
    out_dir: Path
    targets: tuple[Target, ...]  # head (rank 0) first

    @property
    def head(self) -> Target:
        return self.targets[0]

    @property
    def label(self) -> str:
        """The label filter that finds every container of the recipe, whichever backend started it."""
        return recipe_filter(self.project)

    @property
    def stack_file(self) -> Path:
        return self.out_dir / self.project / "stack.yaml"

    def only(self, nodes: set[str]) -> tuple[Target, ...]:
        return tuple(t for t in self.targets if t.name in nodes)


@dataclass(frozen=True)
class CompiledDeployment(Deployment):
    """A deployment whose plan was compiled for this command: `up` and `images` need the image, the models,
    the port the head serves on."""

    plan: RecipePlan

    def node_plan(self, target: Target) -> NodePlan:
        return next(n for n in self.plan.nodes if n.node.name == target.name)

    @property
    def url(self) -> str:
        """Where the head serves, as seen from here: https when the engine was given a certificate."""
        health = self.node_plan(self.head).health
        scheme = "https" if health is not None and health.tls else "http"
        return f"{scheme}://{self.head.node.ssh_host}:{self.plan.serve_port}"


def deployment(plan: RecipePlan, files: dict[str, str], out_dir: Path) -> CompiledDeployment:
    """The deployer runs the committed files; they must be what the recipe compiles to now."""
    from generator.write.compare import differences

    stale = differences(out_dir, files, [plan.recipe.id], prune=False)
    if stale:
        raise RecipegenError(Diagnostic(str(out_dir / plan.recipe.id), None, None, None,
                                        f"out/ is not current for this recipe ({stale[0].path}: {stale[0].kind}); "
                                        "run `recipegen build` first"))
    targets = tuple(Target(node.node, out_dir / plan.recipe.id / node.node.name / "compose.yaml")
                    for node in plan.nodes)
    return CompiledDeployment(plan.recipe.id, plan.cluster, out_dir, targets, plan)


def deployment_from_out(recipe_id: str, cluster: Cluster, out_dir: Path) -> Deployment:
    """The nodes a compiled recipe was written for, read from out/<id>/<node>/compose.yaml (rank from its labels)."""
    from generator.write.verify import read_yaml

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
            compose: Any = read_yaml(file.read_text("utf-8"))
            labels = compose["services"][ENGINE_SERVICE].get("labels", {})
            rank = int(labels.get(RANK_LABEL, 0))
        except (ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
            raise RecipegenError(Diagnostic(str(file), None, None, None, f"not a compose file recipegen "
                                                                         f"wrote: {exc}")) from None
        ranked.append((rank, Target(known[name], file)))
    return Deployment(recipe_id, cluster, out_dir, tuple(t for _, t in sorted(ranked, key=lambda r: r[0])))


def display_name(dep: Deployment) -> str | None:
    """The recipe's `name` as its head's compose file in out/ labels it; None when the file has none."""
    from generator.write.verify import read_yaml

    try:
        compose: Any = read_yaml(dep.head.compose_file.read_text("utf-8"))
        name = compose["services"][ENGINE_SERVICE]["labels"][NAME_LABEL]
    except (ValueError, KeyError, TypeError, OSError):
        return None
    return name if isinstance(name, str) else None


def each(items: Sequence[I], fn: Callable[[I], T], key: Callable[[I], str] | None = None
         ) -> dict[str, T | Exception]:
    """Run fn on every item (node) at once; an item's exception is its result, never the others' problem.
    Results are keyed by `key(item)`, by default its `.name`, in the items' order."""
    def guarded(item: I) -> T | Exception:
        try:
            return fn(item)
        except Exception as exc:  # noqa: BLE001 - reported per node by the caller
            return exc

    name: Callable[[I], str] = key or (lambda item: str(getattr(item, "name")))
    with ThreadPoolExecutor(max_workers=max(1, len(items))) as pool:
        results = list(pool.map(guarded, items))
    return {name(item): r for item, r in zip(items, results)}
