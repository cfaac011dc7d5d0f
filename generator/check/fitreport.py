"""Will it fit: a recipe's memory per rank, from its model's files and its flags, as data for the `fit` lint rules,
`recipegen fit` and `explain`.

The flags are read as the engines read them, with their defaults where the recipe is silent: vLLM's
--gpu-memory-utilization 0.9 (CacheConfig), --max-num-seqs 1024 and --max-num-batched-tokens 8192 on GPUs of
70 GiB or more, 256 and 2048 below (EngineArgs._set_default_args), --max-model-len the model's
max_position_embeddings, -1 or `auto` its auto-fit; SGLang's --mem-fraction-static (weights and KV pool only:
its activations and CUDA graphs live outside that share), --context-length, --max-running-requests and
--chunked-prefill-size.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from generator.engines.memory import GIB, Extra, RankMemory, Settings, kv_per_token, per_rank
from generator.engines.modelshape import COUNT_MAX, ModelShape, ShapeError, model_shape, text_config
from generator.engines.ranks import flag_value, last_group, memory_fraction
from generator.resolve.model import Cluster, NodeChoiceError, Origin, Recipe
from generator.resolve.modelfiles import ModelFiles, NotFound, find_model, hub_cache, read_path

# Speculative methods whose draft is the model's own multi-token-prediction layers (vLLM SpeculativeConfig), and
# those that load no weights at all.
MTP_METHODS = re.compile(r"mtp$|^mtp|_mtp")
NO_WEIGHTS = ("ngram", "suffix", "ngram_gpu")
_FLAGS = {  # setting -> (vLLM flag, SGLang flag)
    "utilization": ("--gpu-memory-utilization", "--mem-fraction-static"),
    "length": ("--max-model-len", "--context-length"),
    "seqs": ("--max-num-seqs", "--max-running-requests"),
    "batched": ("--max-num-batched-tokens", "--chunked-prefill-size"),
    "kv_dtype": ("--kv-cache-dtype", "--kv-cache-dtype"),
    "eager": ("--enforce-eager", "--disable-cuda-graph"),
    "block": ("--block-size", "--page-size"),
    "loader": ("--load-format", "--load-format"),
}


@dataclass(frozen=True)
class FitReport:
    recipe: str
    engine: str
    model: str
    read_from: str  # the folder or file the config came from
    weights_from: str  # the checkpoint's sizes, or "estimated from config.json"
    settings: Settings
    ranks: list[RankMemory]
    length: int  # the context judged: --max-model-len, the model's, or what auto-fit would choose
    length_said: str  # how the recipe sets it
    auto: bool
    nodes: list[str]  # the node of each rank
    origin: Origin  # where a finding points: the recipe's model line
    length_origin: Origin | None = None  # the --max-model-len flag
    uncounted: list[str] = field(default_factory=list)  # what the estimate leaves out (a draft it cannot read)

    def flag(self, key: str) -> str:
        """The engine's spelling of a setting's flag."""
        return _FLAGS[key][0 if self.engine == "vllm" else 1]

    def rank_nodes(self, memory: RankMemory) -> str:
        names = dict.fromkeys(self.nodes[r] for r in memory.ranks if r < len(self.nodes))
        shown = ", ".join(names) or "?"
        return f"rank {memory.ranks[0]}" + (f"-{memory.ranks[-1]}" if len(memory.ranks) > 1 else "") + f" ({shown})"


def _value(recipe: Recipe, key: str) -> tuple[str | None, Origin | None]:
    group = last_group(recipe, _FLAGS[key][0 if recipe.engine == "vllm" else 1])
    if group is None:
        return None, None
    return (group.values[0] if group.values else ""), group.args[0].origin


def _number(text: str | None) -> float | None:
    """A number as vLLM's human_readable_int reads it: `32768`, `32k` (x1000), `32K` (x1024), `1m`, `1M`; None
    when it is not one (or not finite: a 400-digit value is no memory size)."""
    if text is None:
        return None
    match = re.fullmatch(r"(-?[0-9.]+(?:[eE][-+]?[0-9]+)?)([kKmMgG]?)", text.strip())
    if not match:
        return None
    unit = match[2]
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}[unit]
    try:
        value = float(match[1]) * scale
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class SettingError(ValueError):
    """A flag the estimate reads holds a value no engine would run with: the memory is not judged."""


def _setting(recipe: Recipe, key: str, low: float, high: float, whole: bool = True) -> float | None:
    """The flag's number, checked: from `low` to `high` (whole when `whole`); None when the recipe is silent."""
    text = _value(recipe, key)[0]
    if text is None:
        return None
    value = _number(text)
    if value is None or not low <= value <= high or (whole and not value.is_integer()):
        shown = text if len(text) <= 24 else text[:20] + "..."
        kind = "a whole number" if whole else "a number"
        top = f"{high:,.0f}" if high > 1 else f"{high:g}"
        raise SettingError(f"{_FLAGS[key][0 if recipe.engine == 'vllm' else 1]} {shown} is not {kind} from "
                           f"{low:g} to {top}")
    return value


