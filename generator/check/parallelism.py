"""Lint rules over how the ranks fill the nodes' GPUs: parallel sizes against the GPUs of the nodes used, the
nodes the cluster has, the backend the engine supports, cudagraph capture with speculative decoding and the share
of the (unified) memory the engine may take."""

from __future__ import annotations

import json

from generator.check.registry import ERROR, WARNING, Findings, rule
from generator.engines.ranks import last_group, memory_fraction
from generator.resolve.model import Cluster, FlagGroup, NodeChoiceError, Recipe


def _number(group: FlagGroup | None) -> float | None:
    try:
        return float(group.values[0]) if group and group.values else None
    except ValueError:
        return None


# Data parallel replicas multiply the ranks: vLLM's and SGLang's spellings.
DATA_PARALLEL_FLAGS = {"vllm": ("--data-parallel-size", "-dp"), "sglang": ("--dp", "--dp-size", "--data-parallel-size")}


@rule("parallel-size", ERROR, "tensor x pipeline (x data) parallel size must equal the GPUs of the nodes used",
      needs_cluster=True)
def _parallel_size(recipe: Recipe, cluster: Cluster | None) -> Findings:
    gpus_per_node = cluster.gpus_per_node if cluster else 1
    world = recipe.tensor_parallel_size * recipe.pipeline_parallel_size
    dp_group = last_group(recipe, *DATA_PARALLEL_FLAGS[recipe.engine])
    dp = _number(dp_group)
    if dp is not None and dp >= 1 and dp == int(dp):
        world *= int(dp)
    gpus = recipe.required_nodes * gpus_per_node
    if world != gpus:
        keys = ("tensor_parallel_size", "pipeline_parallel_size", "required_nodes")
        candidates = [recipe.origins.get(k) for k in keys]
        origin = next((o for o in candidates if o is not None and o.file), recipe.document.origin("recipe", ()))
        product = "tensor_parallel_size x pipeline_parallel_size"
        if dp_group is not None:
            product += f" x {dp_group.flag}"
        yield (origin, "tensor_parallel_size",
               f"{product} = {world}, but {recipe.required_nodes} node(s) x "
               f"{gpus_per_node} GPU = {gpus}: every GPU of the nodes used must hold a rank")


@rule("too-many-nodes", ERROR, "the recipe needs more nodes than the cluster has, or names nodes it lacks",
      needs_cluster=True)
def _too_many_nodes(recipe: Recipe, cluster: Cluster | None) -> Findings:
    if cluster is None:
        return
    try:
        cluster.nodes_for(recipe)
    except NodeChoiceError as exc:
        yield recipe.origins[exc.key], exc.key, str(exc)


@rule("sglang-backend", ERROR, "SGLang wires its ranks itself; the ray backend is vLLM's")
def _sglang_backend(recipe: Recipe, cluster: Cluster | None) -> Findings:
    if recipe.engine == "sglang" and recipe.distributed_backend == "ray":
        yield recipe.origins["distributed_backend"], "distributed_backend", "SGLang supports the 'mp' backend only"


@rule("cudagraph-capture", WARNING, "with speculative decoding, cudagraph capture size should be max_num_seqs x (k+1)")
def _cudagraph_capture(recipe: Recipe, cluster: Cluster | None) -> Findings:
    # Where the engine states it: vLLM's VllmConfig._set_cudagraph_sizes (vllm/config/vllm.py) sizes a decode
    # step as `decode_query_len = 1 + num_speculative_tokens` tokens per sequence, so the largest decode batch is
    # max_num_seqs x (k+1) tokens and its default capture size is min(max_num_seqs x (k+1) x 2, 512), capped by
    # max_num_batched_tokens. A smaller capture size runs the fullest decode steps without graphs. The seed
    # recipe (deepseek-v4-flash-eugr-agent) states the rule as "max_num_seqs x (k+1) = 6 x 6 = 36".
    spec = last_group(recipe, "--speculative-config")
    capture = last_group(recipe, "--max-cudagraph-capture-size")
    seqs = last_group(recipe, "--max-num-seqs")
    if not (spec and spec.values and capture and seqs):
        return
    try:
        k = int(json.loads(spec.values[0]).get("num_speculative_tokens", 0))
    except (ValueError, AttributeError, TypeError):
        return
    want = int(_number(seqs) or 0) * (k + 1)
    captured = _number(capture)
    if k and captured is not None and int(captured) != want:
        yield (capture.args[0].origin, "args",
               f"--max-cudagraph-capture-size {capture.values[0]} should be --max-num-seqs x (k+1) = "
               f"{seqs.values[0]} x {k + 1} = {want} with num_speculative_tokens = {k}")


@rule("gpu-memory", WARNING, "--gpu-memory-utilization above the cluster's ceiling (unified memory)",
      needs_cluster=True)
def _gpu_memory(recipe: Recipe, cluster: Cluster | None) -> Findings:
    group, value = memory_fraction(recipe)
    ceiling = cluster.gpu_memory_ceiling if cluster else 0.9
    if group is not None and value is not None and ceiling < value <= 1:
        yield (group.args[0].origin, "args",
               f"{group.flag} {value} is above the cluster's gpu_memory_ceiling {ceiling}: GB10 memory is unified, "
               "so the OS, the page cache and the weights' staging share what this leaves; under load the node can "
               "stall or the engine be OOM-killed (known to work for some models: measure it)")


@rule("gpu-memory-range", ERROR, "--gpu-memory-utilization / --mem-fraction-static outside (0, 1]")
def _gpu_memory_range(recipe: Recipe, cluster: Cluster | None) -> Findings:
    group, value = memory_fraction(recipe)
    if group is not None and value is not None and not 0 < value <= 1:
        yield (group.args[0].origin, "args",
               f"{group.flag} {group.values[0]} is a fraction of the GPU's memory: the engine refuses values "
               "outside (0, 1] at start-up")
