"""The container paths recipegen itself writes into an engine container, beside its own mounts (the Hugging Face
cache, /dev/shm): the launcher, the mods' files, the launcher's mark that setup and mods ran, and vLLM's Ray
settings file. The plan writes them from here and the `mount-target` rule refuses a mount over them from here, so
the two cannot drift apart (tests/test_mount_target.py renders plans and checks every path their files write)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Mapping

from generator.resolve.model import LAUNCHER_PATH, MODS_DIR, Cluster, ContainerOptions, Recipe

# The launcher's mark that setup and mods ran in this container (a restarted container skips them).
PREPARED_MARKER = "/tmp/.recipegen-prepared"

# vLLM's Ray executor copies the driver's (head's) variables to every worker except the names this file lists
# (vllm/ray/ray_env.py: RAY_NON_CARRY_OVER_ENV_VARS, read from VLLM_CONFIG_ROOT).
NON_CARRY_OVER_FILE = "ray_non_carry_over_env_vars.json"

# Where a non-root user's vLLM finds the Ray settings file: not under /root, which such a user cannot enter in most
# images, and in /tmp, which it can write (a Swarm task's launcher writes the file itself, as that user).
USER_VLLM_CONFIG_ROOT = "/tmp/recipegen/vllm"


@dataclass(frozen=True)
class Written:
    path: str  # absolute, in the container
    what: str  # what recipegen puts there, for a message
    folder: bool = False  # a folder recipegen owns whole (nothing may be mounted inside it)
    above: bool = True  # a mount on a folder above it hides it too (False: nothing is written there yet)


def vllm_config_root(values: Mapping[str, str]) -> str:
    """Where vLLM reads its config files (vllm/envs.py: VLLM_CONFIG_ROOT, else $XDG_CONFIG_HOME/vllm, else
    ~/.config/vllm; engine images run as root)."""
    if values.get("VLLM_CONFIG_ROOT"):
        return values["VLLM_CONFIG_ROOT"].rstrip("/") or "/"
    return (values.get("XDG_CONFIG_HOME") or "/root/.config").rstrip("/") + "/vllm"


def writes_ray_settings(recipe: Recipe) -> bool:
    """Multi-node vLLM on Ray: each worker must keep its own per-node variables (the settings file says which)."""
    return recipe.engine == "vllm" and recipe.distributed_backend == "ray" and recipe.required_nodes > 1


def user_config_root(recipe: Recipe, given: set[str]) -> dict[str, str]:
    """VLLM_CONFIG_ROOT for a non-root user, unless the cluster or recipe sets where vLLM's config lives."""
    if writes_ray_settings(recipe) and not given & {"VLLM_CONFIG_ROOT", "XDG_CONFIG_HOME"}:
        return {"VLLM_CONFIG_ROOT": USER_VLLM_CONFIG_ROOT}
    return {}


def written_paths(recipe: Recipe, cluster: Cluster | None) -> list[Written]:
    """Every container path recipegen writes for this recipe, on any of its nodes (without a cluster: as the
    recipe alone decides them)."""
    found = [Written(posixpath.dirname(LAUNCHER_PATH), "recipegen's launcher folder", folder=True),
             Written(MODS_DIR, "where recipegen puts the mods", folder=True, above=bool(recipe.mods))]
    found += [Written(f"{MODS_DIR}/{m.name}/{f.path}", f"mod {m.source}'s file {f.path}")
              for m in recipe.mods for f in m.files]
    if recipe.setup or recipe.mods:
        found.append(Written(PREPARED_MARKER, "the launcher's mark that setup and mods ran"))
    if writes_ray_settings(recipe):
        envs = [dict(recipe.env)]
        if cluster is not None:
            envs = [{**cluster.node_env(node), **recipe.env} for node in cluster.nodes]
        user = recipe.container.get("container_user") or (cluster.container.container_user if cluster else None)
        given = {k for env in envs for k in env}
        for env in envs:
            if not ContainerOptions(container_user=str(user) if user else None).as_root:
                env = {**user_config_root(recipe, given), **env}
            found.append(Written(f"{vllm_config_root(env)}/{NON_CARRY_OVER_FILE}", "vLLM's Ray settings file"))
    return list(dict.fromkeys(found))