def settings_of(recipe: Recipe, cluster: Cluster | None, shape: ModelShape) -> tuple[Settings, str, Origin | None]:
    """The engine's settings as the recipe gives them (SettingError: one the estimate cannot use)."""
    gpu = cluster.gpu_memory if cluster else Cluster.gpu_memory
    big = gpu >= 70 * GIB
    vllm = recipe.engine == "vllm"
    group, util = memory_fraction(recipe)  # as the engine and the gpu-memory rules read it
    if group is not None and group.values and (util is None or not 0.01 <= util <= 1):
        raise SettingError(f"{group.flag} {group.values[0][:20]} is not a number from 0.01 to 1")
    if util is None:
        util = 0.9 if vllm else (cluster.gpu_memory_ceiling if cluster else 0.9)
    text, length_origin = _value(recipe, "length")
    auto = text is not None and text.strip().lower() == "auto"
    length = -1 if auto else _setting(recipe, "length", -1, COUNT_MAX)
    said = f"{_FLAGS['length'][0 if vllm else 1]} {text}" if text is not None else \
        f"the model's max_position_embeddings ({shape.max_position})"
    seqs = _setting(recipe, "seqs", 1, 1 << 31) or (1024 if big else 256)
    batched = _setting(recipe, "batched", 1, COUNT_MAX) or (8192 if big else 2048)
    kv_dtype = _value(recipe, "kv_dtype")[0] or "auto"
    explicit = _kv_memory(recipe)
    tp = recipe.tensor_parallel_size
    settings = Settings(
        tp=tp, pp=recipe.pipeline_parallel_size, gpu_memory=gpu, utilization=util,
        max_model_len=int(length) if length else shape.max_position, max_num_seqs=int(seqs),
        max_num_batched_tokens=int(batched), kv_dtype=kv_dtype, kv_cache_memory=explicit,
        enforce_eager=_value(recipe, "eager")[0] is not None,
        block_size=int(_setting(recipe, "block", 1, 1 << 20) or 16), release=vllm_release(recipe),
        # vLLM's NVLink all-reduce needs the whole TP group on one node
        shared_node=cluster is not None and 1 < tp <= cluster.gpus_per_node)
    return settings, said, length_origin


def vllm_release(recipe: Recipe) -> tuple[int, int] | None:
    """The image's vLLM release (major, minor), which decides the rules that changed over releases (CUDA graphs
    counted from 0.21, the sampler's sort before 0.17): its tag, or for NGC the vLLM its month ships (a month with
    no note: the latest known month before it, else the first); None for an image that names none (a custom
    build: the newest rules)."""
    if recipe.engine != "vllm":
        return None
    from generator.engines.flags import ngc_vllm  # the flag data is read only when a rule needs it

    tag = recipe.docker_image.split("@", 1)[0].rsplit("/", 1)[-1].partition(":")[2]
    if "nvidia/vllm" in recipe.docker_image:
        shipped = ngc_vllm(tag)
        named = re.match(r"(\d+)\.(\d+)", shipped[0]) if shipped else None
    else:
        named = re.match(r"v?(\d+)\.(\d+)", tag)
    return (int(named[1]), int(named[2])) if named else None


