"""What each engine needs on each rank: the flags the compiler owns and how ranks are wired together.

One place knows vLLM's and SGLang's flag spellings; the planner, the lint rules and `explain` ask it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from generator.engines import rayoptions
from generator.resolve.argwords import merge_args
from generator.resolve.model import ENGINE_DEFAULT_PORT, Arg, Cluster, FlagGroup, Node, Origin, Recipe

# Flags the compiler writes itself (all spellings the engine accepts); a recipe setting one is an error.
OWNED_FLAGS = {
    "vllm": {
        "--model": "the model comes from `model`",
        "--tensor-parallel-size": "set `tensor_parallel_size`", "-tp": "set `tensor_parallel_size`",
        "--pipeline-parallel-size": "set `pipeline_parallel_size`", "-pp": "set `pipeline_parallel_size`",
        "--distributed-executor-backend": "set `distributed_backend`",
        "--nnodes": "rank wiring comes from `required_nodes` and the cluster",
        "-n": "rank wiring comes from `required_nodes` and the cluster",
        "--node-rank": "the compiler gives each node its rank", "-r": "the compiler gives each node its rank",
        "--master-addr": "the head's fabric address comes from the cluster",
        "--master-port": "set `master_port` in the cluster",
        "--headless": "the compiler makes every worker headless",
    },
    "sglang": {
        "--model-path": "the model comes from `model`", "--model": "the model comes from `model`",
        "--tp": "set `tensor_parallel_size`", "--tp-size": "set `tensor_parallel_size`",
        "--tensor-parallel-size": "set `tensor_parallel_size`",
        "--pp": "set `pipeline_parallel_size`", "--pp-size": "set `pipeline_parallel_size`",
        "--pipeline-parallel-size": "set `pipeline_parallel_size`",
        "--dist-init-addr": "the head's fabric address comes from the cluster",
        "--nccl-init-addr": "the head's fabric address comes from the cluster",
        "--nnodes": "rank wiring comes from `required_nodes` and the cluster",
        "--node-rank": "the compiler gives each node its rank",
    },
}
# `ray start` options the compiler writes itself (the head's port and address, each node's own address).
OWNED_RAY_FLAGS = {
    "--head": "the compiler starts the head on the first node",
    "--address": "workers join the head's fabric address from the cluster",
    "--port": "set `ray_port` in the cluster",
    "--node-ip-address": "each node's fabric address comes from the cluster",
    "--block": "the compiler decides which `ray start` blocks",
}
# Environment the compiler sets per rank.
OWNED_ENV = ("VLLM_HOST_IP", "MASTER_ADDR", "MASTER_PORT", "RAY_NODE_IP_ADDRESS", "RAY_OVERRIDE_NODE_IP_ADDRESS")
RAY_ENV = ("RAY_NODE_IP_ADDRESS", "RAY_OVERRIDE_NODE_IP_ADDRESS")  # of OWNED_ENV, set only on Ray ranks


@dataclass(frozen=True)
class RankCommand:
    """The argv a rank runs; `compiler_words` are the words the compiler added (for `explain`).
    `ray_head` is the `ray start --head` a Ray head runs before the engine (and waits for its workers);
    `ray_worker` is the (host, port) of the head a Ray worker's `ray start` joins."""

    argv: tuple[str, ...]
    compiler_words: frozenset[int]
    ray_head: tuple[str, ...] | None = None
    ray_worker: tuple[str, int] | None = None


def last_group(recipe: Recipe, *names: str) -> FlagGroup | None:
    """The last of the recipe's flags spelt one of `names`: the one argparse keeps."""
    found = None
    for group in recipe.flag_groups:
        if group.flag in names:
            found = group
    return found


def flag_value(recipe: Recipe, *names: str) -> str | None:
    """The value of the last flag spelt one of `names`, e.g. `--port` (None: not given, or given no value)."""
    group = last_group(recipe, *names)
    return group.values[0] if group is not None and group.values else None


MEMORY_FRACTION = {"vllm": "--gpu-memory-utilization", "sglang": "--mem-fraction-static"}


