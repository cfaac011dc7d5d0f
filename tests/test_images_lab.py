"""Issue 15 through the real lab: `recipegen images` copies an image that only node 1 has node to node (helper
containers of images the nodes already have, speaking each engine's API over its socket; the lab image has
python3 and no docker CLI), and a target with no image to run a receiver goes through this machine."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lab import IMAGE, Lab

pytestmark = pytest.mark.lab

TAGGED = "recipegen-lab/engine:only-on-one"  # another tag of the lab image's repository: the receivers' choice
RECIPE = f'''engine = "vllm"
docker_image = "{TAGGED}"
model = "lab-org/tiny-model"
required_nodes = 3
tensor_parallel_size = 3
distributed_backend = "mp"
shm_size = "1gb"
'''


def counters(name: str) -> int:
    stats = Path("/sys/class/net") / name / "statistics"
    return int((stats / "rx_bytes").read_text()) + int((stats / "tx_bytes").read_text())


@pytest.fixture
def project(tmp_path: Path, clean_lab: Lab):
    """The image exists on spark1 alone: the lab image with a 16 MiB layer of its own (so its id is not the
    lab image's and its bytes are worth counting)."""
    lab = clean_lab
    context = tmp_path / "image"
    context.mkdir()
    (context / "blob").write_bytes(subprocess.run(["head", "-c", str(16 << 20), "/dev/urandom"],
                                                  capture_output=True, check=True).stdout)
    (context / "Dockerfile").write_text(f"FROM {IMAGE}\nCOPY blob /blob\n")
    subprocess.run(["docker", "--context", lab.nodes[0].context, "build", "-q", "-t", TAGGED, str(context)],
                   env={**lab.env, "DOCKER_BUILDKIT": "0"}, check=True, capture_output=True)
    (tmp_path / "recipes" / "img").mkdir(parents=True)
    (tmp_path / "recipes" / "img" / "recipe.toml").write_text(RECIPE)
    lab.write_cluster(tmp_path / "cluster.toml", lab.nodes[:3])
    assert recipegen(lab, tmp_path, "build").returncode == 0
    yield tmp_path
    for node in lab.nodes[:3]:
        lab.docker(node, "rmi", TAGGED, check=False)


def recipegen(lab: Lab, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["recipegen", *args], cwd=cwd, env=lab.env, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def image_ids(lab: Lab) -> list[str]:
    return [lab.docker(n, "image", "inspect", "--format", "{{.Id}}", TAGGED, check=False).stdout.strip()
            for n in lab.nodes[:3]]


def helpers_left(lab: Lab) -> list[str]:
    return [line for node in lab.nodes[:3] for line in
            lab.docker(node, "ps", "-a", "-q", "--filter", "label=dev.recipegen.transfer").stdout.split()]


def test_an_image_on_one_node_reaches_the_others_node_to_node(project: Path, clean_lab: Lab) -> None:
    lab = clean_lab
    a = lab.nodes[0]
    bridge, veth = counters(lab.bridge), counters(a.veth_host)
    proc = recipegen(lab, project, "images", "img")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = image_ids(lab)
    assert ids[0].startswith("sha256:") and ids == [ids[0]] * 3
    for node in ("spark2", "spark3"):
        assert f"{node}: copied from spark1 node to node (helper image {IMAGE})" in proc.stdout, proc.stdout
    assert "through this machine" not in proc.stdout
    # The image left spark1 by its veth (to spark2, the chain's first link); this machine's end of the bridge
    # carried next to none of it (docker talks to the nodes over unix sockets).
    assert counters(a.veth_host) - veth > 16 << 20
    assert counters(lab.bridge) - bridge < (16 << 20) // 20
    assert helpers_left(lab) == []
    again = recipegen(lab, project, "images", "img")
    assert again.returncode == 0 and "copied" not in again.stdout and again.stdout.count(": present") == 3


def test_a_target_without_a_python3_image_goes_through_this_machine(project: Path, clean_lab: Lab) -> None:
    """spark3 holds no image at all (the lab image removed for the test): nothing there can run a receiver, so it
    gets its copy through this machine, saying why, while spark2 gets its own node to node."""
    lab = clean_lab
    c = lab.nodes[2]
    held = lab.docker(c, "images", "-q", "--no-trunc").stdout.split()
    archive = lab.docker(lab.nodes[0], "save", IMAGE, input=b"", timeout=120).stdout  # to put it back after
    try:
        for image_id in dict.fromkeys(held):
            lab.docker(c, "rmi", "-f", image_id)
        proc = recipegen(lab, project, "images", "img")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        ids = image_ids(lab)
        assert ids == [ids[0]] * 3
        assert f"spark2: copied from spark1 node to node (helper image {IMAGE})" in proc.stdout, proc.stdout
        assert ("spark3: copied from spark1 through this machine (spark3 cannot receive node to node: it has no "
                "image to run a helper)") in proc.stdout, proc.stdout
        assert helpers_left(lab) == []
    finally:
        lab.docker(c, "load", "-q", input=archive, timeout=120)
