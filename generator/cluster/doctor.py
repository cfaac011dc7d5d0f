"""`recipegen doctor`: an existing cluster file against the live nodes, through their Docker contexts.

Per node (all at once, each bounded in time): the context answers; the node's fabric address is on the interface
its NCCL_SOCKET_IFNAME names, which exists and is up; the other fabric names exist; RDMA devices and the GID
index; the GPU runtime; the memlock ulimit; a kernel known to break the cluster; the memory free now (hosts.py). Across nodes: one subnet; every node reaches every other at its
fabric address (a listener container on one node, a connector container on the other: TCP, bounded).
Each finding carries its fix.
"""

from __future__ import annotations

import ipaddress

from typing import Callable

from generator.cluster.probe import NodeFacts, ProbeError, exclusion, gather, gid_index
from generator.cluster.probe.facts import Interface
from generator.cluster.hosts import host_findings
from generator.cluster.probe.proposal import FABRIC_VARS
from generator.cluster.reach import check_reach
from generator.deploy import findings as codes
from generator.deploy.docker import DockerError, reason
from generator.deploy.findings import Finding, Severity
from generator.deploy.requirements import compose_finding, compose_version, engine_finding
from generator.deploy.targets import each
from generator.render.versions import COMPOSE_UPGRADE, Needs, needs_of, shown
from generator.resolve.model import Cluster, Node

OK, WARNING, ERROR = Severity.OK, Severity.WARNING, Severity.ERROR


def effective_env(cluster: Cluster, node: Node) -> dict[str, str]:
    return cluster.node_env(node)


def _names(value: str) -> tuple[list[str], bool]:
    """The interface names of an NCCL-style list ("eth0,eth1", "=eth0", "^docker"): (names, exact);
    an exclusion list names none."""
    value = value.strip()
    if not value or value.startswith("^"):
        return [], False
    exact = value.startswith("=")
    return [v.strip() for v in value.lstrip("=").split(",") if v.strip()], exact


def _matches(spec: str, iface: str, exact: bool) -> bool:
    return iface == spec if exact else iface.startswith(spec)


def _listing(facts: NodeFacts) -> str:
    shown = []
    for i in facts.interfaces.values():
        if i.name == "lo":
            continue
        addr = ",".join(str(a) for a in i.ipv4)
        shown.append(f"{i.name}{'=' + addr if addr else ''}{'' if i.up else ' (down)'}")
    return ", ".join(shown) or "none"


def check_node(cluster: Cluster, node: Node, facts: NodeFacts) -> list[Finding]:
    """Everything about one node that its facts alone show."""
    out: list[Finding] = []
    env = effective_env(cluster, node)

    def add(check: str, level: Severity, msg: str, fix: str = "") -> None:
        out.append(Finding(node.name, level, check, msg, fix))

    holder = facts.holding(node.address)
    nccl = env.get("NCCL_SOCKET_IFNAME")
    where = "[nodes.env]" if "NCCL_SOCKET_IFNAME" in node.env else "[env]"
    if holder is None:
        add("address", ERROR, f"address {node.address} is on no interface of this node (it has: {_listing(facts)})",
            "set this node's `address` to its fabric address, or configure the address on the fabric port")
    elif exclusion(holder, facts.default_iface):
        add("address", WARNING, f"address {node.address} is on {holder.name}, which is "
                                f"{exclusion(holder, facts.default_iface)}: not the fabric",
            "use the address of the CX7 port (see `recipegen cluster probe`)")
    else:
        add("address", OK, f"{node.address} is on {holder.name}")
    if not nccl:
        add("NCCL_SOCKET_IFNAME", WARNING, "not set: NCCL may pick the management NIC",
            f"set NCCL_SOCKET_IFNAME = \"{holder.name if holder else '<fabric interface>'}\" in [env] or [nodes.env]")
    else:
        names, exact = _names(nccl)
        found = [i for i in facts.interfaces.values() if any(_matches(n, i.name, exact) for n in names)]
        missing = [n for n in names if not any(_matches(n, i.name, exact) for i in facts.interfaces.values())]
        if missing:
            fix_name = holder.name if holder else "<the fabric interface>"
            add("NCCL_SOCKET_IFNAME", ERROR, f"{where} NCCL_SOCKET_IFNAME = \"{nccl}\" names "
                                             f"{', '.join(missing)}, which this node does not have "
                                             f"(it has: {_listing(facts)})",
                f"set [nodes.env] NCCL_SOCKET_IFNAME = \"{fix_name}\" for {node.name} "
                f"(and {', '.join(FABRIC_VARS[1:])})")
        elif names and holder is not None and holder not in found:
            add("NCCL_SOCKET_IFNAME", ERROR, f"NCCL_SOCKET_IFNAME = \"{nccl}\" but the address {node.address} is on "
                                             f"{holder.name}: ranks would bind one interface and advertise another",
                f"set [nodes.env] NCCL_SOCKET_IFNAME = \"{holder.name}\", or the address of {nccl}")
        elif names:
            down = [i for i in found if not i.up]
            if down:
                add("NCCL_SOCKET_IFNAME", ERROR, f"{', '.join(f'{i.name} is {i.state}' for i in down)}",
                    f"bring it up on the node (`ip link set {down[0].name} up`; check the cable)")
            else:
                add("NCCL_SOCKET_IFNAME", OK, f"{nccl}: {', '.join(i.name for i in found)} up")
    for var in FABRIC_VARS[1:]:  # after NCCL_SOCKET_IFNAME, checked above
        value = env.get(var)
        if not value or value == "all":
            continue
        names = [n for n in _names(value)[0] if ":" not in n]  # UCX's dev:port names an RDMA device
        missing = [n for n in names if n not in facts.interfaces]  # exact names: only NCCL matches prefixes
        if missing:
            add(var, ERROR, f"{var} = \"{value}\" names {', '.join(missing)}, which this node does not have",
                f"set [nodes.env] {var} = \"{holder.name if holder else '<fabric interface>'}\" for {node.name}")
    _check_rdma(cluster, node, facts, env, holder, add)
    return out