def memory_fraction(recipe: Recipe) -> tuple[FlagGroup | None, float | None]:
    """The engine's share of the GPU's memory flag and its number as the engine reads it (argparse's
    `type=float`: `0.9`, `9e-1`, also `nan`, which its range check refuses); None where float() refuses the word
    (flag-value's finding) or the flag is not given."""
    group = last_group(recipe, MEMORY_FRACTION[recipe.engine])
    try:
        return group, float(group.values[0]) if group is not None and group.values else None
    except ValueError:
        return group, None


def port_number(word: str) -> int | None:
    """A port as the engines read one (argparse's `type=int`, so Python's int(): `+4000`, ` 4000` and `9_000` are
    numbers, `²` is not although str.isdigit() says so), or None when it is no number from 1 to 65535."""
    try:
        number = int(word)
    except ValueError:  # also a string of more than 4300 digits
        return None
    return number if 1 <= number <= 65535 else None


def port_problem(word: str) -> str | None:
    """Why the engine, or the socket it binds, refuses `word` as a port (flag-value's finding), or None."""
    if port_number(word) is not None:
        return None
    try:
        int(word)
    except ValueError:
        return f"takes a port number, not '{word[:40]}'"
    return f"'{word[:40]}' is not a port: a port is a number from 1 to 65535"


def serve_port(recipe: Recipe) -> int:
    """The engine's API port: its last `--port`, else the engine's default (a bad `--port` is flag-value's error,
    which stops the build before anything reads this)."""
    value = flag_value(recipe, "--port")
    number = port_number(value) if value is not None else None
    return number if number is not None else ENGINE_DEFAULT_PORT[recipe.engine]


def served_model_name(recipe: Recipe) -> str:
    return flag_value(recipe, "--served-model-name") or recipe.model


def served_names(recipe: Recipe) -> tuple[tuple[str, Origin], ...]:
    """Every name the engine answers to, with where it was written: the values of the last
    `--served-model-name` (vLLM takes several, its aliases; SGLang one), else the model itself."""
    found: tuple[tuple[str, Origin], ...] = ()
    for group in recipe.flag_groups:
        if group.flag == "--served-model-name" and group.values:
            inline = "=" in group.args[0].word
            words = group.args if inline else group.args[1:]
            found = tuple((value, arg.origin) for value, arg in zip(group.values, words))
    return found or ((recipe.model, recipe.origins.get("model", recipe.document.origin("recipe", ()))),)


# Flags naming a draft model that must be on every node too: vLLM's JSON config (and its older flag), SGLang's.
_DRAFT_MODEL_FLAGS = ("--speculative-model", "--speculative-draft-model-path", "--speculative-draft")


def draft_models(recipe: Recipe) -> tuple[str, ...]:
    """Models speculative decoding loads beside the main one (a draft model, an EAGLE head), each named once.
    MTP and n-gram configs name none (`method` without `model`, or a model equal to the main one)."""
    found: list[str] = []
    for group in recipe.flag_groups:
        if not group.values:
            continue
        if group.flag == "--speculative-config":
            try:
                config = json.loads(group.values[0])
            except ValueError:
                continue  # the bad-json rule reports it
            model = config.get("model") if isinstance(config, dict) else None
            if isinstance(model, str) and model:
                found.append(model)
        elif group.flag in _DRAFT_MODEL_FLAGS:
            found.append(group.values[0])
    return tuple(m for m in dict.fromkeys(found) if m != recipe.model)


def rank_command(recipe: Recipe, cluster: Cluster, nodes: tuple[Node, ...], rank: int) -> RankCommand:
    head, node = nodes[0], nodes[rank]
    multi = recipe.required_nodes > 1
    user = [a.word for a in recipe.args]
    if recipe.engine == "sglang":
        return _sglang(recipe, cluster, rank, head, multi, user)
    if recipe.distributed_backend == "ray":
        return _vllm_ray(recipe, cluster, rank, head, node, multi, user)
    owned = [recipe.model, "--tensor-parallel-size", str(recipe.tensor_parallel_size),
             "--pipeline-parallel-size", str(recipe.pipeline_parallel_size)]
    if multi:
        owned += ["--nnodes", str(recipe.required_nodes), "--node-rank", str(rank),
                  "--master-addr", head.address, "--master-port", str(cluster.master_port)]
        if rank > 0:
            owned.append("--headless")
    return _assemble(recipe.entrypoint, owned, user)