def _kv_memory(recipe: Recipe) -> int | None:
    """--kv-cache-memory-bytes (vLLM only), checked: 1 byte to 1 PiB."""
    if recipe.engine != "vllm":
        return None
    text = flag_value(recipe, "--kv-cache-memory-bytes")
    if text is None:
        return None
    value = _number(text)
    if value is None or not 1 <= value <= 1 << 50:
        raise SettingError(f"--kv-cache-memory-bytes {text[:20]} is not a size from 1 byte to 1 PiB")
    return int(value)


def _speculative(recipe: Recipe) -> dict[str, object] | None:
    text = flag_value(recipe, "--speculative-config")
    if text is None:
        return None
    try:
        config = json.loads(text)
    except ValueError:
        return None  # bad-json reports it
    return config if isinstance(config, dict) else None


def _revision(recipe: Recipe) -> str | None:
    return flag_value(recipe, "--revision")


def _extras(recipe: Recipe, shape: ModelShape, scale: float, settings: Settings) -> tuple[list[Extra], list[str]]:
    """Speculative decoding's draft: MTP layers of the model itself, another model read like the main one, or
    nothing (n-gram); a draft it cannot read is named as not counted."""
    spec = _speculative(recipe)
    if spec is None:
        return [], []
    method = str(spec.get("method") or "")
    model = spec.get("model")
    if method in NO_WEIGHTS:
        return [], []
    if (isinstance(model, str) and model and model != recipe.model) and not MTP_METHODS.search(method):
        found = find_model(model, None, recipe.mounts)
        if isinstance(found, NotFound):
            return [], [f"the draft model {model} ({found.reason})"]
        try:
            draft = model_shape(found.config)
        except ShapeError as exc:
            return [], [f"the draft model {model} ({exc})"]
        weights = float(found.weights.total) if found.weights else draft.weights.total(draft.layers)
        full, sliding = kv_per_token(draft, draft.layers, settings.tp, settings.kv_dtype)
        return [Extra(f"draft {model}", weights, full + sliding)], []
    if MTP_METHODS.search(method):
        if not shape.nextn_layers:
            return [], [f"the {method or 'speculative'} draft (the model's config names no MTP layers)"]
        layers = shape.nextn_layers
        full, sliding = kv_per_token(shape, shape.layers, settings.tp, settings.kv_dtype)
        per_layer = (full + sliding) / shape.layers
        return [Extra(f"{layers} MTP layer(s)", shape.weights.mtp * scale, per_layer * layers)], []
    return [], [f"the '{method}' draft's weights and KV (recipegen cannot size this method)"]


def fit_report(recipe: Recipe, cluster: Cluster | None, given: Path | None = None) -> FitReport | NotFound:
    """The memory of each rank of `recipe` on `cluster`; NotFound says in one line why it cannot be judged."""
    found = read_path(given) if given is not None else find_model(recipe.model, _revision(recipe), recipe.mounts,
                                                                  _caches(cluster))
    if isinstance(found, NotFound):
        return found
    return report_from(recipe, cluster, found)


GPU_LOADERS = ("fastsafetensors", "instanttensor")
SHARD = 5e9  # huggingface_hub's default max_shard_size ("5GB")


def _staging(recipe: Recipe, files: ModelFiles, shape: ModelShape) -> float:
    """--load-format fastsafetensors (or instanttensor) reads each checkpoint file whole into GPU memory; torch's
    allocator keeps that reserved after loading, so the KV pool loses about one shard (fastsafetensors#30: "4 GiB
    (file)" extra per rank; MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#204: 4.43 GiB of KV cache on two Sparks)."""
    if recipe.engine != "vllm" or (_value(recipe, "loader")[0] or "").strip().lower() not in GPU_LOADERS:
        return 0.0
    if files.weights is not None:
        return files.weights.total / files.weights.files
    return min(SHARD, shape.weights.total(shape.layers))