def _check_rdma(cluster: Cluster, node: Node, facts: NodeFacts, env: dict[str, str], holder: Interface | None,
                add: Callable[..., None]) -> None:
    if not cluster.rdma:
        backed = facts.rdma_for(holder.name) if holder else []
        if backed and holder is not None:
            add("rdma", WARNING, f"rdma = false but {holder.name} is backed by {', '.join(backed)}: NCCL uses TCP",
                "set rdma = true (and NCCL_IB_DISABLE = \"0\") to use RoCE")
        return
    if not facts.rdma:
        add("rdma", ERROR, "rdma = true but this node has no RDMA device (/sys/class/infiniband is empty)",
            "install the ConnectX drivers (MLNX_OFED/DOCA), or set rdma = false")
        return
    hca = env.get("NCCL_IB_HCA")
    if hca:
        devs = [d.split(":")[0] for d in _names(hca)[0]]
        stale = [d for d in devs if not any(r.startswith(d) for r in facts.rdma)]
        if stale:
            add("NCCL_IB_HCA", ERROR, f"NCCL_IB_HCA names {', '.join(stale)}, not on this node "
                                      f"(it has {', '.join(sorted(facts.rdma))})",
                f"set [nodes.env] NCCL_IB_HCA = \"{','.join(facts.rdma_for(holder.name)) if holder else '...'}\"")
        else:
            add("NCCL_IB_HCA", OK, hca)
    index = env.get("NCCL_IB_GID_INDEX")
    if index and holder is not None:
        right = {i for d in facts.rdma_for(holder.name) if (i := gid_index(facts, d, node.address)) is not None}
        if right and (not index.isdigit() or int(index) not in right):
            add("NCCL_IB_GID_INDEX", ERROR, f"GID index {index} is stale: the RoCE v2 GID of {node.address} is at "
                                            f"{', '.join(map(str, sorted(right)))}",
                f"set [nodes.env] NCCL_IB_GID_INDEX = \"{min(right)}\"")


def check_subnets(cluster: Cluster, facts: dict[str, NodeFacts]) -> list[Finding]:
    """All fabric addresses on one subnet (the head's, with the prefix the head's interface has)."""
    nets: dict[str, ipaddress.IPv4Network] = {}
    for node in cluster.nodes:
        f = facts.get(node.name)
        holder = f.holding(node.address) if f else None
        if holder is not None:
            nets[node.name] = next(a.network for a in holder.ipv4 if str(a.ip) == node.address)
    if not nets:
        return []
    ref_name = next(n.name for n in cluster.nodes if n.name in nets)
    ref = nets[ref_name]
    out = []
    for node in cluster.nodes:
        if node.name == ref_name:
            continue
        if ipaddress.IPv4Address(node.address) not in ref or (node.name in nets and nets[node.name] != ref):
            mine = f" (its interface has {nets[node.name]})" if node.name in nets else ""
            out.append(Finding(node.name, ERROR, "subnet", f"address {node.address}{mine} is not on the subnet "
                                                           f"{ref} of {ref_name}",
                               f"give {node.name} an address on {ref} (on its fabric port) and set it as `address`"))
    if not out and len(cluster.nodes) > 1:
        out.append(Finding("*", OK, "subnet", f"all fabric addresses on {ref}"))
    return out


