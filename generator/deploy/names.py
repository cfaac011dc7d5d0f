"""The names the deployer finds a recipe's pieces by, in one place. The compiler decides them (generator/plan/types.py
and the templates); these functions only spell them the way Docker shows them."""

from __future__ import annotations

from generator.plan.types import ENGINE_SERVICE, GPU_RESOURCE_KIND, LABEL_PREFIX, SWARM_NODE_LABEL

__all__ = ["ENGINE_SERVICE", "GPU_RESOURCE_KIND", "SWARM_NODE_LABEL", "RECIPE_LABEL", "NODE_LABEL", "RANK_LABEL",
           "NAME_LABEL", "LOCK_CONTAINER", "LOCK_IMAGE", "container_name", "stack_service", "preflight_project",
           "recipe_filter"]

RECIPE_LABEL = f"{LABEL_PREFIX}.recipe"  # on every container and Swarm service of a recipe
NODE_LABEL = f"{LABEL_PREFIX}.node"
RANK_LABEL = f"{LABEL_PREFIX}.rank"
NAME_LABEL = f"{LABEL_PREFIX}.name"  # the recipe's display name (`name`)
# A node's lock (generator/deploy/lock.py): a container never run, of an empty image no helper can run in.
LOCK_CONTAINER = "recipegen-lock"
LOCK_IMAGE = "recipegen-lock:1"


def container_name(project: str) -> str:
    """The rank's container on its node: Compose names it <project>-<service>-<replica>."""
    return f"{project}-{ENGINE_SERVICE}-1"


def stack_service(project: str, node: str) -> str:
    """The rank's Swarm service: the stack's namespace, then the service, named after its node."""
    return f"{project}_{node}"


def preflight_project(project: str) -> str:
    """The Compose project preflight's trial container runs in: never the recipe's own."""
    return f"{project}-preflight"


def recipe_filter(project: str) -> str:
    """`--filter label=...` for every container of the recipe, Compose or Swarm."""
    return f"{RECIPE_LABEL}={project}"
