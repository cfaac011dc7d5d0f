"""Pure: every node's facts to a cluster proposal (the values, and notes on what could not be decided)."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Sequence

from generator.cluster.probe.facts import Interface, NodeFacts, gid_index

# Interfaces that never carry the fabric, by name prefix, with why.
EXCLUDED = (("lo", "loopback"), ("docker", "Docker's bridge"), ("br-", "a Docker network bridge"),
            ("veth", "a container's veth"), ("virbr", "a libvirt bridge"), ("wl", "wireless"),
            ("tailscale", "a VPN"), ("wg", "a VPN"), ("tun", "a VPN"), ("zt", "a VPN"), ("cni", "a container network"),
            ("flannel", "a container network"), ("cali", "a container network"), ("vxlan", "an overlay"))
FABRIC_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "UCX_NET_DEVICES")


@dataclass
class NodeProposal:
    name: str
    context: str
    address: str
    ssh_host: str | None = None
    user: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    comments: list[str] = field(default_factory=list)
    iface: str | None = None


@dataclass
class Proposal:
    name: str
    user: str
    gpu: str
    rdma: bool
    memlock: int
    nodes: list[NodeProposal]
    env: dict[str, str] = field(default_factory=dict)
    hf_cache: str | None = None
    comments: dict[str, list[str]] = field(default_factory=dict)  # section ("top", "gpu", "rdma", "memlock", "env")
    notes: list[str] = field(default_factory=list)  # what could not be decided, and why
    summary: list[str] = field(default_factory=list)  # the probe's findings, at the top of the file

    def comment(self, where: str, text: str) -> None:
        self.comments.setdefault(where, []).append(text)


def exclusion(iface: Interface, default_iface: str | None) -> str | None:
    """Why an interface cannot be the fabric, or None."""
    if iface.name == default_iface:
        return "holds the default route (management)"
    for prefix, why in EXCLUDED:
        if iface.name == prefix or (prefix != "lo" and iface.name.startswith(prefix)):
            return why
    if iface.wireless:
        return "wireless"
    if iface.bridge:
        return "a bridge"
    if iface.type == 772:
        return "loopback"
    return None


@dataclass(frozen=True)
class _Candidate:
    iface: str
    address: ipaddress.IPv4Interface
    rdma: bool
    up: bool


def candidates(facts: NodeFacts) -> list[_Candidate]:
    found = []
    for iface in facts.interfaces.values():
        if exclusion(iface, facts.default_iface):
            continue
        for addr in iface.ipv4:
            if addr.ip.is_loopback or addr.ip.is_link_local:
                continue
            found.append(_Candidate(iface.name, addr, bool(facts.rdma_for(iface.name)), iface.up))
    return found


_NODE_NAME = re.compile(r"[^a-z0-9_-]+")


def node_names(facts: list[NodeFacts]) -> list[str]:
    """Names for the cluster file from the hostnames (else the contexts), valid and unique."""
    names: list[str] = []
    for i, f in enumerate(facts, 1):
        base = _NODE_NAME.sub("-", (f.hostname or f.context).lower()).strip("-_") or f"node{i}"
        if not base[0].isalnum():
            base = f"n{base}"
        name, k = base, 2
        while name in names:
            name, k = f"{base}-{k}", k + 1
        names.append(name)
    return names


def _ssh_endpoint(endpoint: str) -> tuple[str | None, str | None]:
    """(user, host) of an ssh:// Docker endpoint."""
    if not endpoint.startswith("ssh://"):
        return None, None
    rest = endpoint[len("ssh://"):].split("/")[0]
    user, _, host = rest.rpartition("@")
    host = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return (user or None), (host or None)


def _management(facts: NodeFacts) -> ipaddress.IPv4Interface | None:
    iface = facts.interfaces.get(facts.default_iface or "")
    return iface.ipv4[0] if iface and iface.ipv4 else None


