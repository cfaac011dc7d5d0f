"""Issue 4 acceptance, through the real lab: recipegen build -> up -> a serving head -> down, on real dockerds
in network namespaces, with real Compose v2 and docker contexts; and the faults users hit."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from lab import IMAGE, LAB_MEMLOCK, Lab
from helpers.deploylab import MODEL, SERVED, containers, models, project, put_model, run, sglang_recipe, vllm_recipe  # noqa: F401 - moved to tests/helpers/

pytestmark = pytest.mark.lab


def inspect(lab: Lab, node, recipe: str) -> dict:
    rows = containers(lab, node, recipe)
    assert len(rows) == 1, f"{node.name}: expected one container of {recipe}, got {rows}"
    return json.loads(lab.docker(node, "inspect", rows[0]["ID"]).stdout)[0]


def test_vllm_mp_two_nodes_up_serves_and_down_cleans(project, clean_lab: Lab):
    lab = clean_lab
    root = project({"vllm2": vllm_recipe(2)})
    up = run(lab, root, "up", "vllm2", "--timeout", "90")
    assert up.returncode == 0, up.stderr
    head = lab.nodes[0]
    assert f"serving {SERVED} at http://{head.address}:8000" in up.stdout
    assert SERVED in models(f"http://{head.address}:8000")

    for rank, node in enumerate(lab.nodes[:2]):
        info = inspect(lab, node, "vllm2")
        host = info["HostConfig"]
        assert host["NetworkMode"] == "host"
        assert host["ShmSize"] == 1024 ** 3
        assert [r["Driver"] for r in host["DeviceRequests"]] == ["nvidia"]
        assert host["DeviceRequests"][0]["Capabilities"] == [["gpu"]]
        assert {u["Name"]: u["Hard"] for u in host["Ulimits"]}["memlock"] == LAB_MEMLOCK
        env = dict(e.split("=", 1) for e in info["Config"]["Env"])
        assert env["NCCL_SOCKET_IFNAME"] == "eth0" and env["NCCL_IB_DISABLE"] == "1"
        assert env["VLLM_HOST_IP"] == node.address and env["MASTER_ADDR"] == head.address
        mounts = {m["Destination"]: m["Source"] for m in info["Mounts"]}
        assert mounts["/root/.cache/huggingface"] == str(node.hf_cache)
        assert mounts["/root/.cache/vllm"] == f"{node.home}/.cache/vllm"
        argv = info["Config"]["Cmd"]
        assert argv[argv.index("--node-rank") + 1] == str(rank)
        assert ("--headless" in argv) == (rank > 0)
        # the JSON value reached the engine as plain JSON, through shell words, YAML and Compose
        assert argv[argv.index("--compilation-config") + 1] == '{"cudagraph_mode": "FULL"}'
    assert containers(lab, lab.nodes[2], "vllm2") == []  # the third node is not the recipe's

    again = run(lab, root, "up", "vllm2", "--timeout", "60")  # idempotent: no second copy
    assert again.returncode == 0, again.stderr
    assert [len(containers(lab, n, "vllm2")) for n in lab.nodes[:2]] == [1, 1]

    ps = run(lab, root, "ps", "vllm2", check=True).stdout
    assert ps.count("running") == 2 and "spark1" in ps and "spark2" in ps and "uptime" in ps
    assert re.search(r"running\s*│\s*-\s*│\s*\d+[smhd]", ps), ps  # state, no healthcheck, an uptime
    logs = run(lab, root, "logs", "vllm2", check=True).stdout.splitlines()
    assert any(line.startswith("spark2 | ") and "--headless" in line for line in logs)
    assert any(line.startswith("spark1 | ") for line in logs)

    down = run(lab, root, "down", "vllm2")
    assert down.returncode == 0, down.stderr
    assert all(containers(lab, n, "vllm2") == [] for n in lab.nodes)


def test_sglang_three_nodes(project, clean_lab: Lab):
    lab = clean_lab
    root = project({"sg3": sglang_recipe(3)})
    up = run(lab, root, "up", "sg3", "--timeout", "90")
    assert up.returncode == 0, up.stderr
    assert SERVED in models(f"http://{lab.nodes[0].address}:30000")
    for rank, node in enumerate(lab.nodes[:3]):
        info = inspect(lab, node, "sg3")
        argv = info["Config"]["Cmd"]
        assert argv[argv.index("--dist-init-addr") + 1] == f"{lab.nodes[0].address}:29501"
        assert argv[argv.index("--node-rank") + 1] == str(rank)
        assert info["HostConfig"]["ShmSize"] == 2 * 1024 ** 3
        assert info["HostConfig"]["NetworkMode"] == "host"
    assert run(lab, root, "down", "sg3").returncode == 0
    assert all(containers(lab, n, "sg3") == [] for n in lab.nodes)


def test_plain_compose_files_stand_on_their_own(project, clean_lab: Lab):
    lab = clean_lab
    root = project({"plain": vllm_recipe(2, port=8011)})
    for node in lab.nodes[:2]:
        compose = root / "out" / "plain" / node.name / "compose.yaml"
        lab.docker(node, "compose", "-f", str(compose), "up", "-d", timeout=120)
    deadline = time.monotonic() + 60
    while True:
        try:
            if SERVED in models(f"http://{lab.nodes[0].address}:8011"):
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, "the head never served with plain `docker compose up`"
        time.sleep(0.5)
    for node in lab.nodes[:2]:
        lab.docker(node, "compose", "-f", str(root / "out" / "plain" / node.name / "compose.yaml"), "down",
                   timeout=120)
    assert all(containers(lab, n, "plain") == [] for n in lab.nodes)


def test_preflight_fails_on_a_dead_node_and_nothing_starts(project, clean_lab: Lab):
    lab = clean_lab
    root = project({"dead": vllm_recipe(2)})
    lab.stop_dockerd(lab.nodes[1])
    try:
        up = run(lab, root, "up", "dead", "--timeout", "30")
        assert up.returncode == 1
        assert "spark2: preflight: context" in up.stderr and "does not answer" in up.stderr
        assert "nothing was started" in up.stderr
        assert containers(lab, lab.nodes[0], "dead") == []
    finally:
        lab.start_dockerd(lab.nodes[1])


def test_preflight_names_the_node_without_the_model(project, clean_lab: Lab):
    lab = clean_lab
    root = project({"nomodel": vllm_recipe(2)})
    missing = Path(lab.nodes[1].hf_cache) / "hub" / f"models--{MODEL.replace('/', '--')}"
    subprocess.run(["rm", "-rf", str(missing)], check=True)
    up = run(lab, root, "up", "nomodel", "--timeout", "30")
    assert up.returncode == 1
    assert f"spark2: preflight: model {MODEL} is not in this node's Hugging Face cache: looked in {missing}" \
        in up.stderr
    assert "spark1: preflight" not in up.stderr
    assert containers(lab, lab.nodes[0], "nomodel") == []


def test_a_worker_that_dies_fails_up_with_its_log_and_cleans_up(project, clean_lab: Lab):
    lab = clean_lab
    root = project({"dies": vllm_recipe(2, env={"LAB_FAIL_JOIN": "injected by the test"})})
    up = run(lab, root, "up", "dies", "--timeout", "60")
    assert up.returncode == 1
    assert "up failed: rank on spark2" in up.stderr
    assert "spark2 | [vllm] error: cannot join" in up.stderr and "injected by the test" in up.stderr
    assert "spark1 | " in up.stderr  # every rank's last lines are shown
    assert all(containers(lab, n, "dies") == [] for n in lab.nodes)


def test_down_with_a_dead_node_cleans_the_rest_and_names_it(project, clean_lab: Lab):
    lab = clean_lab
    root = project({"half": vllm_recipe(2)})
    assert run(lab, root, "up", "half", "--timeout", "90").returncode == 0
    lab.stop_dockerd(lab.nodes[1])
    try:
        down = run(lab, root, "down", "half", timeout=120)
        assert down.returncode == 1
        assert "spark2: FAILED" in down.stderr and "could not clean spark2" in down.stderr
        assert "spark1: down" in down.stdout
        assert containers(lab, lab.nodes[0], "half") == []
    finally:
        lab.start_dockerd(lab.nodes[1])
    assert run(lab, root, "down", "half").returncode == 0
    assert containers(lab, lab.nodes[1], "half") == []


def test_contexts_shows_who_answers_and_creates_the_missing_ones(tmp_path: Path, clean_lab: Lab):
    lab = clean_lab
    cluster = lab.write_cluster(tmp_path / "cluster.toml", lab.nodes[:2])
    text = cluster.read_text()
    missing = f"recipegen-test-missing-{os.getpid()}"
    cluster.write_text(text.replace(f'context = "{lab.nodes[1].context}"', f'context = "{missing}"'))
    shown = run(lab, tmp_path, "contexts")
    assert shown.returncode == 1
    rows = {line.split("│")[1].strip(): line for line in shown.stdout.splitlines() if line.count("│") >= 4}
    assert "yes (engine" in rows["spark1"]
    assert "missing" in rows["spark2"]
    try:
        made = run(lab, tmp_path, "contexts", "--create", timeout=120)
        endpoint = json.loads(subprocess.run(["docker", "context", "inspect", missing], env=lab.env,
                                             capture_output=True, text=True, check=True).stdout)[0]
        assert endpoint["Endpoints"]["docker"]["Host"] == f"ssh://root@{lab.nodes[1].address}"
        assert made.returncode == 1  # created, but nothing listens for SSH in the lab: it does not answer
        assert "spark2" in made.stdout and "no:" in made.stdout
    finally:
        subprocess.run(["docker", "context", "rm", "-f", missing], env=lab.env, capture_output=True)


def test_preflight_catches_a_memlock_the_node_cannot_give(project, clean_lab: Lab):
    """The real Sparks' memlock = -1, on a host whose hard limit is 8 MiB (this sandbox): refused before start."""
    lab = clean_lab
    root = project({"locked": vllm_recipe(2)})
    cluster = root / "cluster.toml"
    cluster.write_text(cluster.read_text().replace(f"memlock = {LAB_MEMLOCK}", "memlock = -1"))
    run(lab, root, "build", check=True)
    up = run(lab, root, "up", "locked", "--timeout", "30")
    assert up.returncode == 1
    assert "spark1: preflight: ulimits cannot be applied (memlock=-1)" in up.stderr
    assert "nothing was started" in up.stderr
    assert all(containers(lab, n, "locked") == [] for n in lab.nodes)


def test_preflight_refuses_a_node_another_recipe_runs_on(project, clean_lab: Lab):
    lab = clean_lab
    root = project({"first": vllm_recipe(2),
                    "second": vllm_recipe(1, port=8001).replace("required_nodes = 1", 'required_nodes = 1\nnodes = ["spark2"]')})
    assert run(lab, root, "up", "first", "--timeout", "90").returncode == 0
    try:
        second = run(lab, root, "up", "second", "--timeout", "30")
        assert second.returncode == 1
        assert "spark2: preflight: node is busy: recipe 'first' runs here" in second.stderr
        assert containers(lab, lab.nodes[1], "second") == []
    finally:
        run(lab, root, "down", "first")
