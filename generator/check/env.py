"""Lint rules over the recipe's environment: variables the compiler sets per rank, and `pass_env` names that also
have a value."""

from __future__ import annotations

from generator.check.registry import ERROR, Findings, rule
from generator.engines.ranks import OWNED_ENV
from generator.resolve.model import Cluster, Recipe


@rule("owned-env", ERROR, "an environment variable the compiler sets per rank")
def _owned_env(recipe: Recipe, cluster: Cluster | None) -> Findings:
    for name in OWNED_ENV:
        if name in recipe.env:
            yield recipe.env_origins[name], f"env.{name}", (f"'{name}' is set per rank by the compiler from the "
                                                             "cluster's node addresses")


@rule("pass-env", ERROR, "a pass_env name that also has a value in the recipe or the cluster",
      needs_cluster=True)
def _pass_env(recipe: Recipe, cluster: Cluster | None) -> Findings:
    valued = set(recipe.env) | set(OWNED_ENV)
    if cluster is not None:
        valued |= set(cluster.env) | {k for n in cluster.nodes for k in n.env}
    for name in recipe.pass_env:
        if name in valued:
            yield (recipe.origins["pass_env"], "pass_env",
                   f"'{name}' is passed from the deploying shell but also has a value here or in the cluster "
                   "(or is set by the compiler): keep one")
