"""Stand-in for `vllm serve MODEL [flags]` (the `vllm` console script): honours the flags that place
a rank and expose the API, ignores the rest (in any order, `--flag value` or `--flag=value`).

  rank 0 (multiprocessing): listen on --master-port, wait for --nnodes - 1 workers, then serve HTTP.
  rank > 0 (--headless):    join --master-addr:--master-port, or exit 1 if it is unreachable.
  --distributed-executor-backend ray: connect to the real Ray of the lab's Ray image as vLLM does
      (ray.init: the running cluster of this node, else a local one), wait until ray.nodes() shows
      tensor * pipeline live nodes, then start one "worker process" per node (a Ray task pinned to it)
      with the environment vLLM's Ray executor gives it (env_for_workers below), and serve.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from labengine.common import Log, Rendezvous, integers, join, on_stop, parse_flags, serve, stay, wait_for

log = Log("vllm")

# --- what vLLM's Ray executor copies from the driver to its workers ----------------------------------
#
# vllm/v1/executor/ray_executor.py (vllm-project/vllm 016b964c), RayDistributedExecutor._init_workers_ray:
# every worker gets {CUDA_VISIBLE_DEVICES: its node's GPU ids} plus, for each name of
# get_env_vars_to_copy(exclude_vars=WORKER_SPECIFIC_ENV_VARS,
#                      additional_vars=current_platform.additional_env_vars | ADDITIONAL_ENV_VARS)
# that is set in the DRIVER's os.environ, the driver's value; the worker applies that dict with
# os.environ.update (worker_base.update_environment_variables, which warns "Overwriting environment
# variable ..." where it replaces a different value). The worker process itself starts with the
# environment of its node's raylet, i.e. of that node's `ray start`.
#
# get_env_vars_to_copy is vllm/ray/ray_env.py. Since vllm-project/vllm PR #34383 ("Propagate
# third-party env vars to Ray workers via prefix matching", merged 2026-02) the names are the union of
#   1. vllm.envs.environment_variables (every VLLM_* name, plus the few below without the prefix),
#   2. names in the driver's os.environ starting with VLLM_, LMCACHE_, NCCL_, UCX_, HF_, HUGGING_FACE_
#      or a prefix listed (comma-separated) in VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY,
#   3. PYTHONHASHSEED and the names listed in VLLM_RAY_EXTRA_ENV_VARS_TO_COPY,
#   4. additional_vars,
# minus exclude_vars and RAY_NON_CARRY_OVER_ENV_VARS: the JSON list in
# $VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json (VLLM_CONFIG_ROOT defaults to
# ${XDG_CONFIG_HOME:-~/.config}/vllm, vllm/envs.py), read once on the driver; unparsable -> empty.
# Before that PR (e.g. vllm/ray/ray_env.py at 91b4f8fb) only 1 and 4 were copied, so NCCL_* stayed
# per node; now a driver's NCCL_SOCKET_IFNAME overwrites every worker's unless the file lists it.
WORKER_SPECIFIC_ENV_VARS = {"VLLM_HOST_IP", "VLLM_HOST_PORT", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES"}
ADDITIONAL_ENV_VARS = {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}
# The names of vllm.envs.environment_variables without a copied prefix (vllm/envs.py).
REGISTERED_NON_PREFIXED = {"MAX_JOBS", "NVCC_THREADS", "CMAKE_BUILD_TYPE", "VERBOSE", "CUDA_HOME",
                           "LD_LIBRARY_PATH", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "S3_ACCESS_KEY_ID",
                           "S3_SECRET_ACCESS_KEY", "S3_ENDPOINT_URL", "Q_SCALE_CONSTANT", "K_SCALE_CONSTANT",
                           "V_SCALE_CONSTANT"}
DEFAULT_ENV_VAR_PREFIXES = {"VLLM_", "LMCACHE_", "NCCL_", "UCX_", "HF_", "HUGGING_FACE_"}
DEFAULT_EXTRA_ENV_VARS = {"PYTHONHASHSEED"}


def config_root(env: dict[str, str]) -> str:
    """VLLM_CONFIG_ROOT as vllm/envs.py resolves it."""
    home = env.get("HOME") or os.path.expanduser("~")
    default = os.path.join(env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"), "vllm")
    return os.path.expanduser(env.get("VLLM_CONFIG_ROOT", default))


def non_carry_over(env: dict[str, str]) -> set[str]:
    path = os.path.join(config_root(env), "ray_non_carry_over_env_vars.json")
    try:
        with open(path) as f:
            names = set(json.load(f))
    except FileNotFoundError:
        return set()
    except ValueError:  # json.JSONDecodeError, or a JSON value that is not a list
        log(f"Failed to parse {path}. Using an empty set for non-carry-over env vars.")
        return set()
    log(f"RAY_NON_CARRY_OVER_ENV_VARS from config: {sorted(names)}")
    return names


def _csv(value: str) -> set[str]:
    return {word.strip() for word in value.split(",") if word.strip()}


def env_vars_to_copy(env: dict[str, str]) -> set[str]:
    """get_env_vars_to_copy of vllm/ray/ray_env.py, for the Ray executor's arguments."""
    prefixes = DEFAULT_ENV_VAR_PREFIXES | _csv(env.get("VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY", ""))
    names = {n for n in env if n.startswith("VLLM_")} | REGISTERED_NON_PREFIXED
    names |= {n for n in env if n.startswith(tuple(prefixes))}
    names |= DEFAULT_EXTRA_ENV_VARS | _csv(env.get("VLLM_RAY_EXTRA_ENV_VARS_TO_COPY", ""))
    names |= ADDITIONAL_ENV_VARS
    return names - WORKER_SPECIFIC_ENV_VARS - non_carry_over(env)


