"""doctor knows bad hosts (issue 39): a node's kernel against the known-bad list (generator/data/
known_bad_kernels.json, each entry with its sources), and each node's free unified memory (MemAvailable) shown
before `up`. From recorded docker answers (tests/fixtures/probe: two Sparks' `docker info` and probe output)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from generator.cluster import doctor as doctor_module
from generator.cluster.hosts import bad_kernels, host_findings
from generator.cluster.probe.parse import facts_from_sections, parse_meminfo
from generator.cluster.probe.proposal import propose
from generator.deploy.findings import Severity
from generator.resolve.load import load_cluster
from helpers.probe import spark, write

# /proc/meminfo's shape (kB); the figures are an idle GB10's: MemTotal as its recorded `docker info` says.
MEMINFO = """MemTotal:       125433168 kB
MemFree:        117012345 kB
MemAvailable:   119304232 kB
Buffers:           12345 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
"""


def _cluster(tmp_path: Path, rdma: bool = True):
    facts = [spark("spark1"), spark("spark2")]
    path = write(tmp_path, propose(facts, name="duo"))
    if not rdma:
        path.write_text(path.read_text().replace("rdma = true", "rdma = false"))
    return load_cluster(path), facts


def test_meminfo_in_bytes():
    found = parse_meminfo(MEMINFO)
    assert found["MemAvailable"] == 119304232 * 1024 and found["HugePages_Total"] == 0
    assert parse_meminfo("garbage\n\nMemTotal: x kB\n") == {}


def test_the_probe_reads_the_kernel_from_docker_info_and_the_memory_from_meminfo():
    facts = spark("spark1")
    assert facts.kernel == "6.11.0-1016-nvidia"  # tests/fixtures/probe/spark1/docker_info.json
    info = json.loads((Path(__file__).parent / "fixtures" / "probe" / "spark1" / "docker_info.json").read_text())
    read = facts_from_sections({"meminfo": MEMINFO}, "spark1", info)
    assert (read.mem_total, read.mem_available) == (125433168 * 1024, 119304232 * 1024)


def test_a_good_kernel_and_the_free_memory_are_shown(tmp_path: Path):
    cluster, facts = _cluster(tmp_path)
    facts[0].mem_total, facts[0].mem_available = 125433168 * 1024, 119304232 * 1024
    kernel, memory = host_findings(cluster, cluster.nodes[0], facts[0])
    assert (kernel.severity, kernel.message) == (Severity.OK, "6.11.0-1016-nvidia")
    assert (memory.severity, memory.message) == (Severity.OK, "113.8 GiB available of 119.6 GiB (MemAvailable)")


def test_kernel_7_0_0_1019_nvidia_is_an_error_with_rdma_and_names_its_source_and_fix(tmp_path: Path):
    cluster, facts = _cluster(tmp_path)
    facts[1].kernel = "7.0.0-1019-nvidia"
    kernel = host_findings(cluster, cluster.nodes[1], facts[1])[0]
    assert kernel.severity is Severity.ERROR and kernel.node == cluster.nodes[1].name
    assert kernel.message.startswith("kernel 7.0.0-1019-nvidia is known to break NCCL's RoCE memory registration")
    assert "6.17.0-1032-nvidia works" in kernel.message
    assert "https://github.com/eugr/spark-vllm-docker/issues/392" in kernel.message
    assert "6.17.0-1032-nvidia" in kernel.fix


def test_without_rdma_the_bad_kernel_is_a_warning(tmp_path: Path):
    cluster, facts = _cluster(tmp_path, rdma=False)
    assert not cluster.rdma
    facts[0].kernel = "7.0.0-1019-nvidia"
    assert host_findings(cluster, cluster.nodes[0], facts[0])[0].severity is Severity.WARNING


def test_unknown_kernel_and_memory_are_warnings_not_guesses(tmp_path: Path):
    cluster, facts = _cluster(tmp_path)
    facts[0].kernel = ""
    kernel, memory = host_findings(cluster, cluster.nodes[0], facts[0])
    assert kernel.severity is memory.severity is Severity.WARNING
    assert "MemAvailable" in memory.message


def test_every_known_bad_kernel_has_sources_a_fix_and_a_kernel_that_works():
    raw = json.loads(resources.files("generator").joinpath("data/known_bad_kernels.json").read_text("utf-8"))
    assert raw["kernels"] and len(bad_kernels()) == len(raw["kernels"])
    for entry in bad_kernels().values():
        assert entry.sources and all(s.startswith("https://") for s in entry.sources), entry
        assert entry.fix and entry.works and entry.works != entry.kernel
    assert "7.0.0-1019-nvidia" in bad_kernels()


def test_doctor_reports_each_nodes_kernel_and_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The whole doctor over recorded answers: gather() stands in for the nodes, one of them on the bad kernel."""
    cluster, facts = _cluster(tmp_path)
    by_context = {f.context: f for f in facts}
    by_context["spark2"].kernel = "7.0.0-1019-nvidia"
    for f in facts:
        f.mem_total, f.mem_available = 125433168 * 1024, 119304232 * 1024
    monkeypatch.setattr(doctor_module, "gather", lambda context, **_: by_context[context])
    monkeypatch.setattr(doctor_module, "compose_version", lambda: (2, 40, 3))
    contexts = {n.name: n.context for n in cluster.nodes}
    assert set(contexts.values()) <= set(by_context), contexts
    found = {(f.node, f.code): f for f in doctor_module.doctor(cluster, reach=False)}
    one, two = (n.name for n in cluster.nodes)
    assert found[(one, "kernel")].severity is Severity.OK
    assert found[(two, "kernel")].severity is Severity.ERROR
    assert found[(one, "memory")].message == "113.8 GiB available of 119.6 GiB (MemAvailable)"
