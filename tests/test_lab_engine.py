"""The lab's engine image is like a real one (python3 and tar, no nc or wget); its Ray image runs a real Ray, on
which the vLLM stand-in does what vLLM's Ray executor does with the cluster and the environment of its workers."""

from __future__ import annotations

import json
import time

import pytest

from lab import IMAGE, LIGHT_RAY, RAY_IMAGE, Lab, Node
from helpers.deploylab import MODEL
from helpers.labsmoke import run_detached, wait_http, wait_log
from helpers.labengine import IFNAMES, WORKER_ENV, worker_env  # noqa: F401 - moved to tests/helpers/

pytestmark = pytest.mark.lab


def sh(lab: Lab, node: Node, script: str) -> str:
    return lab.docker(node, "run", "--rm", "--network", "host", "--entrypoint", "sh", IMAGE, "-c", script).stdout


# --- the image ---------------------------------------------------------------------------------------------


def test_image_has_python3_and_tar_but_no_nc_or_wget(lab: Lab):
    tools = "python3 tar sh nc wget httpd telnet ftpget rsync curl"
    out = sh(lab, lab.nodes[0], f"for t in {tools}; do if command -v $t >/dev/null; then echo \"$t yes\"; "
                                f"else echo \"$t no\"; fi; done")
    found = dict(line.split() for line in out.splitlines())
    assert found == {"python3": "yes", "tar": "yes", "sh": "yes", "nc": "no", "wget": "no", "httpd": "no",
                     "telnet": "no", "ftpget": "no", "rsync": "no", "curl": "no"}
    # The real interpreter with its standard library (what a launcher or doctor's listener imports), not a stand-in.
    out = sh(lab, lab.nodes[0], "python3 -c 'import sys, json, socket, http.server, ssl, sqlite3, tarfile; "
                                "print(sys.prefix, sys.version_info[0])' && echo hi > /tmp/f && "
                                "tar -cf /tmp/f.tar -C /tmp f && tar -tf /tmp/f.tar")
    assert out.split() == ["/usr", "3", "f"]


# --- Ray: a real one --------------------------------------------------------------------------------------


def test_real_ray_refuses_a_head_only_option_on_a_worker(ray_lab: Lab):
    """Ray's own check, which the old stand-in lacked (it is why recipegen gives head-only options to the head
    only). Ray checks before it looks for the head: no cluster is needed to see it."""
    lab = ray_lab
    head, worker = lab.nodes[:2]
    refused = lab.docker(worker, "run", "--rm", "--network", "host", RAY_IMAGE, "ray", "start",
                         f"--address={head.address}:6380", "--include-dashboard=false", check=False, timeout=180)
    assert refused.returncode == 1
    assert "`--include-dashboard` should only be specified when starting head node with `--head`." in refused.stderr


# --- vLLM's Ray executor: what each worker's environment ends up as ------------------------------------------


def ray_pair(lab: Lab) -> tuple[Node, Node]:
    """A Ray head serving vLLM on spark1 and a Ray worker on spark2, as the compiler lays them out, each
    with its own NCCL_SOCKET_IFNAME and VLLM_HOST_IP; plus a driver-only variable on the head."""
    head, worker = lab.nodes[:2]
    serve = (f"ray start --head --port=6379 --node-ip-address={head.address} {' '.join(LIGHT_RAY)} && "
             f"exec vllm serve {MODEL} --tensor-parallel-size 1 --pipeline-parallel-size 2 --port 8002 "
             "--distributed-executor-backend ray")
    env = {"NCCL_SOCKET_IFNAME": IFNAMES["spark1"], "VLLM_HOST_IP": head.address, "VLLM_ONLY_ON_HEAD": "x",
           "GLOO_SOCKET_IFNAME": "eth0"}
    run_detached(lab, head, "ray-head", ["sh", "-c", serve], env, image=RAY_IMAGE)
    run_detached(lab, worker, "ray-worker", ["ray", "start", "--block", f"--address={head.address}:6379",
                                             f"--node-ip-address={worker.address}", *LIGHT_RAY],
                 {"NCCL_SOCKET_IFNAME": IFNAMES["spark2"], "VLLM_HOST_IP": worker.address, "GLOO_SOCKET_IFNAME": "eth0"},
                 image=RAY_IMAGE)
    wait_http(f"http://{head.address}:8002/health", timeout=240)
    return head, worker


def test_ray_executor_copies_the_drivers_env_as_vllm_does(ray_lab: Lab):
    """Without a non-carry-over file the driver's NCCL_SOCKET_IFNAME replaces the worker's (vLLM copies NCCL_*),
    VLLM_HOST_IP stays per node (worker-specific), and a driver-only VLLM_ variable reaches the worker."""
    lab = ray_lab
    head, worker = ray_pair(lab)
    on_worker = worker_env(lab, worker, "ray-worker")
    assert on_worker["NCCL_SOCKET_IFNAME"] == IFNAMES["spark1"]
    assert on_worker["VLLM_HOST_IP"] == worker.address
    assert on_worker["VLLM_ONLY_ON_HEAD"] == "x"
    assert on_worker["GLOO_SOCKET_IFNAME"] == "eth0"  # not a copied prefix: the worker's own
    # vLLM's warning, from the worker on spark2, in the driver's log (as Ray forwards a worker's output).
    wait_log(lab, head, "ray-head", "[vllm] worker 1: Overwriting environment variable NCCL_SOCKET_IFNAME", 60)
    on_head = worker_env(lab, head, "ray-head")
    assert on_head["NCCL_SOCKET_IFNAME"] == IFNAMES["spark1"] and on_head["VLLM_HOST_IP"] == head.address
    lab.remove_containers(lab.nodes[:2])


def test_ray_executor_leaves_what_the_non_carry_over_file_lists(ray_lab: Lab):
    """$VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json on the driver keeps those names per node."""
    lab = ray_lab
    head, worker = lab.nodes[:2]
    serve = (f"mkdir -p /root/.config/vllm && echo '[\"NCCL_SOCKET_IFNAME\"]' "
             "> /root/.config/vllm/ray_non_carry_over_env_vars.json && "
             f"ray start --head --port=6379 --node-ip-address={head.address} {' '.join(LIGHT_RAY)} && "
             f"exec vllm serve {MODEL} --tensor-parallel-size 2 --port 8002 --distributed-executor-backend ray")
    run_detached(lab, head, "ray-head", ["sh", "-c", serve], {"NCCL_SOCKET_IFNAME": IFNAMES["spark1"]},
                 image=RAY_IMAGE)
    run_detached(lab, worker, "ray-worker", ["ray", "start", "--block", f"--address={head.address}:6379",
                                             f"--node-ip-address={worker.address}", *LIGHT_RAY],
                 {"NCCL_SOCKET_IFNAME": IFNAMES["spark2"]}, image=RAY_IMAGE)
    wait_http(f"http://{head.address}:8002/health", timeout=240)
    assert worker_env(lab, worker, "ray-worker")["NCCL_SOCKET_IFNAME"] == IFNAMES["spark2"]
    lab.remove_containers(lab.nodes[:2])
