"""Pure parsers: the probe's recorded text (sysfs, /proc/net/route, /proc/net/fib_trie, `ip -o -4 addr`, GID
tables, /proc/self/limits, `nvidia-smi -L`, `docker info`) into `NodeFacts`. No I/O: testable from fixtures.
"""

from __future__ import annotations

from typing import Any
import ipaddress
import re
from dataclasses import dataclass

from generator.cluster.probe.facts import Gid, GpuInfo, Interface, NodeFacts, RdmaDevice

SECTION = re.compile(r"^@@recipegen:([a-z_]+)@@$", re.M)


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


def facts_from_sections(sections: dict[str, str], context: str = "", info: dict[str, Any] | None = None,
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
    meminfo = parse_meminfo(sections.get("meminfo", ""))
    facts.mem_total, facts.mem_available = meminfo.get("MemTotal"), meminfo.get("MemAvailable")
    if info:
        facts.engine = str(info.get("ServerVersion", ""))
        facts.kernel = str(info.get("KernelVersion", ""))
    return facts


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo ("MemAvailable:   117440512 kB") into {name: bytes}; lines of another shape are skipped."""
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            out[name.strip()] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return out
