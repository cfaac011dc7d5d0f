"""`recipegen cluster probe`: look at the nodes through their Docker contexts and propose a cluster file.

Three layers, each testable alone:

- reading (`gather`): on each node a short-lived host-network container runs `SCRIPT` (only `sh`, `cat` and `ls`:
  real engine images may lack iproute2), whose output is a bundle of sections (`@@recipegen:<name>@@`); plus
  `docker info` and a `--gpus all` trial for the GPU. No SSH: the Docker context is the only way in.
- parsing (`parse_*`, `facts_from_sections`): pure functions from recorded text to `NodeFacts`.
- proposing (`propose`): a pure function from every node's facts to a `Proposal` (the cluster's values and the
  notes on what it could not decide), rendered by templates/cluster.toml.j2 (`render_cluster`).
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from generator.deploy.docker import Docker, DockerError

LABEL = "recipegen.probe=1"
SECTION = re.compile(r"^@@recipegen:([a-z_]+)@@$", re.M)
# Interfaces that never carry the fabric, by name prefix, with why.
EXCLUDED = (("lo", "loopback"), ("docker", "Docker's bridge"), ("br-", "a Docker network bridge"),
            ("veth", "a container's veth"), ("virbr", "a libvirt bridge"), ("wl", "wireless"),
            ("tailscale", "a VPN"), ("wg", "a VPN"), ("tun", "a VPN"), ("zt", "a VPN"), ("cni", "a container network"),
            ("flannel", "a container network"), ("cali", "a container network"), ("vxlan", "an overlay"))
FABRIC_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "UCX_NET_DEVICES")
DEFAULT_STACK = 67108864

# What the probe container runs: only sh builtins, cat and ls. Each section starts with a marker line.
SCRIPT = r"""
s() { echo "@@recipegen:$1@@"; }
s hostname; cat /proc/sys/kernel/hostname
s net
for d in /sys/class/net/*; do for a in operstate address mtu carrier type; do
  printf '%s:' "$d/$a"; cat "$d/$a" 2>/dev/null || echo; done; done
s net_kinds
ls -d /sys/class/net/*/device /sys/class/net/*/wireless /sys/class/net/*/phy80211 /sys/class/net/*/bridge \
  /sys/class/net/*/brport 2>/dev/null