def propose(facts: list[NodeFacts], name: str = "cluster", user: str | None = None,
            hf_cache: str | None = None) -> Proposal:
    """From every node's facts (rank order: the first is the head) to a cluster proposal."""
    names = node_names(facts)
    per_node = [candidates(f) for f in facts]
    notes: list[str] = []
    # The fabric subnet: the one most nodes have an address on; then the most RDMA-backed, up, lowest.
    networks: dict[ipaddress.IPv4Network, list[int]] = {}
    for i, cands in enumerate(per_node):
        for c in cands:
            networks.setdefault(c.address.network, [])
            if i not in networks[c.address.network]:
                networks[c.address.network].append(i)

    def score(net: ipaddress.IPv4Network) -> tuple[int, int, int, int]:
        on = [c for cands in per_node for c in cands if c.address.network == net]
        return (len(networks[net]), sum(c.rdma for c in on), sum(c.up for c in on), -int(net.network_address))

    ranked = sorted(networks, key=score, reverse=True)
    fabric = ranked[0] if ranked else None
    if fabric is not None and len(ranked) > 1 and score(ranked[1])[:3] == score(fabric)[:3]:
        others = [str(n) for n in ranked[1:] if score(n)[:3] == score(fabric)[:3]]
        notes.append(f"the fabric could be {fabric} or {', '.join(others)} (equally good on every node): chose "
                     f"{fabric}; change the addresses and interface names if the other is the one cabled")
    nodes: list[NodeProposal] = []
    for i, (f, cands) in enumerate(zip(facts, per_node)):
        ep_user, ep_host = _ssh_endpoint(f.endpoint)
        mgmt = _management(f)
        node = NodeProposal(names[i], f.context, "", ssh_host=ep_host or (str(mgmt.ip) if mgmt else None))
        on = sorted((c for c in cands if fabric is not None and c.address.network == fabric),
                    key=lambda c: (not c.rdma, not c.up, c.iface))
        if on:
            chosen = on[0]
            node.address, node.iface = str(chosen.address.ip), chosen.iface
            if len(on) > 1:
                node.comments.append(f"also on {fabric}: {', '.join(c.iface for c in on[1:])}; chose {chosen.iface}")
            if not chosen.up:
                msg = f"{node.name}: fabric interface {chosen.iface} is {f.interfaces[chosen.iface].state}, not up"
                notes.append(msg)
                node.comments.append("UNDECIDED: " + msg.split(": ", 1)[1])
        else:
            fallback = (cands[0].address.ip if cands else (mgmt.ip if mgmt else ipaddress.IPv4Address("127.0.0.1")))
            node.address = str(fallback)
            node.iface = cands[0].iface if cands else None
            seen = ", ".join(f"{c.iface}={c.address}" for c in cands) or "none"
            why = (f"no address on the fabric subnet {fabric} (fabric candidates here: {seen})" if fabric is not None
                   else f"no fabric candidate (an up interface with an IPv4 address that is not lo, docker0, br-*, "
                        f"veth*, wireless or the management NIC {f.default_iface or '-'})")
            notes.append(f"{node.name}: {why}; wrote {fallback} for now")
            node.comments.append(f"UNDECIDED: {why}; {fallback} is a placeholder")
        if f.default_iface and mgmt:
            node.comments.insert(0, f"management: {f.default_iface} {mgmt} (default route); "
                                    f"fabric: {node.iface or '-'} {node.address}")
        nodes.append(node)
        node.user = ep_user
    # The user: the option, else the ssh endpoints' user when they agree.
    users = {n.user for n in nodes if n.user}
    cluster_user = user or (users.pop() if len(users) == 1 else "root")
    for n in nodes:
        if user or n.user == cluster_user:
            n.user = None
    proposal = Proposal(name=name, user=cluster_user, gpu="none", rdma=False, memlock=-1, nodes=nodes,
                        hf_cache=hf_cache, notes=notes)
    _fabric_env(proposal, facts)
    _gpu(proposal, facts)
    _memlock(proposal, facts)
    for f, n in zip(facts, nodes):
        for note in f.notes:
            n.comments.append(note)
    return proposal


def _agree(proposal: Proposal, key: str, values: Sequence[str | None]) -> None:
    """A variable in the cluster's [env] when all nodes agree, else per node in [nodes.env]."""
    present = [v for v in values if v is not None]
    if not present:
        return
    if len(set(present)) == 1 and len(present) == len(values):
        proposal.env[key] = present[0]
        return
    for node, value in zip(proposal.nodes, values):
        if value is not None:
            node.env[key] = value