def _caches(cluster: Cluster | None) -> tuple[Path, ...]:
    """The hub caches to look in: huggingface_hub's here, then the cluster's hf_cache (what the engines mount) when
    the cluster file names one and it is on this machine (recipegen run on a Spark). HF_HUB_CACHE or HF_HOME set
    says where the cache is: then that one alone, as huggingface_hub reads it."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HF_HOME")
    if cluster is None or "hf_cache" not in cluster.document.data or explicit:
        return (hub_cache(),)
    return (hub_cache(), Path(cluster.hf_cache).expanduser() / "hub")


def report_from(recipe: Recipe, cluster: Cluster | None, files: ModelFiles) -> FitReport | NotFound:
    try:
        shape = model_shape(files.config)
    except ShapeError as exc:
        return NotFound(f"{files.where}: {exc}")
    try:
        settings, said, length_origin = settings_of(recipe, cluster, shape)
    except SettingError as exc:
        return NotFound(str(exc), files=False)
    settings = replace(settings, loader_staging=_staging(recipe, files, shape))
    estimated = shape.weights.total(shape.layers) - shape.weights.mtp
    weights = files.weights
    if weights is not None:
        # A checkpoint carries its MTP layers too; vLLM loads them only as a speculative draft.
        stored = shape.weights.total(shape.layers) - shape.weights.padding * shape.layers
        total = weights.total * (1 - shape.weights.mtp / stored) + shape.weights.padding * shape.layers
        weights_from = weights.source + (" + MXFP4 padding" if shape.weights.padding else "")
    else:
        total, weights_from = estimated, "estimated from config.json"
    if shape.dtype_bytes == 4 and "quantization_config" not in text_config(files.config):
        total /= 2  # vLLM's dtype "auto" loads a float32 checkpoint in 16 bits (ModelConfig._get_and_verify_dtype)
    extras, uncounted = _extras(recipe, shape, total / estimated if estimated else 1.0, settings)
    if last_group(recipe, "--kv-transfer-config") is not None:
        uncounted = [*uncounted, "the --kv-transfer-config connector's GPU buffers"]
    by_part = weights if weights is not None and weights.layers and shape.dtype_bytes != 4 else None
    cfg = text_config(files.config)
    parts = None
    if by_part:  # tensors outside the decoder layers and heads (norms, a vision tower) go with the embedding
        rest = by_part.total - (by_part.embed or 0) - (by_part.head or 0) - sum(by_part.layers.values())
        parts = (float((by_part.embed or 0) + rest), float(by_part.head or 0))
    ranks = per_rank(shape, total, settings, tuple(extras), (int(cfg.get("vocab_size") or 0), shape.hidden),
                     by_part.layers if by_part else None, parts)
    if recipe.engine == "sglang":  # its static share holds weights and KV pool; the rest lives outside it
        ranks = [_no_overhead(r) for r in ranks]
    auto = settings.max_model_len == -1
    limit = shape.max_position or 131072
    length = min(r.longest(limit) for r in ranks) if auto else (settings.max_model_len or limit)
    try:
        nodes = [n.name for n in cluster.nodes_for(recipe) for _ in range(cluster.gpus_per_node)] if cluster else []
    except NodeChoiceError:
        nodes = []
    origin = recipe.origins.get("model") or recipe.document.origin("recipe", ())
    return FitReport(recipe.id, recipe.engine, recipe.model, files.where, weights_from, settings, ranks, length,
                     "auto (vLLM fits the longest context the pool holds)" if auto else said, auto, nodes, origin,
                     length_origin, uncounted)


def _no_overhead(memory: RankMemory) -> RankMemory:
    return replace(memory, overhead=0.0)
