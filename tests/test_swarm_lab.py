"""Issue 6 acceptance, through the real lab: Swarm setup and stacks side by side; images on every node."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from lab import IMAGE, Lab
from helpers.deploylab import SERVED, containers, models, put_model, run, vllm_recipe

pytestmark = pytest.mark.lab


@pytest.fixture
def swarm_project(tmp_path: Path, clean_lab: Lab):
    lab = clean_lab
    (tmp_path / "recipes" / "pair").mkdir(parents=True)
    (tmp_path / "recipes" / "pair" / "recipe.toml").write_text(vllm_recipe(2))
    (tmp_path / "recipes" / "solo").mkdir()
    (tmp_path / "recipes" / "solo" / "recipe.toml").write_text(
        vllm_recipe(1).replace("required_nodes = 1", 'required_nodes = 1\nnodes = ["spark3"]'))
    lab.write_cluster(tmp_path / "cluster.toml", lab.nodes[:3])
    put_model(lab, lab.nodes[:3])
    run(lab, tmp_path, "build", check=True)
    yield tmp_path
    for rid in ("pair", "solo"):
        run(lab, tmp_path, "down", "--swarm", rid)
    lab.leave_swarm()


def tasks_gone(lab: Lab, stack: str) -> bool:
    out = lab.docker(lab.nodes[0], "service", "ls", "--filter", f"label=com.docker.stack.namespace={stack}",
                     "-q").stdout
    return not out.strip()


def test_swarm_setup_then_two_stacks_side_by_side(swarm_project: Path, clean_lab: Lab):
    lab, root = clean_lab, swarm_project
    # No swarm yet: setup says how to make one, and --init makes it; running it again changes nothing.
    first = run(lab, root, "swarm", "setup")
    assert first.returncode == 1 and "swarm init --advertise-addr" in first.stderr
    made = run(lab, root, "swarm", "setup", "--init")
    assert made.returncode == 0, made.stderr
    again = run(lab, root, "swarm", "setup")
    assert again.returncode == 0, again.stderr
    for node in lab.nodes[:3]:
        node_id = lab.docker(node, "info", "--format", "{{.Swarm.NodeID}}").stdout.strip()
        spec = json.loads(lab.docker(lab.nodes[0], "node", "inspect", node_id).stdout)[0]
        assert spec["Spec"]["Labels"]["recipegen.node"] == node.name
        assert node.gpu_id in again.stdout  # the NVIDIA_GPU generic resource each node advertises

    pair = run(lab, root, "up", "--swarm", "pair", "--timeout", "120")
    assert pair.returncode == 0, pair.stderr
    solo = run(lab, root, "up", "--swarm", "solo", "--timeout", "120")
    assert solo.returncode == 0, solo.stderr
    assert SERVED in models(f"http://{lab.nodes[0].address}:8000")
    assert SERVED in models(f"http://{lab.nodes[2].address}:8000")

    # Each service ran where its placement said, with the GPU as a generic resource and shm as tmpfs.
    for node, stack, service in ((lab.nodes[0], "pair", "spark1"), (lab.nodes[1], "pair", "spark2"),
                                 (lab.nodes[2], "solo", "spark3")):
        ids = lab.docker(node, "ps", "-q", "--filter", f"label=com.docker.swarm.service.name={stack}_{service}"
                         ).stdout.split()
        assert len(ids) == 1, f"{stack}_{service} is not running on {node.name}"
        info = json.loads(lab.docker(node, "inspect", ids[0]).stdout)[0]
        env = dict(e.split("=", 1) for e in info["Config"]["Env"])
        assert env["DOCKER_RESOURCE_NVIDIA_GPU"] == node.gpu_id
        assert any(m["Target"] == "/dev/shm" and m["Type"] == "tmpfs" for m in info["HostConfig"]["Mounts"])

    ps = run(lab, root, "ps", "--swarm", "pair", check=True).stdout
    assert ps.count("running") == 2

    # A third recipe claiming a node already used by a stack is refused before anything is deployed.
    (root / "recipes" / "clash").mkdir()
    (root / "recipes" / "clash" / "recipe.toml").write_text(
        vllm_recipe(1).replace("required_nodes = 1", 'required_nodes = 1\nnodes = ["spark2"]'))
    run(lab, root, "build", check=True)
    clash = run(lab, root, "up", "--swarm", "clash", "--timeout", "30")
    assert clash.returncode == 1
    assert "spark2: preflight" in clash.stderr and "pair" in clash.stderr
    assert tasks_gone(lab, "clash")

    for rid in ("pair", "solo"):
        assert run(lab, root, "down", "--swarm", rid).returncode == 0
    deadline = time.monotonic() + 30
    while not (tasks_gone(lab, "pair") and tasks_gone(lab, "solo")):
        assert time.monotonic() < deadline, "stacks were not removed"
        time.sleep(0.5)


def test_swarm_failure_shows_each_ranks_log_and_down_returns_with_nothing_left(swarm_project: Path, clean_lab: Lab):
    lab, root = clean_lab, swarm_project
    lab.init_swarm(lab.nodes[:3])
    (root / "recipes" / "dies").mkdir()
    (root / "recipes" / "dies" / "recipe.toml").write_text(vllm_recipe(2, env={"LAB_FAIL_JOIN": "injected by the test"}))
    run(lab, root, "build", check=True)
    up = run(lab, root, "up", "--swarm", "dies", "--timeout", "60")
    assert up.returncode == 1
    assert "up failed: rank on spark2" in up.stderr
    assert "spark2 | " in up.stderr and "injected by the test" in up.stderr  # the task's own last lines
    assert "spark1 | " in up.stderr
    # The cleanup waited: not a task container of the failed stack is left when up returns.
    assert all(containers(lab, n, "dies") == [] for n in lab.nodes)

    assert run(lab, root, "up", "--swarm", "pair", "--timeout", "120").returncode == 0
    down = run(lab, root, "down", "--swarm", "pair")
    assert down.returncode == 0, down.stderr
    assert "pair: nothing of it runs on any node" in down.stdout
    assert all(containers(lab, n, "pair") == [] for n in lab.nodes)  # at once: down returned after they went


def test_images_copies_to_nodes_missing_it_and_then_copies_nothing(tmp_path: Path, clean_lab: Lab):
    lab = clean_lab
    image = "lab-org/only-on-one:1"
    lab.docker(lab.nodes[0], "tag", IMAGE, image)
    (tmp_path / "recipes" / "img").mkdir(parents=True)
    (tmp_path / "recipes" / "img" / "recipe.toml").write_text(
        vllm_recipe(3).replace(f'docker_image = "{IMAGE}"', f'docker_image = "{image}"'))
    lab.write_cluster(tmp_path / "cluster.toml", lab.nodes[:3])
    run(lab, tmp_path, "build", check=True)
    try:
        first = run(lab, tmp_path, "images", "img", timeout=300)
        assert first.returncode == 0, first.stderr
        assert "spark2: copied from spark1" in first.stdout and "spark3: copied from spark1" in first.stdout
        ids = {lab.docker(n, "image", "inspect", "--format", "{{.Id}}", image).stdout.strip() for n in lab.nodes[:3]}
        assert len(ids) == 1
        second = run(lab, tmp_path, "images", "img", check=True)
        assert "copied" not in second.stdout and second.stdout.count(": present") == 3
    finally:
        for node in lab.nodes[:3]:
            lab.docker(node, "rmi", image, check=False)