def _fabric_env(p: Proposal, facts: list[NodeFacts]) -> None:
    ifaces = [n.iface for n in p.nodes]
    for key in FABRIC_VARS:
        _agree(p, key, ifaces)
    if len({i for i in ifaces if i}) > 1:
        p.comment("env", "interface names differ between nodes: each node's are in its [nodes.env]")
    backed = [bool(n.iface and f.rdma_for(n.iface)) for f, n in zip(facts, p.nodes)]
    any_rdma = [bool(f.rdma) for f in facts]
    if all(backed):
        p.rdma = True
        p.env["NCCL_IB_DISABLE"] = "0"
        hcas: list[str] = []
        gids: list[str | None] = []
        for f, n in zip(facts, p.nodes):
            fabric_nets = {a.network for a in f.interfaces[n.iface].ipv4} if n.iface else set()
            shared = _shared_networks(facts, p)
            devs = set(f.rdma_for(n.iface or ""))
            for iface in f.interfaces.values():
                if iface.up and any(a.network in shared or a.network in fabric_nets for a in iface.ipv4):
                    devs.update(f.rdma_for(iface.name))
            hcas.append(",".join(sorted(devs, key=lambda d: (d not in f.rdma_for(n.iface or ""), d))))
            idx = {i for d in f.rdma_for(n.iface or "") if (i := gid_index(f, d, n.address)) is not None}
            gids.append(str(idx.pop()) if len(idx) == 1 else None)
        _agree(p, "NCCL_IB_HCA", hcas)
        if all(g is not None for g in gids):
            _agree(p, "NCCL_IB_GID_INDEX", gids)
        else:
            missing = [n.name for n, g in zip(p.nodes, gids) if g is None]
            p.notes.append(f"NCCL_IB_GID_INDEX: no RoCE v2 GID of the fabric address found on {', '.join(missing)} "
                           "(NCCL picks one itself; check `show_gids`)")
            p.comment("env", "NCCL_IB_GID_INDEX left out: no RoCE v2 GID of the fabric address on "
                             + ", ".join(missing))
    else:
        p.env["NCCL_IB_DISABLE"] = "1"
        if any(any_rdma) or any(backed):
            has = [n.name for n, b in zip(p.nodes, backed) if b]
            lacks = [n.name for n, b in zip(p.nodes, backed) if not b]
            why = (f"RDMA devices back the fabric interface on {', '.join(has) or 'no node'} but not on "
                   f"{', '.join(lacks)}: rdma needs every node; NCCL will use TCP sockets")
            p.notes.append(f"rdma = false: {why}")
            p.comment("rdma", "UNDECIDED: " + why)
        else:
            p.comment("rdma", "no node has RDMA devices (/sys/class/infiniband is empty): NCCL uses TCP sockets")


def _shared_networks(facts: list[NodeFacts], p: Proposal) -> set[ipaddress.IPv4Network]:
    """Subnets every node has an up, non-management address on: ports worth listing in NCCL_IB_HCA."""
    sets = []
    for f in facts:
        sets.append({a.network for i in f.interfaces.values() if i.up and not exclusion(i, f.default_iface)
                     for a in i.ipv4})
    return set.intersection(*sets) if sets else set()


def _gpu(p: Proposal, facts: list[NodeFacts]) -> None:
    kinds = [f.gpu.runtime if f.gpu else None for f in facts]
    working = [k for k in kinds if k]
    if working and len(working) == len(kinds) and len(set(working)) == 1:
        p.gpu = working[0]
        devices = {n.name: f.gpu.devices for n, f in zip(p.nodes, facts) if f.gpu and f.gpu.devices}
        if devices:
            p.comment("gpu", "; ".join(f"{k}: {', '.join(v)}" for k, v in devices.items()))
        else:
            p.comment("gpu", f"`--gpus all` containers start on every node"
                             f"{' (nvidia-smi is not in the probe image)' if p.gpu == 'nvidia' else ''}")
        return
    if not working:
        p.gpu = "none"
        why = "no node gives containers a GPU (`--gpus all` / CDI trials failed)"
        if any(f.gpu for f in facts):
            p.notes.append(f"gpu = \"none\": {why}: install the NVIDIA Container Toolkit")
            p.comment("gpu", "UNDECIDED: " + why)
        return
    best = max(set(working), key=working.count)
    p.gpu = best
    lacking = [n.name for n, k in zip(p.nodes, kinds) if k != best]
    why = f"{', '.join(lacking)} cannot give containers the GPU the way the others do ({best})"
    p.notes.append(f"gpu = \"{best}\": {why}")
    p.comment("gpu", "UNDECIDED: " + why)


def _memlock(p: Proposal, facts: list[NodeFacts]) -> None:
    can = [f.memlock_ok is True or f.memlock_hard == -1 for f in facts]
    if all(can):
        p.memlock = -1
        p.comment("memlock", "unlimited: every node allows it (RDMA registers memory)")
        return
    limits = [f.memlock_hard for f, ok in zip(facts, can) if not ok]
    known = [x for x in limits if x is not None and x >= 0]
    stuck = [n.name for n, ok in zip(p.nodes, can) if not ok]
    if known:
        p.memlock = min(known)
        p.comment("memlock", f"the hard memlock limit of {', '.join(stuck)} is {p.memlock} bytes and cannot be raised "
                             f"to unlimited here; raise it on the node (LimitMEMLOCK=infinity for docker.service) "
                             f"and set -1")
    else:
        p.memlock = -1
        p.notes.append(f"memlock: could not read the hard limit of {', '.join(stuck)}; left unlimited")
        p.comment("memlock", "UNDECIDED: hard limit unknown on " + ", ".join(stuck))
