"""The plan's environment: each rank's variables, layered (cluster, node, recipe, compiler) with the origin of
each value, the names passed through from the deploying shell, and vLLM's Ray settings file."""

from __future__ import annotations

import json
from typing import Callable

from generator.engines.ranks import OWNED_ENV, rank_env
from generator.engines.written import NON_CARRY_OVER_FILE, user_config_root, vllm_config_root, writes_ray_settings
from generator.plan.types import EnvVar
from generator.resolve.model import COMPILER, HF_CACHE_IN_CONTAINER, Cluster, ContainerOptions, Node, Origin, Recipe

def environment(recipe: Recipe, cluster: Cluster, chosen: tuple[Node, ...], rank: int,
                 container: ContainerOptions) -> tuple[EnvVar, ...]:
    """Cluster env, then the node's, then the recipe's, then what the compiler owns: later layers win."""
    doc, node = cluster.document, chosen[rank]
    layers: list[tuple[dict[str, str], Callable[[str], Origin]]] = [
        (_user_env(recipe, cluster, container), lambda k: COMPILER),  # defaults: any layer may set its own
        (cluster.env, lambda k: doc.origin("cluster", ("env", k))),
        (node.env, lambda k: doc.origin(f"node {node.name}", ("nodes", node.index, "env", k))),
        (recipe.env, lambda k: recipe.env_origins[k]),
        (rank_env(recipe, cluster, chosen, rank), lambda k: COMPILER),
    ]
    merged: dict[str, EnvVar] = {}
    for layer, (values, origin_of) in enumerate(layers):
        for name, value in values.items():
            if name in OWNED_ENV and layer < 4:
                continue  # the compiler's per-rank value or none: lint says so where it was written
            previous = merged.get(name)
            overridden = (*previous.overrides, previous.origin) if previous else ()
            merged[name] = EnvVar(name, value, origin_of(name), overridden)
    return tuple(merged.values())


def _user_env(recipe: Recipe, cluster: Cluster, container: ContainerOptions) -> dict[str, str]:
    """For a non-root `container_user`, the paths that default to root's home: the Hugging Face cache (mounted at
    /root/.cache/huggingface, where deploy and `recipegen models` expect it, but found through $HOME, which is
    another user's, or `/` for a bare uid) and vLLM's config root. Unless the cluster or recipe sets them."""
    if container.as_root:
        return {}
    given = {*cluster.env, *recipe.env, *(k for n in cluster.nodes for k in n.env)}
    env = {"HF_HOME": HF_CACHE_IN_CONTAINER, **user_config_root(recipe, given)}
    if given & {"HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"}:
        del env["HF_HOME"]
    return env


def pass_env(recipe: Recipe, cluster: Cluster, env: tuple[EnvVar, ...]) -> tuple[str, ...]:
    """Names passed through from the deploying shell; one that also has a value here keeps the value (lint
    reports the clash)."""
    valued = {var.name for var in env}
    return tuple(dict.fromkeys(n for n in (*cluster.pass_env, *recipe.pass_env) if n not in valued))


def ray_settings(recipe: Recipe, envs: list[tuple[EnvVar, ...]],
                  env: tuple[EnvVar, ...]) -> list[tuple[str, str, bool, str]]:
    """vLLM's Ray executor copies the head's vLLM variables to every worker: name the ones whose value is the
    node's own (they differ between nodes, or the compiler sets them per rank) so each worker keeps its own."""
    if not (writes_ray_settings(recipe) and len(envs) > 1):
        return []
    values = [{v.name: v.value for v in rank_env} for rank_env in envs]
    per_node = {n for n in set().union(*values) if len({v.get(n) for v in values}) > 1}
    text = json.dumps(sorted(per_node), indent=2) + "\n"
    root = vllm_config_root({var.name: var.value for var in env})
    return [(f"{root}/{NON_CARRY_OVER_FILE}", text, False,
             "vLLM's Ray executor: variables each worker keeps its own value of")]