# --- the whole check ---------------------------------------------------------------------------------------


def gpu_finding(cluster: Cluster, node: Node, facts: NodeFacts) -> Finding | None:
    if cluster.gpu == "none":
        return None
    gpu = facts.gpu
    if gpu is None or gpu.runtime is None:
        flag = "--gpus all" if cluster.gpu == "nvidia" else "--device nvidia.com/gpu=all"
        fix = ("install the NVIDIA Container Toolkit and restart docker" if cluster.gpu == "nvidia"
               else "generate the CDI spec: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml")
        return Finding(node.name, ERROR, "gpu", f"a {flag} container does not start: "
                                                f"{gpu.detail if gpu else 'not tried'}", fix)
    shown = ", ".join(gpu.devices) or "container starts (no nvidia-smi in the image)"
    return Finding(node.name, OK, "gpu", f"{cluster.gpu}: {shown}")


def _compose_check(needs: Needs) -> Finding:
    """This machine's Compose against the strictest file for this cluster: an error when it is older (every file
    whose group restarts carries the group watch as an inline config), the reason when it cannot be read."""
    try:
        found = compose_version()
    except DockerError as exc:
        return Finding("*", WARNING, "compose", f"`docker compose` does not answer here: {exc.short}",
                       COMPOSE_UPGRADE)
    old = compose_finding(needs, found)
    if old is not None:
        return Finding("*", ERROR, "compose", old.message + " (every recipe whose group restarts does, the default; "
                                                            'only restart = "never" without setup, mods or Ray '
                                                            "deploys with it)")
    return Finding("*", OK, "compose", f"Docker Compose {shown(found) if found else '?'} here")


def doctor(cluster: Cluster, image: str | None = None, timeout: float = 60, reach: bool = True
           ) -> list[Finding]:
    memlock = cluster.ulimits.memlock
    strictest = needs_of(True, cluster.gpu)  # what a file for this cluster needs: the group watch is a config
    findings: list[Finding] = [_compose_check(strictest)]

    def look(node: Node) -> tuple[NodeFacts, list[Finding]]:
        f = gather(node.context, image=image, memlock=memlock, gpu=cluster.gpu if cluster.gpu != "none" else None,
                   timeout=timeout)
        found = [Finding(node.name, OK, "context",
                         f"'{node.context}' answers (engine {f.engine}, probe image {f.image})")]
        if f.memlock_ok is False:
            hard = {None: "unknown", -1: "unlimited"}.get(f.memlock_hard, f"{f.memlock_hard} bytes")
            found.append(Finding(node.name, ERROR, "memlock",
                                 f"a container with memlock={memlock} does not start (the hard limit is {hard})",
                                 "raise the limit on the node (LimitMEMLOCK=infinity in docker.service, then restart "
                                 f"docker) or lower [ulimits] memlock to {f.memlock_hard}"))
        else:
            found.append(Finding(node.name, OK, "memlock", f"memlock={memlock} can be set"))
        g = gpu_finding(cluster, node, f)
        if g:
            found.append(g)
        old = engine_finding(node.name, strictest, f.engine)
        if old:
            found.append(old)
        return f, found + host_findings(cluster, node, f) + check_node(cluster, node, f)

    results = each(list(cluster.nodes), look)
    facts: dict[str, NodeFacts] = {}
    for node in cluster.nodes:
        r = results[node.name]
        if isinstance(r, BaseException):
            code = r.code if isinstance(r, ProbeError) else codes.PROBE_FAILED
            fix = {codes.CONTEXT_UNREACHABLE: f"check `docker --context {node.context} info` (the context, ssh access "
                                              f"to {node.ssh_host}, the docker service); `recipegen contexts`",
                   codes.CONTEXT_MISSING: "recipegen contexts --create",
                   codes.PROBE_NO_IMAGE: "load a small image with sh on the node (e.g. busybox), or pass --image",
                   }.get(code, "")
            findings.append(Finding(node.name, ERROR, "context", reason(r), fix))
            continue
        facts[node.name] = r[0]
        findings += r[1]
    findings += check_subnets(cluster, facts)
    if reach:
        findings += check_reach(cluster, facts, timeout)
    return findings
