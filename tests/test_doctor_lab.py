"""`recipegen cluster probe` and `recipegen doctor` against the lab, with Spark-like interface layouts.

The module gives the session lab's first three nodes a fabric of their own, on top of the lab's eth0 (which
becomes the "management" NIC: it gets a default route, to an address nobody has, so nothing leaves the lab):

    spark1  enp1s0f0np0    192.168.100.11/24  --- cable (veth) ---  spark2  enP2p1s0f0np0  192.168.100.12/24
    spark3  enp1s0f0np0    192.168.100.13/24  cabled to nothing (its veth peer stays in its own namespace)

Everything added lives inside the nodes' namespaces and is removed at the end of the module (and would go with
the namespaces anyway).
"""

from __future__ import annotations

import os
import subprocess
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from lab import IMAGE, LAB_MEMLOCK, Lab, Node

pytestmark = pytest.mark.lab

FABRIC = "192.168.100"
OTHER_SUBNET = "192.168.101"
NAMES = {1: "enp1s0f0np0", 2: "enP2p1s0f0np0", 3: "enp1s0f0np0"}
MODEL = "org/model"


def ns(node: Node, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "-n", node.netns, *args], capture_output=True, text=True, check=check)


def fabric_address(node: Node) -> str:
    return f"{FABRIC}.{10 + node.index}"


@pytest.fixture(scope="module")
def fabric(lab: Lab):
    """spark1 <-> spark2 cabled, spark3 isolated; eth0 holds a default route (management)."""
    lab.reset()
    n1, n2, n3 = lab.nodes[:3]
    gone = str(lab.subnet.network_address + 254)  # nobody has it: the default route leads nowhere
    made: list[tuple[Node, str]] = []
    try:
        subprocess.run(["ip", "link", "add", f"{lab.tag}f1", "type", "veth", "peer", "name", f"{lab.tag}f2"],
                       check=True)
        subprocess.run(["ip", "link", "set", f"{lab.tag}f1", "netns", n1.netns], check=True)
        subprocess.run(["ip", "link", "set", f"{lab.tag}f2", "netns", n2.netns], check=True)
        ns(n1, "link", "set", f"{lab.tag}f1", "name", NAMES[1])
        ns(n2, "link", "set", f"{lab.tag}f2", "name", NAMES[2])
        made += [(n1, NAMES[1]), (n2, NAMES[2])]
        ns(n3, "link", "add", NAMES[3], "type", "veth", "peer", "name", "fabpeer")
        made.append((n3, NAMES[3]))
        ns(n3, "link", "set", "fabpeer", "up")
        for node in (n1, n2, n3):
            ns(node, "addr", "add", f"{fabric_address(node)}/24", "dev", NAMES[node.index])
            ns(node, "link", "set", NAMES[node.index], "mtu", "9000", "up")
            ns(node, "route", "add", "default", "via", gone, "dev", "eth0")
        yield lab
    finally:
        for node, name in made:
            ns(node, "link", "del", name, check=False)
        for node in (n1, n2, n3):
            ns(node, "route", "del", "default", check=False)
        lab.remove_containers(lab.nodes[:3])


def recipegen(lab: Lab, *args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["recipegen", *args], capture_output=True, text=True, env=lab.env, cwd=cwd,
                          timeout=timeout)


def cluster_file(path: Path, lab: Lab, nodes: list[Node], addresses: dict[str, str] | None = None,
                 ifnames: dict[str, str] | None = None) -> Path:
    addresses = addresses or {}
    ifnames = ifnames or {}
    lines = ["#:schema ./schema/cluster.schema.json", 'name = "labfabric"', 'user = "root"', 'gpu = "nvidia"',
             "rdma = false", "", "[ulimits]", f"memlock = {LAB_MEMLOCK}", "", "[env]",
             'NCCL_IB_DISABLE = "1"']
    for node in nodes:
        lines += ["", "[[nodes]]", f'name = "{node.name}"',
                  f'address = "{addresses.get(node.name, fabric_address(node))}"',
                  f'context = "{node.context}"', f'ssh_host = "{node.address}"', "[nodes.env]",
                  f'NCCL_SOCKET_IFNAME = "{ifnames.get(node.name, NAMES[node.index])}"']
    path.write_text("\n".join(lines) + "\n")
    return path


def findings(result: subprocess.CompletedProcess) -> list[list[str]]:
    """The rows of doctor's table: [node, check, level, finding] (wrapped cells joined)."""
    rows: list[list[str]] = []
    for line in result.stdout.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[0] or not rows:
            rows.append(cells)
        else:  # a wrapped continuation line
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells)]
    return rows


