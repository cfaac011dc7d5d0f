"""The metrics stack's checks: its ports against each other, the cluster's own ports, the router's and the API
ports of the heads on the same node (every service of the stack uses the host network, as the engines do)."""

from __future__ import annotations

from generator.check.ports import CLUSTER_PORTS
from generator.diagnostics import Diagnostic
from generator.engines.ranks import serve_port
from generator.resolve.model import Cluster, NodeChoiceError, Recipe

# The stack's ports, and whether each binds on every node (exporters) or on the metrics node only.
PORTS = {"prometheus_port": False, "grafana_port": False, "blackbox_port": False, "node_exporter_port": True,
         "dcgm_port": True}


def metrics_findings(recipes: list[Recipe], cluster: Cluster) -> list[Diagnostic]:
    metrics = cluster.metrics
    if metrics is None:
        return []
    doc = cluster.document
    found: list[Diagnostic] = []
    used = {key: getattr(metrics, key) for key in PORTS if key != "dcgm_port" or metrics.dcgm}
    seen: dict[int, str] = {}
    for key, port in used.items():
        at = ("metrics", key) if key in doc.data["metrics"] else ("metrics",)
        others = [f"{seen[port]} of [metrics]"] if port in seen else []
        others += [k for k in CLUSTER_PORTS if getattr(cluster, k) == port]
        if cluster.router is not None and port == cluster.router.port and (
                PORTS[key] or metrics.node.name in {n.name for n in cluster.router.nodes}):
            others.append("the router's port")
        for recipe in recipes:
            try:
                head = cluster.nodes_for(recipe)[0]
            except NodeChoiceError:
                continue  # too-many-nodes says so
            if serve_port(recipe) == port and (PORTS[key] or head.name == metrics.node.name):
                others.append(f"the API port of '{recipe.id}' (its head on {head.name})")
        seen.setdefault(port, key)
        if others:
            found.append(doc.diagnostic(at, f"{key} {port} is also {', '.join(others)}: on the host network "
                                            "only one of them can bind", rule="port-collision"))
    return found