def ray_options(recipe: Recipe, cluster: Cluster) -> tuple[Arg, ...]:
    """The cluster's `ray_args` with the recipe's over them, flag by flag."""
    return merge_args(cluster.ray_args, recipe.ray_args, set())


def _vllm_ray(recipe: Recipe, cluster: Cluster, rank: int, head: Node, node: Node, multi: bool,
              user: list[str]) -> RankCommand:
    serve = [recipe.model, "--tensor-parallel-size", str(recipe.tensor_parallel_size),
             "--pipeline-parallel-size", str(recipe.pipeline_parallel_size), "--distributed-executor-backend", "ray"]
    if not multi:  # vLLM starts a local Ray by itself
        return _assemble(recipe.entrypoint, serve, user)
    options = ray_options(recipe, cluster)
    if rank > 0:  # a worker's `ray start` aborts on a head-only option (`--include-dashboard=false` ...)
        join = ("ray", "start", "--block", f"--address={head.address}:{cluster.ray_port}",
                f"--node-ip-address={node.address}", *(a.word for a in rayoptions.for_worker(options)))
        return RankCommand(join, frozenset(range(len(join))), ray_worker=(head.address, cluster.ray_port))
    start = ("ray", "start", "--head", f"--port={cluster.ray_port}", f"--node-ip-address={head.address}",
             *(a.word for a in options))
    engine = _assemble(recipe.entrypoint, serve, user)
    return RankCommand(engine.argv, engine.compiler_words, ray_head=start)


def _sglang(recipe: Recipe, cluster: Cluster, rank: int, head: Node, multi: bool, user: list[str]) -> RankCommand:
    # --tp-size is the flag's name; `--tp` works only as an argparse abbreviation of it.
    owned = ["--model-path", recipe.model, "--tp-size", str(recipe.tensor_parallel_size)]
    if recipe.pipeline_parallel_size > 1:
        owned += ["--pp-size", str(recipe.pipeline_parallel_size)]
    if multi:
        owned += ["--dist-init-addr", f"{head.address}:{cluster.master_port}", "--nnodes",
                  str(recipe.required_nodes), "--node-rank", str(rank)]
    if flag_value(recipe, "--host") is None:  # SGLang listens on 127.0.0.1 by default: unreachable from outside
        owned += ["--host", "0.0.0.0"]
    # SGLang serves no /metrics without it: a cluster with a metrics stack scrapes every head (docs/metrics.md).
    if rank == 0 and cluster.metrics is not None and not any(g.flag == "--enable-metrics" for g in recipe.flag_groups):
        owned.append("--enable-metrics")
    return _assemble(recipe.entrypoint, owned, user)


def _assemble(entrypoint: tuple[str, ...], owned: list[str], user: list[str]) -> RankCommand:
    argv = (*entrypoint, *owned, *user)
    start = len(entrypoint)
    return RankCommand(argv, frozenset(range(start, start + len(owned))))


def rank_env(recipe: Recipe, cluster: Cluster, nodes: tuple[Node, ...], rank: int) -> dict[str, str]:
    """Variables a rank needs to find itself and its head."""
    node = nodes[rank]
    env: dict[str, str] = {}
    if recipe.engine == "vllm":
        env["VLLM_HOST_IP"] = node.address
    if recipe.required_nodes > 1:
        env["MASTER_ADDR"] = nodes[0].address
        env["MASTER_PORT"] = str(cluster.master_port)
        if recipe.engine == "vllm" and recipe.distributed_backend == "ray":
            for name in RAY_ENV:  # Ray must register each node under its fabric address, not the first NIC's
                env[name] = node.address
    return env
