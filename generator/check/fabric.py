"""Lint rules over the fabric: the variables that put ranks on an interface (NCCL, UCX, Gloo ...) belong to the
cluster, where they are set per node."""

from __future__ import annotations

import re

from generator.check.registry import WARNING, Findings, rule
from generator.resolve.model import Cluster, Recipe


FABRIC_ENV = re.compile(r"^(NCCL_|UCX_|GLOO_|TP_SOCKET_|OMPI_MCA_btl_tcp_if|NVSHMEM_)")


@rule("fabric-env", WARNING, "a recipe env var overriding the cluster's fabric variables",
      needs_cluster=True)
def _fabric_env(recipe: Recipe, cluster: Cluster | None) -> Findings:
    if cluster is None:
        return
    fabric = set(cluster.env) | {k for n in cluster.nodes for k in n.env}
    for name, value in recipe.env.items():
        same = all(cluster.node_env(n).get(name) == value for n in cluster.nodes)
        if FABRIC_ENV.match(name) and name in fabric and not same:  # restating the cluster's value is harmless
            yield (recipe.env_origins[name], f"env.{name}",
                   f"overrides the cluster's {name}: fabric variables belong to the cluster (per node where names "
                   "differ), or ranks end up on the wrong interface")
