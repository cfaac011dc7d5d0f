"""Shared by the tests: moved from tests/test_probe.py, which uses them too."""

from __future__ import annotations

import json
from pathlib import Path
from generator.cluster.probe.facts import GpuInfo, NodeFacts, gid_index
from generator.cluster.probe.parse import (facts_from_sections, parse_fib_trie, parse_infiniband, parse_ip_addr,
                                           parse_memlock, parse_nvidia_smi, parse_route, parse_sections)
from generator.cluster.probe.proposal import Proposal, _ssh_endpoint, candidates, exclusion, node_names, propose
from generator.cluster.probe.render import render_cluster

TESTS = Path(__file__).resolve().parent.parent


FIXTURES = TESTS / "fixtures" / "probe"


def sections(node: str) -> dict[str, str]:
    return {f.name: f.read_text() for f in (FIXTURES / node).iterdir()
            if f.name not in ("docker_info.json", "nvidia_smi")}


def spark(node: str, drop: tuple[str, ...] = ()) -> NodeFacts:
    d = FIXTURES / node
    info = json.loads((d / "docker_info.json").read_text())
    gpu = GpuInfo("nvidia", parse_nvidia_smi((d / "nvidia_smi").read_text()), sorted(info["Runtimes"]),
                  info["CDISpecDirs"])
    raw = {k: v for k, v in sections(node).items() if k not in drop}
    facts = facts_from_sections(raw, node, info, gpu)
    facts.endpoint = f"ssh://spark@{node}.local"
    facts.memlock_ok = True
    return facts


def write(tmp_path: Path, proposal: Proposal) -> Path:
    path = tmp_path / "cluster.toml"
    path.write_text(render_cluster(proposal))
    return path