def errors(result: subprocess.CompletedProcess) -> list[list[str]]:
    return [r for r in findings(result) if r[2] == "error"]


# --- probe, then build, up, serve ------------------------------------------------------------------------


def test_probe_writes_a_cluster_that_deploys_and_serves(fabric: Lab, tmp_path: Path):
    lab = fabric
    n1, n2 = lab.nodes[:2]
    hf = tmp_path / "hf"
    snapshot = hf / "hub" / f"models--{MODEL.replace('/', '--')}" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    target = tmp_path / "cluster.toml"
    started = time.monotonic()
    probe = recipegen(lab, "cluster", "probe", "--context", n1.context, "--context", n2.context,
                      "--name", "labfabric", "--hf-cache", str(hf), "--write", str(target))
    probe_seconds = time.monotonic() - started
    assert probe.returncode == 0, probe.stderr
    assert probe_seconds < 30
    text = target.read_text()
    assert text.startswith("#:schema ./schema/cluster.schema.json\n")
    data = tomllib.loads(text)
    assert data["rdma"] is False and data["gpu"] == "nvidia"
    assert data["ulimits"]["memlock"] == LAB_MEMLOCK
    assert data["env"]["NCCL_IB_DISABLE"] == "1"
    assert "NCCL_SOCKET_IFNAME" not in data["env"]  # the names differ: per node
    nodes = data["nodes"]
    assert [(n["name"], n["address"], n["context"], n["ssh_host"]) for n in nodes] == [
        ("spark1", fabric_address(n1), n1.context, n1.address), ("spark2", fabric_address(n2), n2.context, n2.address)]
    for node, spec in zip((n1, n2), nodes):
        assert spec["env"] == {k: NAMES[node.index] for k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
                                                              "TP_SOCKET_IFNAME", "UCX_NET_DEVICES")}
    assert "management: eth0" in text and "no node has RDMA devices" in text
    validate = recipegen(lab, "validate", str(target))
    assert validate.returncode == 0, validate.stdout + validate.stderr
    again = recipegen(lab, "cluster", "probe", "--context", n1.context, "--write", str(target))
    assert again.returncode == 1 and "--force" in again.stderr and target.read_text() == text

    # A small vLLM recipe for that cluster: build, up (serves), down.
    recipe = tmp_path / "recipes" / "lab-tiny" / "recipe.toml"
    recipe.parent.mkdir(parents=True)
    recipe.write_text(f'engine = "vllm"\ndocker_image = "{IMAGE}"\nmodel = "{MODEL}"\nrequired_nodes = 2\n'
                      'tensor_parallel_size = 2\nshm_size = "1gb"\nargs = ["--served-model-name", "tiny"]\n'
                      '[env]\nHF_HUB_OFFLINE = "1"\n')
    build = recipegen(lab, "build", "--cluster", str(target), cwd=tmp_path)
    assert build.returncode == 0, build.stderr
    compose = (tmp_path / "out" / "lab-tiny" / "spark2" / "compose.yaml").read_text()
    assert f'NCCL_SOCKET_IFNAME: "{NAMES[2]}"' in compose
    try:
        up = recipegen(lab, "up", "lab-tiny", "--cluster", str(target), "--timeout", "90", cwd=tmp_path, timeout=180)
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"serving tiny at http://{n1.address}:8000" in up.stdout
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                f"http://{n1.address}:8000/v1/models", timeout=5) as resp:
            assert b'"tiny"' in resp.read()
        container = lab.docker(n2, "ps", "-q", "--filter", "label=com.docker.compose.project=lab-tiny").stdout.split()
        worker = lab.docker(n2, "logs", container[0])
        assert f"NCCL_SOCKET_IFNAME={NAMES[2]}" in worker.stdout + worker.stderr
        assert f"MASTER_ADDR={fabric_address(n1)}" in worker.stdout + worker.stderr
    finally:
        down = recipegen(lab, "down", "lab-tiny", "--cluster", str(target), cwd=tmp_path)
        assert down.returncode == 0, down.stderr


# --- doctor ----------------------------------------------------------------------------------------------


