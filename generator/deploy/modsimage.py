"""The image a recipe's mods travel in (plan: ModsImage), as a node has it: missing, built from the base image
the node has now, or built from an older one (the base tag moved since: `docker pull`, eugr's rebuilt
`vllm-node`). Compose builds it where it is missing but never rebuilds one that is there, so a stale one would run
the old base: preflight says so and `recipegen images` rebuilds it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from generator.deploy.targets import Target
from generator.plan.types import ModsImage


@dataclass(frozen=True)
class ModsImageState:
    built: bool  # the node has the mods' image
    stale: bool  # ... built from another base than the node's base image
    identity: str | None  # the base's content (its layers) the node runs or would build from; None: neither there

    @property
    def usable(self) -> bool:
        return self.built and not self.stale


def mods_image_state(target: Target, image: ModsImage, tag: str) -> ModsImageState:
    """Read from the node (DockerError when it cannot say)."""
    built = target.docker.image_layers(tag)
    base = target.docker.image_layers(image.base)
    base_part = image.base_part(built) if built is not None else None
    stale = built is not None and base is not None and base != base_part
    running = base if built is None or stale else base_part
    return ModsImageState(built is not None, stale, _identity(running))


def _identity(layers: tuple[str, ...] | None) -> str | None:
    if layers is None:
        return None
    return "layers:" + hashlib.sha256("\n".join(layers).encode("utf-8")).hexdigest()