def env_for_workers(env: dict[str, str]) -> dict[str, str]:
    """The dict the driver sends every worker (their GPU ids aside): the copied names it has set."""
    names = env_vars_to_copy(env)
    copied = {n: env[n] for n in sorted(names) if n in env}
    log(f"Copying the following environment variables to workers: {sorted(copied)}")
    return copied


# --- the command ------------------------------------------------------------------------------------

BOOLEAN = {"--headless", "--trust-remote-code", "--enforce-eager"}


def _boolean(flag: str) -> bool:
    return flag in BOOLEAN or flag.endswith("-caching")  # --enable-prefix-caching and the like


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    on_stop(log)
    log.start(args)
    if not args or args[0] != "serve":
        log.die("only 'vllm serve' is supported by the lab stand-in")
    flags, positionals = parse_flags(args[1:], _boolean)
    model = flags.get("--model") or (positionals[0] if positionals else "")
    if not model:
        log.die("no model given")
    get = flags.get
    n = integers(log, port=get("--port", "8000"), nnodes=get("--nnodes", "1"), rank=get("--node-rank", "0"),
                 master_port=get("--master-port", "29501"),
                 tp=get("--tensor-parallel-size", get("-tp", "1")),
                 pp=get("--pipeline-parallel-size", get("-pp", "1")))
    host = get("--host", "0.0.0.0")
    served = get("--served-model-name") or model
    template = get("--chat-template")
    if template and ("/" in template or template.endswith(".jinja")) and not os.path.isfile(template):
        # vLLM reads a path-like --chat-template at start-up (relative to its working directory) and stops
        # when it cannot: what a chat-template mod that did not run looks like.
        log.die(f"--chat-template {template!r} looks like a file path, but it failed to be opened "
                f"(working directory {os.getcwd()})")
    if get("--distributed-executor-backend") == "ray":
        start_ray_workers(n["tp"] * n["pp"])
    elif n["rank"] > 0:
        join(log, get("--master-addr", ""), n["master_port"], f"rank {n['rank']}")
        stay()
    elif n["nnodes"] > 1:
        Rendezvous(log, n["master_port"], "/tmp/vllm/ranks").wait(n["nnodes"] - 1, "workers")
    if "--headless" in flags:
        log("headless rank 0: not serving HTTP")
        stay()
    serve(log, host, n["port"], served, "vllm", flags)


def start_ray_workers(world_size: int) -> None:
    """The Ray executor's start, on real Ray: ray.init (the cluster `ray start` left on this node, else a local
    one), until ray.nodes() shows one live node per rank (a Spark has one GPU), then one worker process per node,
    the driver's first, each a Ray task pinned to its node."""
    import logging

    import ray  # the real Ray of the lab's Ray image, as vLLM imports it
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from labengine.rayworker import worker_process

    ray.init(logging_level=logging.WARNING)  # vLLM: initialize_ray_cluster, no address: the running cluster

    def alive() -> list[dict[str, Any]]:
        return [node for node in ray.nodes() if node["Alive"]]

    if world_size > 1:
        wait_for(log, lambda: len(alive()) - 1, world_size - 1, "Ray workers")
    driver_ip = os.environ.get("VLLM_HOST_IP") or ray.util.get_node_ip_address()
    nodes = sorted(alive(), key=lambda node: (node["NodeManagerAddress"] != driver_ip,
                                              node["NodeManagerAddress"]))[:world_size]
    copied = env_for_workers(dict(os.environ))
    task = ray.remote(num_cpus=0)(worker_process)
    # CUDA_VISIBLE_DEVICES: current_platform.device_control_env_var, the node's GPU ids.
    said = ray.get([task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
                    .remote({"CUDA_VISIBLE_DEVICES": "0", **copied}, rank) for rank, node in enumerate(nodes)],
                   timeout=600)
    for line in (line for lines in said for line in lines):
        log(line)
    log(f"started {len(nodes)} Ray worker process(es)")
