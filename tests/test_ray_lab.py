"""Issue 23 acceptance, on real Ray (the lab's Ray image): a Ray recipe whose `ray_args` hold head-only options
serves through `recipegen up` on Compose (each worker keeping its own interface) and on Swarm, and an option a
worker's Ray refuses fails `up` at once with Ray's own error line, not after ray_join_timeout."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lab import RAY_IMAGE, Lab
from helpers.deploylab import MODEL, SERVED, models, put_model, run
from helpers.labengine import IFNAMES, worker_env
from helpers.raylab import HEAD_ONLY, ray_project, ray_recipe  # noqa: F401 - moved to tests/helpers/

pytestmark = pytest.mark.lab


def test_a_ray_recipe_with_head_only_options_serves_on_compose(tmp_path: Path, ray_lab: Lab):
    lab = ray_lab
    root = ray_project(tmp_path, lab, HEAD_ONLY)
    try:
        started = time.monotonic()
        up = run(lab, root, "up", "ray", "--timeout", "400", timeout=500)
        print(f"\nup (compose, real Ray): {time.monotonic() - started:.1f}s")
        assert up.returncode == 0, up.stdout + up.stderr
        assert models(f"http://{lab.nodes[0].address}:8000") == {SERVED}
        logs = run(lab, root, "logs", "ray", check=True).stdout
        assert "all 1 Ray worker(s) joined" in logs
        assert "should only be specified when starting head node" not in logs
        # vLLM's Ray executor copies NCCL_* from the driver: the compiler's non-carry-over file keeps each
        # worker's own interface (what each node's Ray worker process got, written by lab/engine's rayworker.py).
        for node in lab.nodes[:2]:
            container = lab.docker(node, "ps", "-q", "--filter", "label=dev.recipegen.recipe=ray").stdout.split()[0]
            env = worker_env(lab, node, container)
            assert env["VLLM_HOST_IP"] == node.address, node.name
            assert env["NCCL_SOCKET_IFNAME"] == IFNAMES[node.name], node.name
    finally:
        down = run(lab, root, "down", "ray", timeout=300)
    assert down.returncode == 0, down.stderr
    for node in lab.nodes[:2]:
        assert lab.docker(node, "ps", "-aq", "--filter", "label=dev.recipegen.recipe=ray").stdout.strip() == ""


def test_a_ray_recipe_with_head_only_options_serves_on_swarm(tmp_path: Path, ray_lab: Lab):
    lab = ray_lab
    root = ray_project(tmp_path, lab, HEAD_ONLY)
    lab.init_swarm(lab.nodes[:2])
    try:
        started = time.monotonic()
        up = run(lab, root, "up", "--swarm", "ray", "--timeout", "400", timeout=500)
        print(f"\nup (swarm, real Ray): {time.monotonic() - started:.1f}s")
        assert up.returncode == 0, up.stdout + up.stderr
        assert models(f"http://{lab.nodes[0].address}:8000") == {SERVED}
    finally:
        run(lab, root, "down", "--swarm", "ray", timeout=300)
        lab.leave_swarm()


def test_a_worker_whose_ray_start_refuses_its_options_fails_up_at_once(tmp_path: Path, ray_lab: Lab):
    """A Ray option only the worker's Ray refuses: `--labels-file` naming a file that the head's Hugging Face cache
    holds and the worker's lacks. The head starts; the worker's `ray start` aborts with Ray's own line ("The file
    at ... is not a valid YAML file") and its launcher does not retry it until ray_join_timeout (10 minutes): `up`
    fails within the test's bound, showing Ray's line and recipegen's."""
    lab = ray_lab
    labels = "/root/.cache/huggingface/ray-labels.yaml"
    root = ray_project(tmp_path, lab, [f"--labels-file={labels}"])
    (lab.nodes[0].hf_cache / "ray-labels.yaml").write_text("zone: a\n")
    started = time.monotonic()
    up = run(lab, root, "up", "ray", "--timeout", "400", timeout=500)
    took = time.monotonic() - started
    print(f"\nup (worker refuses a Ray option) failed after {took:.1f}s")
    assert up.returncode == 1
    assert f"The file at `--labels-file={labels}` is not a valid YAML file" in up.stderr, up.stderr
    assert "recipegen: `ray start` refused its options (Ray's error above): not retried" in up.stderr
    assert "trying again" not in up.stderr
    assert took < 300  # not the 10-minute join timeout
