"""Lint rules over the TCP ports a recipe's containers listen on. Every rank runs on the host network, so two
listeners given one port on a node cannot both bind: the second fails at boot (vLLM: "Address already in use"),
often minutes in, after the weights loaded. The ports in play on the head node: the engine's API port (`--port`,
else the engine's default), the Ray head's port (`ray_port`), the rendezvous port (`master_port`: vLLM's
`--master-port`, SGLang's `--dist-init-addr` port), the transfer helpers' port (`transfer_port`) and the group
watches' port (`group_port`).
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.check.registry import ERROR, Findings, rule
from generator.diagnostics import Diagnostic
from generator.engines.ranks import last_group, port_number
from generator.read.schemas import schema
from generator.read.tomldoc import TomlDocument
from generator.resolve.model import ENGINE_DEFAULT_PORT, Cluster, Origin, Recipe

CLUSTER_PORTS = {"master_port": "the ranks' rendezvous: vLLM's --master-port, SGLang's --dist-init-addr port",
                 "ray_port": "the Ray head's port",
                 "transfer_port": "where `recipegen models` / `images` helpers listen",
                 "group_port": "where the ranks' group watches meet (restart = \"group\")"}
RENDEZVOUS = {"vllm": "vLLM's --master-port rendezvous", "sglang": "SGLang's --dist-init-addr port"}


@dataclass(frozen=True)
class Listener:
    port: int
    key: str  # how the recipe or cluster names it
    what: str


def _api_port(recipe: Recipe) -> tuple[int, Origin, str] | None:
    """The engine's API port, where it was given (`--port`, else the engine's default, at `engine`)."""
    given = last_group(recipe, "--port")
    if given is None:
        return ENGINE_DEFAULT_PORT[recipe.engine], recipe.origins.get("engine", recipe.document.origin("recipe", ())), \
            "engine"
    port = port_number(given.values[0]) if given.values else None
    return (port, given.args[0].origin, "args") if port is not None else None  # flag-value judges the rest


def head_listeners(recipe: Recipe, cluster: Cluster) -> list[Listener]:
    """The cluster's ports the recipe's head node listens on besides its API port."""
    multi = recipe.required_nodes > 1
    found = [Listener(cluster.transfer_port, "transfer_port", CLUSTER_PORTS["transfer_port"])]
    if multi and recipe.engine == "vllm" and recipe.distributed_backend == "ray":
        found.append(Listener(cluster.ray_port, "ray_port", CLUSTER_PORTS["ray_port"]))
    elif multi:
        found.append(Listener(cluster.master_port, "master_port", RENDEZVOUS[recipe.engine]))
    if multi and recipe.container.get("restart", cluster.container.restart) == "group":
        found.append(Listener(cluster.group_port, "group_port", CLUSTER_PORTS["group_port"]))
    return found


@rule("port-collision", ERROR, "two listeners given one port on a node's host network (API, Ray head, rendezvous, "
                               "transfer, group watch)", needs_cluster=True)
def _port_collision(recipe: Recipe, cluster: Cluster | None) -> Findings:
    api = _api_port(recipe)
    if cluster is None or api is None:
        return
    port, origin, key = api
    for other in head_listeners(recipe, cluster):
        if other.port == port:
            named = f"--port {port}" if key == "args" else f"{recipe.engine}'s default API port {port}"
            yield (origin, key, f"{named} is also the cluster's {other.key} ({other.what}): on the head's host "
                                "network only one of them can bind, the other fails at boot; change one")


# A recipe's ranks bind the Ray head's port (a multi-node `ray` recipe) or the rendezvous port (`mp`, SGLang), never
# both, so one number for both is fine: eugr's launcher itself gives its MASTER_PORT to either (start_ray_head's
# --port, and the no-Ray --master-port). The transfer helpers can run beside either (`recipegen models` while a
# recipe serves), so the transfer port must differ from both.
NEVER_BOUND_TOGETHER = {frozenset({"master_port", "ray_port"})}


def cluster_port_findings(doc: TomlDocument) -> list[Diagnostic]:
    """A cluster giving one number to two ports that one node can bind at once: whichever recipe (or helper)
    comes second cannot start."""
    props = schema("cluster")["properties"]
    ports = {key: doc.data.get(key, props[key].get("default")) for key in CLUSTER_PORTS}
    found = []
    keys = list(CLUSTER_PORTS)
    for i, first in enumerate(keys):
        for second in keys[i + 1:]:
            if ports[first] != ports[second] or not isinstance(ports[first], int):
                continue
            if frozenset({first, second}) in NEVER_BOUND_TOGETHER:
                continue
            at = second if second in doc.data else first  # a key the file writes (both defaults never clash)
            other = first if at == second else second
            found.append(doc.diagnostic((at,), f"{at} {ports[at]} is also {other} ({CLUSTER_PORTS[other]}): "
                                               "on a node's host network only one of them can bind; give each its "
                                               "own port", rule="port-collision"))
    return found
