"""What a probe learns about one node: its interfaces, RDMA devices and their GID tables, GPU runtime, memlock.

Plain data, filled by `parse.facts_from_sections` (and `read.gather`), read by `proposal` and by `doctor`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field


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
    kernel: str = ""  # docker info's KernelVersion (uname -r of the node)
    mem_total: int | None = None  # bytes, /proc/meminfo's MemTotal
    mem_available: int | None = None  # bytes, /proc/meminfo's MemAvailable: what a new engine can have now
    endpoint: str = ""  # the context's docker endpoint
    image: str = ""  # the image the probe ran
    notes: list[str] = field(default_factory=list)

    def rdma_for(self, netdev: str) -> list[str]:
        return sorted(d.name for d in self.rdma.values() if netdev in d.netdevs)

    def holding(self, address: str) -> Interface | None:
        ip = ipaddress.IPv4Address(address)
        return next((i for i in self.interfaces.values() if any(a.ip == ip for a in i.ipv4)), None)


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
