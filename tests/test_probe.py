"""What `recipegen cluster probe` reads, parsed from recorded outputs, and what it proposes from them.

tests/fixtures/probe/spark1 and spark2 are two DGX Sparks as the probe container sees them: the CX7 ports
enp1s0f0np0 / enp1s0f1np1 / enP2p1s0f0np0 / enP2p1s0f1np1 (RDMA devices rocep1s0f0 ... roceP2p1s0f1, each
backed by the netdev of the same port; port 0 of each half cabled and addressed), the management NIC enP7s7
holding the default route, the wireless wlP9s9 (also up, with a default route of a higher metric) and docker0.
/proc/net/route and /proc/net/fib_trie were recorded from a kernel set up with that layout.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import shutil
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from generator.cli import main
from generator.cluster.probe.facts import GpuInfo, NodeFacts, gid_index
from generator.cluster.probe.parse import (facts_from_sections, parse_fib_trie, parse_infiniband, parse_ip_addr,
                                           parse_memlock, parse_nvidia_smi, parse_route, parse_sections)
from generator.cluster.probe.proposal import Proposal, _ssh_endpoint, candidates, exclusion, node_names, propose
from generator.cluster.probe.read import image_candidates
from generator.cluster.probe.render import render_cluster
from generator.cluster.probe.write import write_atomic
from generator.resolve.load import load_cluster
from helpers.probe import FIXTURES, sections, spark, write  # noqa: F401 - moved to tests/helpers/

SPARK_PORTS = ["enP2p1s0f0np0", "enP2p1s0f1np1", "enp1s0f0np0", "enp1s0f1np1"]
LAB_IP_ADDR = """1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
304: eth0    inet 10.213.3.11/24 scope global eth0\\       valid_lft forever preferred_lft forever
"""


# --- parsing --------------------------------------------------------------------------------------------


def test_route_table_and_the_management_nic():
    routes = parse_route(sections("spark1")["route"])
    assert [(r.iface, str(r.destination), str(r.gateway) if r.gateway else None, r.metric) for r in routes] == [
        ("enP7s7", "0.0.0.0/0", "192.168.1.1", 100), ("wlP9s9", "0.0.0.0/0", "192.168.1.1", 600),
        ("enP7s7", "192.168.1.0/24", None, 100), ("wlP9s9", "192.168.1.0/24", None, 600),
        ("enp1s0f0np0", "192.168.100.0/24", None, 0), ("enP2p1s0f0np0", "192.168.101.0/24", None, 0)]
    assert spark("spark1").default_iface == "enP7s7"  # the lowest metric of the default routes


def test_fib_trie_local_addresses():
    local = parse_fib_trie(sections("spark1")["fib_trie"])
    # 127.0.0.0 is a `/8 host LOCAL` route, not an address; Main and Local list the same ones once.
    assert list(map(str, local)) == ["127.0.0.1", "172.17.0.1", "192.168.1.50", "192.168.1.61", "192.168.100.10",
                                     "192.168.101.10"]


def test_ip_addr_iproute2_and_busybox():
    by_ip = parse_ip_addr(sections("spark1")["ip_addr"])
    assert {k: [str(a) for a in v] for k, v in by_ip.items()} == {
        "lo": ["127.0.0.1/8"], "enP7s7": ["192.168.1.50/24"], "enp1s0f0np0": ["192.168.100.10/24"],
        "enP2p1s0f0np0": ["192.168.101.10/24"], "wlP9s9": ["192.168.1.61/24"], "docker0": ["172.17.0.1/16"]}
    assert {k: [str(a) for a in v] for k, v in parse_ip_addr(LAB_IP_ADDR).items()} == {
        "lo": ["127.0.0.1/8"], "eth0": ["10.213.3.11/24"]}


@pytest.mark.parametrize("node", ["spark1", "spark2"])
def test_addresses_derived_without_ip_match_ip(node: str):
    """Without iproute2 in the image: route + fib_trie LOCAL entries give the same addresses (docker0 is down,
    so it has no route, and the derivation says so)."""
    with_ip, without = spark(node), spark(node, drop=("ip_addr",))
    expect = {k: [str(a) for a in v.ipv4] for k, v in with_ip.interfaces.items() if k not in ("lo", "docker0")}
    got = {k: [str(a) for a in v.ipv4] for k, v in without.interfaces.items() if k not in ("lo", "docker0")}
    assert got == expect
    assert any("172.17.0.1 has no link route" in n for n in without.notes)
    assert any("linked on enP7s7, wlP9s9" in n for n in without.notes)  # same subnet on two NICs: a guess


def test_interfaces_of_a_dgx_spark():
    facts = spark("spark1")
    ifs = facts.interfaces
    assert sorted(ifs) == sorted(["docker0", *SPARK_PORTS, "enP7s7", "lo", "wlP9s9"])
    assert ifs["enp1s0f0np0"].up and ifs["enp1s0f0np0"].mtu == 9000 and ifs["enp1s0f0np0"].physical
    assert ifs["enp1s0f0np0"].mac == "4c:bb:47:2c:87:a0"
    assert not ifs["enp1s0f1np1"].up and ifs["enp1s0f1np1"].state == "down" and ifs["enp1s0f1np1"].ipv4 == []
    assert ifs["wlP9s9"].wireless and ifs["docker0"].bridge and not ifs["docker0"].up
    assert ifs["lo"].up  # operstate "unknown" with carrier: up
    assert facts.hostname == "spark-7c1e" and facts.engine == "28.3.3"


def test_rdma_devices_and_their_netdevs():
    facts = spark("spark1")
    assert {d.name: d.netdevs for d in facts.rdma.values()} == {
        "rocep1s0f0": ["enp1s0f0np0"], "rocep1s0f1": ["enp1s0f1np1"],
        "roceP2p1s0f0": ["enP2p1s0f0np0"], "roceP2p1s0f1": ["enP2p1s0f1np1"]}
    assert facts.rdma_for("enP2p1s0f0np0") == ["roceP2p1s0f0"] and facts.rdma_for("enP7s7") == []
    assert gid_index(facts, "rocep1s0f0", "192.168.100.10") == 3
    assert gid_index(facts, "roceP2p1s0f0", "192.168.101.10") == 3
    assert gid_index(facts, "rocep1s0f1", "192.168.100.10") is None  # uncabled port: link-local GIDs only
    table = facts.rdma["rocep1s0f1"].gids[1]
    assert [(g.index, g.type) for g in table] == [(0, "IB/RoCE v1"), (1, "RoCE v2")]


def test_infiniband_listing_of_one_device():
    text = "/sys/class/infiniband/mlx5_0/device/net:\nens1f0np0\n\n"
    assert parse_infiniband(text) == {"mlx5_0": ["ens1f0np0"]}
    assert parse_infiniband("") == {}


def test_memlock_limits():
    assert parse_memlock(sections("spark1")["limits"]) == -1
    lab = "Max locked memory         8388608              8388608              bytes     \n"
    assert parse_memlock(lab) == 8 * 1024 * 1024
    assert parse_memlock("Max locked memory         65536                unlimited            bytes\n") == -1
    assert parse_memlock("") is None


def test_nvidia_smi():
    assert parse_nvidia_smi((FIXTURES / "spark1" / "nvidia_smi").read_text()) == [
        "GPU 0: NVIDIA GB10 (UUID: GPU-5f6b8c2e-1d3a-4e7b-9c0f-2a8d6e4b1c3f)"]
    assert parse_nvidia_smi("sh: nvidia-smi: not found\nNVIDIA_VISIBLE_DEVICES=all\n") == []


def test_bundle_sections():
    raw = sections("spark1")
    bundle = "".join(f"@@recipegen:{k}@@\n{v}" for k, v in raw.items()) + "@@recipegen:end@@\n"
    parsed = parse_sections(bundle)
    assert set(parsed) == set(raw) | {"end"}
    assert parsed["route"] == raw["route"] and parsed["fib_trie"] == raw["fib_trie"]
    assert parse_sections("no markers") == {}


def test_image_candidates_smallest_tagged_first():
    rows = [{"Repository": "nvcr.io/nvidia/vllm", "Tag": "25.10-py3", "Size": "21.3GB"},
            {"Repository": "<none>", "Tag": "<none>", "Size": "5MB"},
            {"Repository": "hello-world", "Tag": "latest", "Size": "13.3kB"},
            {"Repository": "busybox", "Tag": "1.36", "Size": "4.04MB"},
            {"Repository": "ubuntu", "Tag": "24.04", "Size": "101MB"}]
    assert image_candidates(rows) == ["busybox:1.36", "ubuntu:24.04", "nvcr.io/nvidia/vllm:25.10-py3"]


# --- proposing ------------------------------------------------------------------------------------------


def test_two_sparks_proposal(tmp_path: Path):
    facts = [spark("spark1"), spark("spark2")]
    p = propose(facts, name="spark-duo")
    assert p.rdma is True and p.gpu == "nvidia" and p.memlock == -1 and p.user == "spark"
    assert p.env == {"NCCL_SOCKET_IFNAME": "enp1s0f0np0", "GLOO_SOCKET_IFNAME": "enp1s0f0np0",
                     "TP_SOCKET_IFNAME": "enp1s0f0np0", "UCX_NET_DEVICES": "enp1s0f0np0", "NCCL_IB_DISABLE": "0",
                     "NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0", "NCCL_IB_GID_INDEX": "3"}
    assert [(n.name, n.address, n.ssh_host, n.env) for n in p.nodes] == [
        ("spark-7c1e", "192.168.100.10", "spark1.local", {}), ("spark-a93b", "192.168.100.11", "spark2.local", {})]
    # Both halves of the port are addressed on subnets both nodes share: which is "the" fabric is a guess.
    assert any("192.168.100.0/24 or 192.168.101.0/24" in n for n in p.notes)
    cluster = load_cluster(write(tmp_path, p))
    assert cluster.name == "spark-duo" and cluster.rdma and cluster.ulimits.memlock == -1
    assert [n.address for n in cluster.nodes] == ["192.168.100.10", "192.168.100.11"]
    assert cluster.env == p.env


def _rename(facts: NodeFacts, old: str, new: str) -> None:
    iface = facts.interfaces.pop(old)
    iface.name = new
    facts.interfaces[new] = iface
    for dev in facts.rdma.values():
        dev.netdevs = [new if n == old else n for n in dev.netdevs]


def test_nodes_with_other_interface_names_get_per_node_env(tmp_path: Path):
    one, two = spark("spark1"), spark("spark2")
    # Only one half cabled on each, and spark2's on the other PCIe half:
    for f in (one, two):
        f.interfaces["enP2p1s0f0np0"].ipv4 = []
    two.interfaces["enp1s0f0np0"].ipv4, two.interfaces["enP2p1s0f0np0"].ipv4 = [], two.interfaces["enp1s0f0np0"].ipv4
    p = propose([one, two])
    assert "NCCL_SOCKET_IFNAME" not in p.env
    assert p.nodes[0].env["NCCL_SOCKET_IFNAME"] == "enp1s0f0np0"
    assert p.nodes[1].env["NCCL_SOCKET_IFNAME"] == "enP2p1s0f0np0"
    assert p.nodes[1].env["UCX_NET_DEVICES"] == "enP2p1s0f0np0"
    assert p.nodes[0].env["NCCL_IB_HCA"] == "rocep1s0f0" and p.nodes[1].env["NCCL_IB_HCA"] == "roceP2p1s0f0"
    # One subnet: decided. spark2's recorded GID table has no entry for the moved address: said so.
    assert len(p.notes) == 1 and "spark-a93b" in p.notes[0]
    assert p.notes[0].startswith("NCCL_IB_GID_INDEX: no RoCE v2 GID")
    assert "NCCL_IB_GID_INDEX" not in p.env and "NCCL_IB_GID_INDEX" not in p.nodes[0].env
    cluster = load_cluster(write(tmp_path, p))
    assert cluster.nodes[1].env["GLOO_SOCKET_IFNAME"] == "enP2p1s0f0np0"
    assert "NCCL_SOCKET_IFNAME" not in cluster.env


def test_no_rdma_and_a_hard_memlock_limit(tmp_path: Path):
    facts = [spark("spark1"), spark("spark2")]
    for f in facts:
        f.rdma = {}
        f.memlock_ok, f.memlock_hard = False, 8388608
    facts[1].memlock_hard = 16777216
    p = propose(facts)
    assert p.rdma is False and p.env["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_HCA" not in p.env
    assert p.memlock == 8388608
    text = render_cluster(p)
    assert "no node has RDMA devices" in text and "cannot be raised" in text
    assert load_cluster(write(tmp_path, p)).ulimits.memlock == 8388608


def test_rdma_on_one_node_only_is_undecided(tmp_path: Path):
    facts = [spark("spark1"), spark("spark2")]
    facts[1].rdma = {}
    p = propose(facts)
    assert p.rdma is False
    assert any("rdma = false" in n and "spark-a93b" in n for n in p.notes)
    assert "UNDECIDED" in render_cluster(p)
    load_cluster(write(tmp_path, p))


def test_a_node_without_a_fabric_address_is_undecided(tmp_path: Path):
    facts = [spark("spark1"), spark("spark2")]
    for name in ("enp1s0f0np0", "enP2p1s0f0np0"):
        facts[1].interfaces[name].ipv4 = []
    p = propose(facts)
    assert p.nodes[1].address == "192.168.1.51"  # the management address, as a placeholder
    assert any(n.startswith("spark-a93b: no address on the fabric subnet") for n in p.notes)
    text = render_cluster(p)
    assert "# UNDECIDED: no address on the fabric subnet" in text
    load_cluster(write(tmp_path, p))


def test_management_wireless_docker_and_down_ports_are_never_the_fabric():
    facts = spark("spark1")
    reasons = {name: exclusion(i, facts.default_iface) for name, i in facts.interfaces.items()}
    assert reasons["enP7s7"] == "holds the default route (management)"
    assert reasons["wlP9s9"] == "wireless" and reasons["docker0"] == "Docker's bridge" and reasons["lo"] == "loopback"
    assert reasons["enp1s0f0np0"] is None
    assert {c.iface for c in candidates(facts)} == {"enp1s0f0np0", "enP2p1s0f0np0"}


def test_gpu_mixed_and_none():
    facts = [spark("spark1"), spark("spark2")]
    facts[1].gpu = GpuInfo(None, detail="could not select device driver")
    p = propose(copy.deepcopy(facts))
    assert p.gpu == "nvidia" and any("cannot give containers the GPU" in n for n in p.notes)
    facts[0].gpu = GpuInfo(None)
    assert propose(facts).gpu == "none"


def test_node_names_from_hostnames():
    facts = [NodeFacts("ctx-a", hostname="Spark.Lab"), NodeFacts("ctx-b", hostname="spark.lab"),
             NodeFacts("_ctx", hostname="")]
    assert node_names(facts) == ["spark-lab", "spark-lab-2", "ctx"]


# --- rendering and writing ------------------------------------------------------------------------------


def test_values_are_escaped_and_round_trip(tmp_path: Path):
    p = propose([spark("spark1")], name='odd "name" \\ with\nnewline\x7f')
    p.nodes[0].env["NCCL_DEBUG_SUBSYS"] = 'a"b\\c'
    p.comment("gpu", "a comment\nwith = a newline")
    path = write(tmp_path, p)
    text = path.read_text()
    assert text.startswith("#:schema ./schema/cluster.schema.json\n")
    assert "# a comment with = a newline\n" in text
    data = tomllib.loads(text)
    assert data["name"] == 'odd "name" \\ with\nnewline\x7f'
    assert data["nodes"][0]["env"]["NCCL_DEBUG_SUBSYS"] == 'a"b\\c'
    load_cluster(path)


def test_the_written_file_validates(tmp_path: Path, monkeypatch):
    path = write(tmp_path, propose([spark("spark1"), spark("spark2")], name="duo"))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0, result.output


def test_write_atomic_never_overwrites_without_force(tmp_path: Path):
    path = tmp_path / "sub" / "cluster.toml"
    write_atomic(path, "one\n", force=False)
    with pytest.raises(FileExistsError, match="--force"):
        write_atomic(path, "two\n", force=False)
    assert path.read_text() == "one\n"
    write_atomic(path, "three\n", force=True)
    assert path.read_text() == "three\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["cluster.toml"]  # no temporary file left


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker CLI")
def test_probe_of_an_unknown_context_is_one_line(tmp_path: Path):
    result = CliRunner().invoke(main, ["cluster", "probe", "--context", "recipegen-no-such-context",
                                       "--write", str(tmp_path / "c.toml"), "--timeout", "10"])
    assert result.exit_code == 1
    assert "recipegen-no-such-context: probe failed: context 'recipegen-no-such-context' does not answer" in \
        result.output
    assert "Traceback" not in result.output and not (tmp_path / "c.toml").exists()


def test_address_helpers():
    facts = spark("spark1")
    assert facts.holding("192.168.100.10").name == "enp1s0f0np0"
    assert facts.holding("10.0.0.1") is None
    assert _ssh_endpoint("ssh://spark@spark1.local") == ("spark", "spark1.local")
    assert _ssh_endpoint("ssh://spark1.local:2222") == (None, "spark1.local")
    assert _ssh_endpoint("unix:///var/run/docker.sock") == (None, None)
    assert ipaddress.IPv4Address("192.168.100.10") in ipaddress.IPv4Network("192.168.100.0/24")


# --- doctor's checks over recorded facts (no docker) ----------------------------------------------------


def _duo(tmp_path: Path):
    from generator.cluster.doctor import check_node, check_subnets

    facts = [spark("spark1"), spark("spark2")]
    cluster = load_cluster(write(tmp_path, propose(facts, name="duo")))
    return cluster, facts, check_node, check_subnets


def _levels(found) -> dict[str, str]:
    return {f.code: f.severity.value for f in found if f.severity.value != "ok"}


def test_doctor_checks_pass_on_the_proposal(tmp_path: Path):
    cluster, facts, check_node, check_subnets = _duo(tmp_path)
    for node, f in zip(cluster.nodes, facts):
        assert _levels(check_node(cluster, node, f)) == {}
    by_name = {n.name: f for n, f in zip(cluster.nodes, facts)}
    assert [f.severity.value for f in check_subnets(cluster, by_name)] == ["ok"]


def test_doctor_finds_stale_fabric_settings(tmp_path: Path):
    cluster, facts, check_node, _ = _duo(tmp_path)
    node = cluster.nodes[1]
    node.env.update({"NCCL_IB_GID_INDEX": "1", "NCCL_IB_HCA": "mlx5_0", "GLOO_SOCKET_IFNAME": "eth0"})
    found = {f.code: f for f in check_node(cluster, node, facts[1]) if f.severity.value != "ok"}
    assert set(found) == {"NCCL_IB_GID_INDEX", "NCCL_IB_HCA", "GLOO_SOCKET_IFNAME"}
    assert found["NCCL_IB_GID_INDEX"].fix == 'set [nodes.env] NCCL_IB_GID_INDEX = "3"'
    assert "GID index 1 is stale" in found["NCCL_IB_GID_INDEX"].message
    assert "mlx5_0, not on this node" in found["NCCL_IB_HCA"].message


def test_doctor_finds_a_down_port_and_a_foreign_address(tmp_path: Path):
    cluster, facts, check_node, _ = _duo(tmp_path)
    facts[0].interfaces["enp1s0f0np0"].state = "down"
    found = {f.code: f for f in check_node(cluster, cluster.nodes[0], facts[0]) if f.severity.value != "ok"}
    assert found["NCCL_SOCKET_IFNAME"].severity.value == "error" and "enp1s0f0np0 is down" in found["NCCL_SOCKET_IFNAME"].message
    object.__setattr__(cluster.nodes[1], "address", "192.168.100.99")
    found = {f.code: f for f in check_node(cluster, cluster.nodes[1], facts[1]) if f.severity.value != "ok"}
    assert found["address"].severity.value == "error" and "192.168.100.99 is on no interface" in found["address"].message


def test_doctor_finds_the_management_nic_named_for_nccl(tmp_path: Path):
    cluster, facts, check_node, _ = _duo(tmp_path)
    node = cluster.nodes[0]
    object.__setattr__(node, "address", "192.168.1.50")
    found = {f.code: f for f in check_node(cluster, node, facts[0]) if f.severity.value != "ok"}
    assert found["address"].severity.value == "warning" and "holds the default route" in found["address"].message
    assert found["NCCL_SOCKET_IFNAME"].severity.value == "error" and "is on enP7s7" in found["NCCL_SOCKET_IFNAME"].message


def test_doctors_connector_reports_a_refused_connection_without_nc(tmp_path: Path):
    """Engine images have python3 and no nc: the connector's python3 fallback must fail when the connect does."""
    import os
    import socket
    import subprocess
    import sys

    from generator.cluster.reach import _CONNECT

    (tmp_path / "python3").symlink_to(sys.executable)  # PATH holds python3 only: no nc, no tail
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    open_port = listening.getsockname()[1]
    spare = socket.socket()
    spare.bind(("127.0.0.1", 0))
    closed = spare.getsockname()[1]
    spare.close()
    try:
        done = subprocess.run(["/bin/sh", "-c", _CONNECT], capture_output=True, text=True, timeout=30, env={
            "PATH": str(tmp_path), "TARGETS": f"127.0.0.1:{open_port} 127.0.0.1:{closed}",
            "WAIT": "2", "HOME": os.environ.get("HOME", "/")})
    finally:
        listening.close()
    assert sorted(done.stdout.splitlines()) == sorted([f"OK 127.0.0.1:{open_port}",
                                                       f"FAIL 127.0.0.1:{closed} [Errno 111] Connection refused"])


def test_a_docker_20_10_server_error_is_shown_as_text(monkeypatch):
    """Docker CLI 20.10's `docker info --format json` exits 0 with ServerErrors, a list of lines ending in \\r\\n:
    doctor says the text, never a Python list."""
    from generator.cluster.probe import read
    from generator.deploy.findings import CONTEXT_UNREACHABLE

    answer = {"ServerErrors": ["error during connect: Get \"http://docker.example/v1.24/info\": ssh: handshake "
                               "failed\r\n"]}
    monkeypatch.setattr(read.Docker, "info", lambda self, timeout=10.0: answer)
    with pytest.raises(read.ProbeError) as raised:
        read.gather("spark1", timeout=5)
    message = str(raised.value)
    assert message == ("context 'spark1' does not answer: error during connect: Get \"http://docker.example/v1.24/"
                       "info\": ssh: handshake failed"), message
    assert raised.value.code == CONTEXT_UNREACHABLE