s route; cat /proc/net/route
s fib_trie; cat /proc/net/fib_trie
s ip_addr; ip -o -4 addr 2>/dev/null
s infiniband
for d in /sys/class/infiniband/*/device/net; do [ -d "$d" ] && { echo "$d:"; ls "$d"; echo; }; done
s gids
for f in /sys/class/infiniband/*/ports/*/gids/[0-9] /sys/class/infiniband/*/ports/*/gids/1[0-5] \
  /sys/class/infiniband/*/ports/*/gid_attrs/types/[0-9] /sys/class/infiniband/*/ports/*/gid_attrs/types/1[0-5]; do
  [ -e "$f" ] && { printf '%s:' "$f"; cat "$f" 2>/dev/null || echo; }; done
s limits; cat /proc/self/limits
s end
"""
GPU_SCRIPT = ('nvidia-smi -L 2>&1 || echo "nvidia-smi: not available in this image"; '
              'echo "NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-}"')


# --- facts -------------------------------------------------------------------------------------------------


@dataclass
class Interface:
    name: str
    state: str = "unknown"  # operstate: up, down, lowerlayerdown, unknown ...
    mac: str = ""
    mtu: int | None = None
    carrier: str = ""
    type: int | None = None
    ipv4: list[ipaddress.IPv4Interface] = field(default_factory=list)
    physical: bool = False  # has a device (a NIC), not a virtual interface
    wireless: bool = False
    bridge: bool = False
    bridge_port: bool = False

    @property
    def up(self) -> bool:
        # lo, dummies and some tunnels report "unknown" while they pass traffic.
        return self.state == "up" or (self.state == "unknown" and self.carrier == "1")


@dataclass
class Gid:
    index: int
    gid: str
    type: str

    @property
    def ipv4(self) -> ipaddress.IPv4Address | None:
        try:
            mapped = ipaddress.IPv6Address(self.gid).ipv4_mapped
        except ValueError:
            return None
        return mapped


@dataclass
class RdmaDevice:
    name: str
    netdevs: list[str]
    gids: dict[int, list[Gid]] = field(default_factory=dict)  # port -> table


@dataclass
class GpuInfo:
    runtime: str | None  # "nvidia" (device request works), "cdi", or None
    devices: list[str] = field(default_factory=list)  # nvidia-smi -L lines
    runtimes: list[str] = field(default_factory=list)  # docker info Runtimes
    cdi_dirs: list[str] = field(default_factory=list)
    detail: str = ""  # why there is none, or what the trial said


@dataclass
class NodeFacts:
    context: str
    hostname: str = ""
    interfaces: dict[str, Interface] = field(default_factory=dict)
    default_iface: str | None = None
    rdma: dict[str, RdmaDevice] = field(default_factory=dict)
    gpu: GpuInfo | None = None
    memlock_hard: int | None = None  # bytes; -1 unlimited
    memlock_ok: bool | None = None  # a container with the trial memlock (-1 when probing) started; None: not tried
    engine: str = ""  # docker server version
    endpoint: str = ""  # the context's docker endpoint
    image: str = ""  # the image the probe ran
    notes: list[str] = field(default_factory=list)

    def rdma_for(self, netdev: str) -> list[str]:
        return sorted(d.name for d in self.rdma.values() if netdev in d.netdevs)

    def holding(self, address: str) -> Interface | None:
        ip = ipaddress.IPv4Address(address)
        return next((i for i in self.interfaces.values() if any(a.ip == ip for a in i.ipv4)), None)


# --- parsing (pure) ----------------------------------------------------------------------------------------


def parse_sections(text: str) -> dict[str, str]:
    """The probe bundle into {section: raw text} (the text between a marker and the next)."""
    marks = list(SECTION.finditer(text))
    out = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        out[m.group(1)] = text[m.end():end].strip("\n") + "\n"
    return out


def parse_attr_lines(text: str) -> dict[str, dict[str, str]]:
    """`/sys/class/<cls>/<name>/<...attr>:value` lines (what `grep -H . files` prints) into {name: {attr: value}}."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        path, sep, value = line.partition(":")
        parts = path.split("/")
        if not sep or len(parts) < 6 or parts[1] != "sys":
            continue
        out.setdefault(parts[4], {})["/".join(parts[5:])] = value.strip()
    return out


def parse_net_kinds(text: str) -> dict[str, set[str]]:
    """`ls -d /sys/class/net/*/{device,wireless,bridge,...}` into {name: {"device", "wireless", ...}}."""
    out: dict[str, set[str]] = {}
    for line in text.split():
        parts = line.strip().split("/")
        if len(parts) == 6 and parts[1:4] == ["sys", "class", "net"]:
            out.setdefault(parts[4], set()).add(parts[5])
    return out


def _hex_ip(value: str) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(int(value, 16).to_bytes(4, "little"))


@dataclass(frozen=True)
class Route:
    iface: str
    destination: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address | None
    metric: int

    @property
    def default(self) -> bool:
        return self.destination.prefixlen == 0


def parse_route(text: str) -> list[Route]:
    """/proc/net/route: Iface Destination Gateway Flags RefCnt Use Metric Mask MTU Window IRTT (hex, little endian)."""
    routes = []
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 8:
            continue
        try:
            flags = int(f[3], 16)
            if not flags & 0x1:  # RTF_UP
                continue
            dest, mask = _hex_ip(f[1]), _hex_ip(f[7])
            net = ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)
            gw = _hex_ip(f[2]) if flags & 0x2 else None  # RTF_GATEWAY
            routes.append(Route(f[0], net, gw, int(f[6])))
        except ValueError:
            continue
    return routes


def parse_fib_trie(text: str) -> list[ipaddress.IPv4Address]:
    """The local addresses in /proc/net/fib_trie: a leaf `|-- A.B.C.D` followed by `/32 host LOCAL`."""
    found: dict[ipaddress.IPv4Address, None] = {}
    leaf: ipaddress.IPv4Address | None = None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("|-- "):
            try:
                leaf = ipaddress.IPv4Address(s[4:].strip())
            except ValueError:
                leaf = None
        elif leaf is not None and s.startswith("/32") and s.split()[-1] == "LOCAL":
            found[leaf] = None
        elif s.startswith("+--") or s.endswith(":"):
            leaf = None
    return list(found)


def addresses_from_route(routes: list[Route], local: list[ipaddress.IPv4Address]
                         ) -> tuple[dict[str, list[ipaddress.IPv4Interface]], list[str]]:
    """Each local address's interface and prefix, from the most specific link route (no gateway) holding it.
    Addresses whose subnet is linked on several interfaces are given to them in order (noted)."""
    out: dict[str, list[ipaddress.IPv4Interface]] = {}
    notes = []
    links = [r for r in routes if r.gateway is None and not r.default]
    taken: set[tuple[str, ipaddress.IPv4Network]] = set()
    for ip in sorted(local):
        if ip.is_loopback:
            continue
        holders = [r for r in links if ip in r.destination]
        if not holders:
            notes.append(f"local address {ip} has no link route: its interface is unknown")
            continue
        best = max(r.destination.prefixlen for r in holders)
        holders = [r for r in holders if r.destination.prefixlen == best]
        names = list(dict.fromkeys(r.iface for r in holders))
        free = [n for n in names if (n, holders[0].destination) not in taken] or names
        if len(names) > 1:
            notes.append(f"{ip} is on a subnet linked on {', '.join(names)}: guessed {free[0]} (no `ip` in the image)")
        taken.add((free[0], holders[0].destination))
        out.setdefault(free[0], []).append(ipaddress.IPv4Interface(f"{ip}/{best}"))
    return out, notes


_IP_ADDR = re.compile(r"^\d+:\s+(\S+)\s+inet\s+(\d+\.\d+\.\d+\.\d+(?:/\d+)?)")


def parse_ip_addr(text: str) -> dict[str, list[ipaddress.IPv4Interface]]:
    """`ip -o -4 addr` (iproute2 or busybox) into {interface: [address/prefix]}."""
    out: dict[str, list[ipaddress.IPv4Interface]] = {}
    for line in text.splitlines():
        m = _IP_ADDR.match(line.strip())
        if m:
            name = m.group(1).split("@")[0]
            out.setdefault(name, []).append(ipaddress.IPv4Interface(m.group(2)))
    return out


def parse_infiniband(text: str) -> dict[str, list[str]]:
    """`ls /sys/class/infiniband/*/device/net` (blocks `<dir>:` then names) into {rdma device: [netdevs]}."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        s = line.strip()
        if s.endswith(":") and s.startswith("/sys/class/infiniband/"):
            current = s.split("/")[4]
            out[current] = []
        elif s and current is not None:
            out[current].extend(s.split())
    return out


def parse_gids(text: str) -> dict[str, dict[int, list[Gid]]]:
    """`<...>/<dev>/ports/<p>/gids/<i>:<gid>` and `.../gid_attrs/types/<i>:<type>` lines into tables of the
    entries in use (a zero GID, or no type, is an empty slot)."""
    raw = parse_attr_lines(text.replace("/sys/class/infiniband/", "/sys/class/net/"))
    out: dict[str, dict[int, list[Gid]]] = {}
    for dev, attrs in raw.items():
        ports: dict[int, dict[int, list[str]]] = {}
        for attr, value in attrs.items():
            parts = attr.split("/")  # ports, P, gids, I  |  ports, P, gid_attrs, types, I
            try:
                port, index = int(parts[1]), int(parts[-1])
            except (ValueError, IndexError):
                continue
            slot = ports.setdefault(port, {}).setdefault(index, ["", ""])
            slot[0 if parts[2] == "gids" else 1] = value
        for port, slots in ports.items():
            table = [Gid(i, g, t) for i, (g, t) in sorted(slots.items())
                     if t and g and g.replace(":", "").strip("0")]
            out.setdefault(dev, {})[port] = table
    return out


def parse_memlock(text: str) -> int | None:
    """The hard `Max locked memory` of /proc/self/limits: bytes, -1 for unlimited."""
    for line in text.splitlines():
        if line.startswith("Max locked memory"):
            fields = line[len("Max locked memory"):].split()
            if len(fields) >= 2:
                return -1 if fields[1] == "unlimited" else int(fields[1])
    return None


def parse_nvidia_smi(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if re.match(r"^GPU \d+:", line.strip())]


def facts_from_sections(sections: dict[str, str], context: str = "", info: dict | None = None,
                        gpu: GpuInfo | None = None) -> NodeFacts:
    facts = NodeFacts(context=context, gpu=gpu)
    facts.hostname = sections.get("hostname", "").strip() or (info or {}).get("Name", "")
    kinds = parse_net_kinds(sections.get("net_kinds", ""))
    for name, attrs in parse_attr_lines(sections.get("net", "")).items():
        k = kinds.get(name, set())
        mtu = attrs.get("mtu", "")
        typ = attrs.get("type", "")
        facts.interfaces[name] = Interface(
            name=name, state=attrs.get("operstate", "unknown") or "unknown", mac=attrs.get("address", ""),
            mtu=int(mtu) if mtu.isdigit() else None, carrier=attrs.get("carrier", ""),
            type=int(typ) if typ.isdigit() else None, physical="device" in k,
            wireless=bool({"wireless", "phy80211"} & k), bridge="bridge" in k, bridge_port="brport" in k)
    routes = parse_route(sections.get("route", ""))
    by_ip = parse_ip_addr(sections.get("ip_addr", ""))
    if not by_ip:
        by_ip, notes = addresses_from_route(routes, parse_fib_trie(sections.get("fib_trie", "")))
        facts.notes += notes
    for name, addrs in by_ip.items():
        facts.interfaces.setdefault(name, Interface(name)).ipv4 = addrs
    defaults = sorted((r for r in routes if r.default), key=lambda r: r.metric)
    facts.default_iface = defaults[0].iface if defaults else None
    gids = parse_gids(sections.get("gids", ""))
    for dev, netdevs in parse_infiniband(sections.get("infiniband", "")).items():
        facts.rdma[dev] = RdmaDevice(dev, netdevs, gids.get(dev, {}))
    facts.memlock_hard = parse_memlock(sections.get("limits", ""))
    if info:
        facts.engine = str(info.get("ServerVersion", ""))
    return facts


def gid_index(facts: NodeFacts, device: str, address: str) -> int | None:
    """The RoCE v2 GID index of `address` on an RDMA device (what NCCL_IB_GID_INDEX must name)."""
    dev = facts.rdma.get(device)
    if dev is None:
        return None
    ip = ipaddress.IPv4Address(address)
    for table in dev.gids.values():
        for gid in table:
            if gid.type.strip().lower() == "roce v2" and gid.ipv4 == ip:
                return gid.index
    return None


# --- reading the nodes (docker) ----------------------------------------------------------------------------


class ProbeError(Exception):
    """A node could not be probed; the message says why, in one line."""


_SIZE = re.compile(r"^([\d.]+)\s*([kMGT]?B)$", re.I)
_UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}


def _size(text: str) -> float:
    m = _SIZE.match(text.strip())
    return float(m.group(1)) * _UNITS[m.group(2).lower()] if m else float("inf")


def image_candidates(rows: list[dict]) -> list[str]:
    """Images of `docker image ls` worth running the probe in: tagged ones, smallest first."""
    found = []
    for row in rows:
        repo, tag = row.get("Repository", "<none>"), row.get("Tag", "<none>")
        if repo == "<none>" or tag == "<none>" or "hello-world" in repo:
            continue
        found.append((_size(row.get("Size", "")), f"{repo}:{tag}"))
    return [name for _, name in sorted(found)]


class Deadline:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds
        self.seconds = seconds

    def left(self, cap: float) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise ProbeError(f"no answer within {self.seconds:.0f}s")
        return min(cap, left)


def _short(exc: DockerError) -> str:
    return " ".join(exc.detail.split())[-240:]


def run_in(docker: Docker, image: str, script: str, deadline: Deadline, *flags: str, cap: float = 60) -> str:
    return docker.run("run", "--rm", "--pull", "never", "--label", LABEL, *flags, "--entrypoint", "sh", image,
                      "-c", script, timeout=deadline.left(cap))


def _unusable_image(exc: DockerError) -> bool:
    text = (exc.stderr + exc.stdout).lower()
    return exc.returncode in (126, 127) or "executable file not found" in text or "no such file" in text


def _rlimit_refused(exc: DockerError) -> bool:
    text = (exc.stderr + exc.stdout).lower()
    return "rlimit" in text or "ulimit" in text


def context_endpoint(context: str, timeout: float = 10) -> str:
    try:
        rows = Docker("default").json("context", "inspect", context, timeout=timeout)
        return rows[0]["Endpoints"]["docker"]["Host"]
    except (DockerError, LookupError, TypeError, ValueError):
        return ""


def gather(context: str, image: str | None = None, memlock: int | None = -1, gpu: str | None = "auto",
           timeout: float = 60) -> NodeFacts:
    """Read one node's facts through its context. memlock: the ulimit the facts container tries (None: none);
    gpu: "auto" (probe), "nvidia" / "cdi" (try that only) or None (skip)."""
    deadline = Deadline(timeout)
    docker = Docker(context)
    try:
        info = docker.info(timeout=deadline.left(15))
    except DockerError as exc:
        raise ProbeError(f"context '{context}' does not answer: {_short(exc)}") from None
    if not isinstance(info, dict) or not info.get("ServerVersion"):
        raise ProbeError(f"context '{context}' does not answer: {(info or {}).get('ServerErrors') or 'no engine'}")
    if image:
        candidates = [image]
    else:
        try:
            candidates = image_candidates(docker.json_lines("image", "ls", "--format", "{{json .}}",
                                                            timeout=deadline.left(20)))
        except DockerError as exc:
            raise ProbeError(f"cannot list images: {_short(exc)}") from None
        if not candidates:
            raise ProbeError("no image on this node to run the probe in (load a small one, e.g. busybox, "
                             "or the engine image; or pass --image)")
    output, chosen, unlimited, tried = None, None, None, []
    for candidate in candidates[:3]:
        flags = ["--network", "host"]
        try:
            if memlock is not None:
                try:
                    output = run_in(docker, candidate, SCRIPT, deadline, *flags, "--ulimit",
                                    f"memlock={memlock}:{memlock}")
                    unlimited = True
                except DockerError as exc:
                    if not _rlimit_refused(exc):
                        raise
                    unlimited = False
            if output is None:
                output = run_in(docker, candidate, SCRIPT, deadline, *flags)
            chosen = candidate
            break
        except DockerError as exc:
            tried.append(f"{candidate}: {_short(exc)}")
            if not _unusable_image(exc) or image:
                raise ProbeError(f"the probe container did not run in {candidate}: {_short(exc)}") from None
    if output is None or chosen is None:
        raise ProbeError("no image here has a shell to run the probe (" + "; ".join(tried) + "); pass --image")
    sections = parse_sections(output)
    if "end" not in sections:
        raise ProbeError(f"the probe's output in {chosen} is incomplete (did `sh` run the script?)")
    gpu_info = probe_gpu(docker, chosen, info, deadline, gpu) if gpu else None
    facts = facts_from_sections(sections, context, info, gpu_info)
    facts.image = chosen
    facts.memlock_ok = unlimited
    facts.endpoint = context_endpoint(context, timeout=deadline.left(10))
    return facts


def probe_gpu(docker: Docker, image: str, info: dict, deadline: Deadline, mode: str = "auto") -> GpuInfo:
    """Does the engine give containers the GPU: a `--gpus all` trial (and CDI where the engine has spec dirs)."""
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    cdi_dirs = list(info.get("CDISpecDirs") or [])
    result = GpuInfo(None, runtimes=runtimes, cdi_dirs=cdi_dirs)
    tries = []
    if mode in ("auto", "nvidia"):
        tries.append(("nvidia", ["--gpus", "all"]))
    if mode == "cdi" or (mode == "auto" and cdi_dirs):
        tries.append(("cdi", ["--device", "nvidia.com/gpu=all"]))
    details = []
    for kind, flags in tries:
        try:
            out = run_in(docker, image, GPU_SCRIPT, deadline, "--network", "none", *flags, cap=60)
        except DockerError as exc:
            details.append(f"{' '.join(flags)}: {_short(exc)}")
            continue
        result.runtime, result.devices = kind, parse_nvidia_smi(out)
        result.detail = out.strip().splitlines()[0] if out.strip() else ""
        return result
    result.detail = "; ".join(details) or "not tried"
    return result


# --- proposing (pure) --------------------------------------------------------------------------------------


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

    def score(net: ipaddress.IPv4Network):
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


def _agree(proposal: Proposal, key: str, values: list[str | None]) -> None:
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
        hcas, gids = [], []
        for f, n in zip(facts, p.nodes):
            fabric_nets = {a.network for a in f.interfaces[n.iface].ipv4} if n.iface else set()
            shared = _shared_networks(facts, p)
            devs = set(f.rdma_for(n.iface))
            for iface in f.interfaces.values():
                if iface.up and any(a.network in shared or a.network in fabric_nets for a in iface.ipv4):
                    devs.update(f.rdma_for(iface.name))
            hcas.append(",".join(sorted(devs, key=lambda d: (d not in f.rdma_for(n.iface), d))))
            idx = {gid_index(f, d, n.address) for d in f.rdma_for(n.iface)} - {None}
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


# --- rendering ---------------------------------------------------------------------------------------------

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_TOML_ESCAPE = re.compile("[\x00-\x1f\x7f\u2028\u2029]")


class Raw(str):
    """Template-made TOML (never a probed value)."""


def toml_value(value: object) -> str:
    """Every `{{ value }}` of the template as a TOML value: strings as basic strings, escaped."""
    if isinstance(value, Raw):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        body = value.replace("\\", "\\\\").replace('"', '\\"')
        body = _TOML_ESCAPE.sub(lambda m: {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(m[0], f"\\u{ord(m[0]):04x}"),
                                body)
        return f'"{body}"'
    if value is None:
        raise TypeError("a None value reached the cluster template")
    raise TypeError(f"the cluster template may only print strings, booleans and numbers, not {type(value).__name__}")


def toml_key(key: str) -> Raw:
    return Raw(key if _BARE_KEY.match(key) else toml_value(key))


def toml_comment(text: object) -> Raw:
    return Raw(re.sub(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+", " ", str(text)).strip())


@cache
def _environment():
    import jinja2

    from generator.resources import read_data

    env = jinja2.Environment(loader=jinja2.FunctionLoader(lambda n: (read_data("templates", n), None, lambda: True)),
                             undefined=jinja2.StrictUndefined, finalize=toml_value, autoescape=False,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["key"] = toml_key
    env.filters["comment"] = toml_comment
    return env


def render_cluster(p: Proposal, schema_path: str = "./schema/cluster.schema.json") -> str:
    return _environment().get_template("cluster.toml.j2").render(p=p, schema_path=Raw(schema_path),
                                                                 stack=DEFAULT_STACK)


def write_atomic(path: Path, text: str, force: bool) -> None:
    """Write through a temporary file in the same folder; never replace an existing file unless force."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    tmp.write_text(text, "utf-8")
    try:
        if force:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if the path exists: no window where another file is overwritten
    except FileExistsError:
        raise FileExistsError(f"{path} exists; pass --force to replace it") from None
    finally:
        if tmp.exists():
            tmp.unlink()


def summary_rows(facts: list[NodeFacts], p: Proposal) -> list[list[str]]:
    rows = []
    for f, n in zip(facts, p.nodes):
        iface = f.interfaces.get(n.iface or "")
        rdma = ",".join(f.rdma_for(n.iface)) if n.iface else ""
        gpu = (f.gpu.runtime or "no") if f.gpu else "-"
        if f.gpu and f.gpu.devices:
            gpu += f" ({len(f.gpu.devices)} GPU)"
        memlock = {None: "?", -1: "unlimited"}.get(f.memlock_hard, str(f.memlock_hard))
        rows.append([n.name, f.context, f.default_iface or "-", f"{n.iface or '-'} {n.address}",
                     iface.state if iface else "-", rdma or "-", gpu, memlock, f.image])
    return rows