def test_doctor_passes_a_good_cluster(fabric: Lab, tmp_path: Path):
    lab = fabric
    path = cluster_file(tmp_path / "cluster.toml", lab, lab.nodes[:2])
    result = recipegen(lab, "doctor", "--cluster", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    rows = findings(result)
    assert any(r[1] == "reach" and r[2] == "ok" and "reaches spark1" in r[3] for r in rows)
    assert any(r[1] == "subnet" and r[2] == "ok" for r in rows)
    for node in lab.nodes[:2]:  # the lab's dockerds run on this machine's kernel, and see its memory
        assert [node.name, "kernel", "ok", os.uname().release] in [r[:4] for r in rows], rows
        memory = next(r for r in rows if r[:2] == [node.name, "memory"])
        assert memory[2] == "ok" and " GiB available of " in memory[3], memory


def test_doctor_finds_an_interface_the_node_does_not_have(fabric: Lab, tmp_path: Path):
    lab = fabric
    # spark2's port has another name than spark1's: the cluster's one name does not fit it
    path = cluster_file(tmp_path / "cluster.toml", lab, lab.nodes[:2], ifnames={"spark2": NAMES[1]})
    result = recipegen(lab, "doctor", "--cluster", str(path), "--no-reach")
    assert result.returncode == 1
    errs = errors(result)
    assert [(r[0], r[1]) for r in errs] == [("spark2", "NCCL_SOCKET_IFNAME")], result.stdout
    assert f"names {NAMES[1]}, which this node does not have" in errs[0][3]
    assert f'NCCL_SOCKET_IFNAME = "{NAMES[2]}"' in errs[0][4]  # the fix names the right one


def test_doctor_finds_an_address_on_another_subnet(fabric: Lab, tmp_path: Path):
    lab = fabric
    n2 = lab.nodes[1]
    other = f"{OTHER_SUBNET}.12"
    ns(n2, "addr", "add", f"{other}/24", "dev", NAMES[2])
    try:
        path = cluster_file(tmp_path / "cluster.toml", lab, lab.nodes[:2], addresses={"spark2": other})
        result = recipegen(lab, "doctor", "--cluster", str(path), "--no-reach")
    finally:
        ns(n2, "addr", "del", f"{other}/24", "dev", NAMES[2])
    assert result.returncode == 1
    errs = errors(result)
    assert [(r[0], r[1]) for r in errs] == [("spark2", "subnet")], result.stdout
    assert f"{other} (its interface has {OTHER_SUBNET}.0/24) is not on the subnet {FABRIC}.0/24 of spark1" in errs[0][3]


def test_doctor_finds_a_node_that_cannot_reach_the_head(fabric: Lab, tmp_path: Path):
    lab = fabric
    path = cluster_file(tmp_path / "cluster.toml", lab, [lab.nodes[0], lab.nodes[2]])
    started = time.monotonic()
    result = recipegen(lab, "doctor", "--cluster", str(path))
    assert time.monotonic() - started < 40
    assert result.returncode == 1
    errs = errors(result)
    assert ("spark3", "reach") in [(r[0], r[1]) for r in errs], result.stdout
    lost = next(r for r in errs if r[0] == "spark3")
    assert f"cannot reach spark1 (the head) at {fabric_address(lab.nodes[0])}" in lost[3]
    assert {r[1] for r in errs} == {"reach"}  # everything else about spark3 is fine
    assert lab.docker(lab.nodes[0], "ps", "-aq").stdout.strip() == ""  # the listeners are gone


def test_doctor_finds_a_context_that_does_not_answer(fabric: Lab, tmp_path: Path):
    lab = fabric
    n2 = lab.nodes[1]
    path = cluster_file(tmp_path / "cluster.toml", lab, lab.nodes[:2])
    lab.stop_dockerd(n2)
    try:
        started = time.monotonic()
        result = recipegen(lab, "doctor", "--cluster", str(path))
        elapsed = time.monotonic() - started
    finally:
        lab.start_dockerd(n2)
    assert elapsed < 30
    assert result.returncode == 1
    errs = errors(result)
    assert [(r[0], r[1]) for r in errs] == [("spark2", "context")], result.stdout
    assert f"context '{n2.context}' does not answer" in errs[0][3]
    rows = findings(result)
    assert any(r[0] == "spark1" and r[1] == "NCCL_SOCKET_IFNAME" and r[2] == "ok" for r in rows)  # spark1 checked
    assert "Traceback" not in result.stderr


def test_probe_reports_a_context_that_does_not_answer(fabric: Lab, tmp_path: Path):
    lab = fabric
    n1, n3 = lab.nodes[0], lab.nodes[2]
    lab.stop_dockerd(n3)
    try:
        result = recipegen(lab, "cluster", "probe", "--context", n1.context, "--context", n3.context,
                           "--write", str(tmp_path / "c.toml"), "--timeout", "20")
    finally:
        lab.start_dockerd(n3)
    assert result.returncode == 1
    assert f"{n3.context}: probe failed: context '{n3.context}' does not answer" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "c.toml").exists()
