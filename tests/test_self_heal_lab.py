"""Issue 35 with scripted failures, through the real lab: the stand-in engine where a failure must be made to order
(a rank that fails at every boot stops at its bound, and `ps` names it), and a real Ray whose killed worker brings
the group back. The real vLLM's own restarts (a killed worker, a killed head, each node rebooted, `down` staying
down) are in test_real_engine_lab.py, on its one boot."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from lab import Lab
from helpers.deploylab import SERVED, containers, models, project, run, vllm_recipe  # noqa: F401 - project: the fixture
from helpers.raylab import HEAD_ONLY, ray_project

pytestmark = pytest.mark.lab


def state(lab: Lab, node, recipe: str) -> dict:
    row = containers(lab, node, recipe)[0]
    return json.loads(lab.docker(node, "inspect", row["ID"]).stdout)[0]["State"]


def test_a_rank_that_fails_every_boot_stops_at_its_bound_and_ps_names_it(project, clean_lab: Lab):
    lab = clean_lab
    recipe = vllm_recipe(2, env={"LAB_FAIL_JOIN": "injected by the test"}) \
        .replace('distributed_backend = "mp"\n', 'distributed_backend = "mp"\nrestart_limit = 2\nrestart_window = "10m"\n', 1)
    root = project({"crashloop": recipe}, nodes=2)
    up = run(lab, root, "up", "crashloop", "--keep", "--timeout", "60")
    assert up.returncode == 1  # up fails at the first end, and --keep leaves the group to its own restarts

    def stopped() -> bool:
        return all(state(lab, n, "crashloop")["Status"] == "exited" for n in lab.nodes[:2])

    # The worker halts on its own record (exit 0); the head, halted too, stays up to a minute to tell ranks that
    # come, and ps reads its record meanwhile. Its own exit is not waited for: the reboots below stop it.
    deadline = time.monotonic() + 120
    while True:
        ps = run(lab, root, "ps", "crashloop")
        worker = state(lab, lab.nodes[1], "crashloop")
        if worker["Status"] == "exited" and "STOPPED" in ps.stdout:
            break
        assert time.monotonic() < deadline, (worker, ps.stdout)
        time.sleep(1)
    assert worker["ExitCode"] == 0  # 0: on-failure leaves it stopped
    assert ps.returncode == 1, ps.stdout  # stopped for good: a status a script sees
    assert "STOPPED at its restart bound: 2 restarts within 600s" in ps.stdout, ps.stdout
    assert "rank 1 (spark2)" in ps.stdout and "injected by the test" in ps.stdout
    # Stopped for good after each node reboots, the halted head's too (its SIGTERM ends the telling with exit 0):
    # exit 0 is not restarted, and a watch started anyway would remember.
    started = {n.name: state(lab, n, "crashloop")["StartedAt"] for n in lab.nodes[:2]}
    for node in lab.nodes[:2]:
        lab.stop_dockerd(node)
        lab.start_dockerd(node)
    time.sleep(5)
    assert stopped(), [state(lab, n, "crashloop") for n in lab.nodes[:2]]
    for node in lab.nodes[:2]:
        assert state(lab, node, "crashloop")["ExitCode"] == 0, node.name
    assert {n.name: state(lab, n, "crashloop")["StartedAt"] for n in lab.nodes[:2]} == started  # never started again


def models_answer(lab: Lab) -> bool:
    try:
        return SERVED in models(f"http://{lab.nodes[0].address}:8000")
    except OSError:
        return False


def test_a_ray_recipe_whose_worker_is_killed_comes_back_serving(tmp_path: Path, ray_lab: Lab):
    """Real Ray: the worker's `ray start` (its watch's child) killed -9; every rank restarts, Ray forms again."""
    lab = ray_lab
    root = ray_project(tmp_path, lab, HEAD_ONLY)
    try:
        up = run(lab, root, "up", "ray", "--timeout", "400", timeout=500)
        assert up.returncode == 0, up.stdout + up.stderr
        _, child = lab.pids(lab.nodes[1], containers(lab, lab.nodes[1], "ray")[0]["ID"])
        started = time.monotonic()
        os.kill(child, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while models_answer(lab):
            assert time.monotonic() < deadline, "the head kept serving without its Ray worker"
            time.sleep(0.5)
        deadline = time.monotonic() + 400
        while not models_answer(lab):
            assert time.monotonic() < deadline, run(lab, root, "logs", "ray", "--tail", "30").stdout
            time.sleep(2)
        print(f"\nRay worker killed: serving again after {time.monotonic() - started:.1f}s")
        for node in lab.nodes[:2]:
            assert state(lab, node, "ray")["Running"], node.name
    finally:
        down = run(lab, root, "down", "ray", timeout=300)
    assert down.returncode == 0, down.stderr
