"""Swarm: `swarm setup` labels each node with its cluster name and checks its GPU resource; `up --swarm` deploys
out/<id>/stack.yaml through a manager's context; the same readiness wait, status and logs follow."""

from __future__ import annotations

from dataclasses import dataclass, field

from generator.deploy.docker import Docker, DockerError
from generator.deploy.operate import RankState
from generator.deploy.targets import Deployment, each
from generator.model import Cluster, Node
from generator.plan import LABEL_PREFIX

NODE_LABEL = "recipegen.node"
GPU_KIND = "NVIDIA_GPU"


@dataclass
class SwarmNode:
    node: str
    context: str
    node_id: str | None = None
    state: str = "unknown"  # docker info's LocalNodeState: active, inactive, pending ...
    manager: bool = False
    labelled: bool = False
    gpu: str | None = None
    problems: list[str] = field(default_factory=list)


def _info(node: Node) -> SwarmNode:
    row = SwarmNode(node.name, node.context)
    try:
        info = Docker(node.context).info()
    except DockerError as exc:
        row.problems.append(f"context '{node.context}' does not answer: {exc.detail}")
        return row
    swarm = info.get("Swarm") or {}
    row.node_id = swarm.get("NodeID") or None
    row.state = swarm.get("LocalNodeState", "inactive")
    row.manager = bool(swarm.get("ControlAvailable"))
    return row


def find_manager(cluster: Cluster, nodes: tuple[Node, ...] | None = None) -> tuple[Node, list[SwarmNode]]:
    rows = each(list(nodes or cluster.nodes), _info)
    infos = [r if isinstance(r, SwarmNode) else SwarmNode(n.name, n.context, problems=[str(r)])
             for n, r in zip(nodes or cluster.nodes, rows.values())]
    for node, row in zip(nodes or cluster.nodes, infos):
        if row.manager:
            return node, infos
    if all(row.problems for row in infos):  # nobody answered: say why, not "no manager"
        raise LookupError("; ".join(f"{row.node}: {row.problems[0]}" for row in infos))
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
        if row.problems:
            continue
        if row.state != "active":
            if not init:
                row.problems.append("not in the swarm: `recipegen swarm setup --init` joins it")
                continue
            token = token or boss.run("swarm", "join-token", "-q", "worker").strip()
            Docker(node.context).run("swarm", "join", "--token", token, "--advertise-addr", node.address,
                                     f"{manager.address}:2377", timeout=60)
            row.node_id = _info(node).node_id
            row.state = "active"
        try:
            spec = boss.json("node", "inspect", row.node_id)[0]
        except (DockerError, IndexError) as exc:
            row.problems.append(f"the manager does not know node id {row.node_id}: {exc}")
            continue
        labels = spec.get("Spec", {}).get("Labels") or {}
        if labels.get(NODE_LABEL) != node.name:
            boss.run("node", "update", "--label-add", f"{NODE_LABEL}={node.name}", row.node_id)
        row.labelled = True
        row.gpu = _gpu_resource(spec)
        if row.gpu is None:
            row.problems.append(
                f"advertises no {GPU_KIND} generic resource; add to /etc/docker/daemon.json on {node.name}: "
                f'"node-generic-resources": ["{GPU_KIND}=GPU-<uuid from nvidia-smi -L>"], and in '
                '/etc/nvidia-container-runtime/config.toml: swarm-resource = "DOCKER_RESOURCE_NVIDIA_GPU"; '
                "then restart dockerd")
    return rows


def _gpu_resource(spec: dict) -> str | None:
    resources = spec.get("Description", {}).get("Resources", {}).get("GenericResources") or []
    for res in resources:
        for kind in ("NamedResourceSpec", "DiscreteResourceSpec"):
            item = res.get(kind)
            if item and item.get("Kind") == GPU_KIND:
                return str(item.get("Value"))
    return None


def deploy(dep: Deployment, manager: Node) -> None:
    Docker(manager.context).run("stack", "deploy", "--detach=true", "-c", str(dep.stack_file), dep.project,
                                timeout=300)


def remove(dep: Deployment, manager: Node) -> None:
    Docker(manager.context).run("stack", "rm", dep.project, timeout=120)


def stack_states(dep: Deployment, manager: Node) -> list[RankState]:
    """One row per node-service of the stack, from the manager's view of its tasks."""
    boss = Docker(manager.context)
    rows = []
    for target in dep.targets:
        service = f"{dep.project}_{target.name}"
        try:
            tasks = boss.json_lines("service", "ps", service, "--no-trunc", "--format", "{{json .}}")
        except DockerError as exc:
            rows.append(RankState(target.name, manager.context, service, "missing", exc.detail))
            continue
        current = [t for t in tasks if t.get("DesiredState") == "Running"] or tasks[:1]
        if not current:
            rows.append(RankState(target.name, manager.context, service, "missing", "no task"))
            continue
        task = current[0]
        state = task.get("CurrentState", "").split(" ")[0].lower()
        failures = sum(1 for t in tasks
                       if t.get("Error") or t.get("CurrentState", "").startswith(("Failed", "Rejected")))
        shown = {"running": "running", "failed": "exited", "rejected": "exited", "complete": "exited"}.get(state, state)
        current_state = task.get("CurrentState", "")  # "Running 5 minutes ago"
        uptime = current_state.split(" ", 1)[1].removesuffix(" ago") if shown == "running" and " " in current_state \
            else "-"
        rows.append(RankState(target.name, manager.context, task.get("Name", service), shown,
                              task.get("Error") or current_state, failures, uptime=uptime))
    return rows


def other_stacks(dep: Deployment, manager: Node) -> dict[str, set[str]]:
    """Other recipes' stacks on this swarm and the nodes they claim: two recipes never share a node."""
    boss = Docker(manager.context)
    claims: dict[str, set[str]] = {}
    services = boss.json_lines("service", "ls", "--filter", f"label={LABEL_PREFIX}.recipe", "--format", "{{json .}}")
    if not services:
        return claims
    specs = boss.json("service", "inspect", *[s["ID"] for s in services])
    for spec in specs:
        labels = spec.get("Spec", {}).get("Labels") or {}
        recipe, node = labels.get(f"{LABEL_PREFIX}.recipe"), labels.get(f"{LABEL_PREFIX}.node")
        if recipe and recipe != dep.project and node:
            claims.setdefault(recipe, set()).add(node)
    return claims
