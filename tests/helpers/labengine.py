"""Shared by the tests: moved from tests/test_lab_engine.py, which uses them too."""

from __future__ import annotations

import json
import time
import pytest
from lab import IMAGE, LIGHT_RAY, RAY_IMAGE, Lab, Node
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


# Two Sparks cabled back to back name their ConnectX-7 ports differently: NCCL_SOCKET_IFNAME differs per node.
IFNAMES = {"spark1": "enp1s0f0np0", "spark2": "enP2p1s0f0np0"}


WORKER_ENV = "/tmp/vllm/worker-env.json"


def worker_env(lab: Lab, node: Node, container: str, timeout: float = 60) -> dict[str, str]:
    """The environment the node's Ray "worker process" got (written by its raylet), waiting for it (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        done = lab.docker(node, "exec", container, "cat", WORKER_ENV, check=False)
        if done.returncode == 0 and done.stdout.strip():
            return json.loads(done.stdout)
        if time.monotonic() > deadline:
            pytest.fail(f"{node.name}: no {WORKER_ENV} in {container} within {timeout:.0f}s: {done.stderr}")
        time.sleep(0.5)
