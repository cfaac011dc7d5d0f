"""`recipegen swarm setup`: each node in the swarm, labelled with its name (what a rank's placement constraint
matches) and advertising its GPU as a generic resource; and the manager every Swarm command goes through."""

from __future__ import annotations

from dataclasses import dataclass, field

from generator.deploy import findings as codes
from generator.deploy.contexts import context_finding
from generator.deploy.docker import Docker, DockerError, JSONObject
from generator.deploy.findings import Finding, Severity
from generator.deploy.names import GPU_RESOURCE_KIND, SWARM_NODE_LABEL
from generator.deploy.targets import each
from generator.resolve.model import Cluster, Node


@dataclass
class SwarmNode:
    node: str
    context: str
    node_id: str | None = None
    state: str = "unknown"  # docker info's LocalNodeState: active, inactive, pending ...
    manager: bool = False
    labelled: bool = False
    gpu: str | None = None
    findings: list[Finding] = field(default_factory=list)

    def add(self, code: str, message: str, fix: str = "") -> None:
        self.findings.append(Finding(self.node, Severity.ERROR, code, message, fix))


def _info(node: Node) -> SwarmNode:
    row = SwarmNode(node.name, node.context)
    try:
        info = Docker(node.context).info()
    except DockerError as exc:
        row.findings.append(context_finding(node.name, node.context, exc))
        return row
    swarm = info.get("Swarm")
    swarm = swarm if isinstance(swarm, dict) else {}
    row.node_id = swarm.get("NodeID") or None
    row.state = swarm.get("LocalNodeState", "inactive")
    row.manager = bool(swarm.get("ControlAvailable"))
    return row


def find_manager(cluster: Cluster, nodes: tuple[Node, ...] | None = None) -> tuple[Node, list[SwarmNode]]:
    rows = each(list(nodes or cluster.nodes), _info)
    infos = [r if isinstance(r, SwarmNode) else SwarmNode(n.name, n.context) for n, r in zip(nodes or cluster.nodes,
                                                                                             rows.values())]
    for info, result in zip(infos, rows.values()):
        if isinstance(result, Exception):
            info.add(codes.CONTEXT_UNREACHABLE, str(result))
    for node, row in zip(nodes or cluster.nodes, infos):
        if row.manager:
            return node, infos
    if all(row.findings for row in infos):  # nobody answered: say why, not "no manager"
        raise LookupError("; ".join(f"{row.node}: {row.findings[0].message}" for row in infos))
    raise LookupError("no node of the cluster is a Swarm manager: run `docker swarm init --advertise-addr "
                      f"{(nodes or cluster.nodes)[0].address}` on {(nodes or cluster.nodes)[0].name} and "
                      "`docker swarm join` on the others (or `recipegen swarm setup --init`)")


def setup(cluster: Cluster, init: bool = False) -> list[SwarmNode]:
    """Idempotent: label every node with its cluster name, report what is missing and how to fix it."""
    try:
        manager, rows = find_manager(cluster)
    except LookupError:
        if not init:
            raise
        manager = cluster.nodes[0]
        Docker(manager.context).run("swarm", "init", "--advertise-addr", manager.address, timeout=60)
        manager, rows = find_manager(cluster)
    boss = Docker(manager.context)
    token = None
    for node, row in zip(cluster.nodes, rows):
        if row.findings:
            continue
        if row.state != "active":
            if not init:
                row.add(codes.SWARM_NOT_JOINED, "not in the swarm: `recipegen swarm setup --init` joins it",
                        "recipegen swarm setup --init")
                continue
            token = token or boss.run("swarm", "join-token", "-q", "worker").strip()
            Docker(node.context).run("swarm", "join", "--token", token, "--advertise-addr", node.address,
                                     f"{manager.address}:2377", timeout=60)
            row.node_id = _info(node).node_id
            row.state = "active"
        try:
            spec = boss.inspect("node", row.node_id or "-")[0]
        except (DockerError, IndexError) as exc:
            row.add(codes.SWARM_NODE_UNKNOWN, f"the manager does not know node id {row.node_id}: {exc}")
            continue
        labels = _dict(_dict(spec.get("Spec")).get("Labels"))
        if labels.get(SWARM_NODE_LABEL) != node.name:
            boss.run("node", "update", "--label-add", f"{SWARM_NODE_LABEL}={node.name}", row.node_id or "-")
        row.labelled = True
        row.gpu = _gpu_resource(spec)
        if row.gpu is None:
            row.add(
                codes.SWARM_NO_GPU_RESOURCE,
                f"advertises no {GPU_RESOURCE_KIND} generic resource; add to /etc/docker/daemon.json on {node.name}: "
                f'"node-generic-resources": ["{GPU_RESOURCE_KIND}=GPU-<uuid from nvidia-smi -L>"], and in '
                '/etc/nvidia-container-runtime/config.toml: swarm-resource = "DOCKER_RESOURCE_NVIDIA_GPU"; '
                "then restart dockerd")
    return rows


def _dict(value: object) -> JSONObject:
    return value if isinstance(value, dict) else {}


def _gpu_resource(spec: JSONObject) -> str | None:
    resources = _dict(_dict(spec.get("Description")).get("Resources")).get("GenericResources")
    for res in resources if isinstance(resources, list) else []:
        for kind in ("NamedResourceSpec", "DiscreteResourceSpec"):
            item = _dict(_dict(res).get(kind))
            if item.get("Kind") == GPU_RESOURCE_KIND:
                return str(item.get("Value"))
    return None
