"""A "worker process" of vLLM's Ray executor, as a real Ray task on one node (the lab's stand-in for the
RayWorkerWrapper actor and its update_environment_variables).

Ray starts it in a worker process of that node's raylet, whose environment is the node's `ray start`'s; the
driver's copied variables are applied over it as vLLM's worker does, and the result is written to WORKER_ENV in
that node's container (and printed: Ray forwards a worker's output to the driver's log), so a test can see what a
real worker on that node would run with.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

WORKER_ENV = Path("/tmp/vllm/worker-env.json")
FABRIC_ENV = ("NCCL_", "GLOO_", "VLLM_HOST_IP", "MASTER_ADDR")


def worker_process(update: dict[str, str], rank: int) -> list[str]:
    """utils.update_environment_variables of vLLM (CUDA_VISIBLE_DEVICES is replaced without a warning). Returns
    its warnings, which the driver logs too: Ray forwards a remote worker's output to the driver only when that
    node's log monitor gets to it, too late or never for a test to rely on."""
    said = []
    if "CUDA_VISIBLE_DEVICES" in update:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    for name, value in update.items():
        if name in os.environ and os.environ[name] != value:
            said.append(f"worker {rank}: Overwriting environment variable {name} from '{os.environ[name]}' to "
                        f"'{value}'")
            print(f"[vllm] {said[-1]}", flush=True)
        os.environ[name] = value
    env = dict(os.environ)
    WORKER_ENV.parent.mkdir(parents=True, exist_ok=True)
    WORKER_ENV.write_text(json.dumps(env, indent=1, sort_keys=True))
    for name in sorted(env):
        if name.startswith(FABRIC_ENV):
            print(f"[vllm] worker {rank} env: {name}={env[name]}", flush=True)
    return said
