"""What doctor says about a node's host, beyond its fabric: a kernel known to break the cluster (a list kept as
data with its sources, generator/data/known_bad_kernels.json), and the unified memory free for the engine now.

A GB10 has one pool of memory for CPU and GPU: what other processes hold (a leftover engine, a leak after many
restarts) is gone for the next `up`, so doctor shows MemAvailable per node before anything starts.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

from generator.cluster.probe.facts import NodeFacts
from generator.deploy.findings import Finding, Severity
from generator.resolve.model import Cluster, Node

KERNEL, MEMORY = "kernel", "memory"


@dataclass(frozen=True)
class BadKernel:
    kernel: str  # exactly as `uname -r` (docker info's KernelVersion) prints it
    breaks: str
    needs_rdma: bool  # it breaks only what runs over RoCE: a cluster with rdma = false is warned, not stopped
    works: str
    fix: str
    sources: tuple[str, ...]


@functools.cache
def bad_kernels() -> dict[str, BadKernel]:
    text = resources.files("generator").joinpath("data/known_bad_kernels.json").read_text("utf-8")
    return {e["kernel"]: BadKernel(e["kernel"], e["breaks"], bool(e["needs_rdma"]), e["works"], e["fix"],
                                   tuple(e["sources"]))
            for e in json.loads(text)["kernels"]}


def kernel_finding(cluster: Cluster, node: Node, facts: NodeFacts) -> Finding:
    if not facts.kernel:
        return Finding(node.name, Severity.WARNING, KERNEL, "the engine did not say its kernel (docker info)")
    bad = bad_kernels().get(facts.kernel)
    if bad is None:
        return Finding(node.name, Severity.OK, KERNEL, facts.kernel)
    severity = Severity.ERROR if cluster.rdma or not bad.needs_rdma else Severity.WARNING
    return Finding(node.name, severity, KERNEL, f"kernel {bad.kernel} is known to break {bad.breaks} "
                                                f"({bad.works} works; {bad.sources[0]})", bad.fix)


def gib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB"


def memory_finding(node: Node, facts: NodeFacts) -> Finding:
    """MemAvailable: the memory the next engine can have now (the kernel's estimate, page cache included)."""
    if facts.mem_available is None:
        return Finding(node.name, Severity.WARNING, MEMORY, "free memory unknown: no MemAvailable in /proc/meminfo")
    total = f" of {gib(facts.mem_total)}" if facts.mem_total else ""
    return Finding(node.name, Severity.OK, MEMORY, f"{gib(facts.mem_available)} available{total} (MemAvailable)")


def host_findings(cluster: Cluster, node: Node, facts: NodeFacts) -> list[Finding]:
    return [kernel_finding(cluster, node, facts), memory_finding(node, facts)]
