"""Memory per rank, as vLLM sizes it at boot: what each rank's weights take, what is left for the KV cache, how
many tokens that cache holds and the longest context one sequence can have.

vLLM's worker (v1/worker/gpu_worker.py, determine_available_memory): the KV cache gets
`total GPU memory x --gpu-memory-utilization - (weights + peak activation + non-torch memory + CUDA graphs)`, or
`--kv-cache-memory-bytes` when given. Its kv_cache_utils.py then checks that one request of `max_model_len`
fits (check_enough_kv_cache_memory, which names the largest length that would: estimate_max_model_len's binary
search) and logs "GPU KV cache size: N tokens", its blocks times the block size (with sliding-window layers, over
the kv-cache groups), and "Maximum concurrency", the pool over one full-length request's bytes. Page sizes
(v1/kv_cache_interface.py): a full-attention layer holds
`2 x block_size x num_kv_heads x head_size x dtype bytes` per block, num_kv_heads = max(1, kv_heads // TP)
(ModelConfig.get_num_kv_heads); an MLA layer one latent of kv_lora_rank + qk_rope_head_dim per token, on every
TP rank; a sliding-window layer at most `sliding_window - 1 + max_num_batched_tokens` tokens per request
(SlidingWindowSpec.max_memory_usage_bytes). Pipeline stages split the layers as get_pp_indices does
(distributed/utils.py): layers // PP each, the remainder to the stages before the last, the embedding on the
first stage and lm_head on the last.

The overhead (activations, NCCL and CUDA context, CUDA graphs) is vLLM's to measure at boot; here it is an
estimate whose error docs/fit.md shows against published boot logs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from generator.engines.modelshape import MLA_SLOT, ModelShape

GIB = 1024 ** 3
KV_DTYPE_BYTES = {"auto": 0.0, "bfloat16": 2.0, "float16": 2.0, "half": 2.0, "float": 4.0, "float32": 4.0,
                  "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "fp8_inc": 1.0, "int8": 1.0,
                  "fp8_per_token_head": 1.0, "int8_per_token_head": 1.0, "nvfp4": 0.5 + 1 / 16}
# vLLM measures its budget from a snapshot taken after the CUDA context exists: what it adds is the non-torch
# memory that grows after it (cuBLAS workspaces, streams): 0.13-0.14 GiB at one rank before 0.17, 0.25 on 0.18
# and 0.19 (llm-d's H100 measurements, docs/fit.md).
RUNTIME = 0.25 * GIB
# NCCL's buffers and communicators whenever ranks talk (an H100 pair of January 2026: 0.54 GiB of non-torch memory
# in all); pipeline stages send less (0.07 GiB on 0.19 at PP 2 and 4): counted the same, the safe side.
NCCL = 0.5 * GIB
# The sampler's dummy run over max_num_seqs rows of the vocabulary keeps this many fp32 copies of the logits at its
# peak. Before 0.17, top-k/top-p sorted them (values, int64 indices, softmax, cumsum): 9.6-9.7 copies in llm-d's
# H100 logs (January 2026's latest: gpt-oss 7.38 GiB, Llama-3.1-8B 4.76, Qwen3-32B 5.64 at 1,024 rows; 0.15 and
# 0.16: Qwen3-14B 5.64); from 0.17 a Triton kernel samples without the sort: 3.8-4.1 copies (Qwen3-14B 2.23 GiB;
# 0.19: Llama-3.1-8B 1.89, Gemma 3 3.89-3.99).
SAMPLER_COPIES = 4.0
SAMPLER_COPIES_SORTED = 9.7
# CUDA graphs' memory per captured batch size and decoder layer on the rank (piecewise graphs split at every
# layer's attention), as vLLM 0.19+ estimates it at boot ("Estimated CUDA graph memory"). One rank, or ranks that
# share a node's NVLink (custom all-reduce): about 0.2 MiB (llm-d's H100 logs on 0.19, 102 graphs: Llama-3.1-8B
# 0.84 GiB over 32 layers, Qwen3-8B 0.84 over 36, Gemma 3 27B 1.05 over 62; Qwen2.5-72B at TP 2, 1.63 over 80).
# Twice that when the all-reduce runs through NCCL inside every graph, as it does between nodes (Qwen2.5-72B on
# four PCIe L40S, custom all-reduce off: 2.73 GiB for 86 graphs over 80 layers), and twice again for MoE layers
# (eugr/spark-vllm-docker#396, MiniMax-M2.7 on two Sparks, 62 layers, 102 graphs: "0.80 effectively 0.758" of
# the GPU, about 5.0 GiB). vLLM's own per-graph figures scatter around this rule (docs/fit.md: -61% to +58%).
GRAPH_PER_LAYER = 0.205 * 2**20
GRAPH_NCCL = 2.0
GRAPH_MOE = 2.0
# Ranks that share a node (--tensor-parallel-size within gpus_per_node) also get vLLM's NVLink all-reduce buffers
# (custom all-reduce, symmetric memory, FlashInfer's all-reduce + RMSNorm fusion): llm-d's H100 logs on 0.19 show
# 2.06-2.21 GiB of non-torch memory at TP 2-4 on one node against 0.25 at TP 1, and a 4 x H100 run of July 2025
# (0.9.2 or 0.10.0, vllm#21348) misses the same 1.8 GiB without them. One older H100 pair showed 0.54 GiB (llm-d,
# January 2026): counted at every release all the same, the safe side.
NODE_ALLREDUCE = 1.4 * GIB
# vLLM's default capture sizes (CompilationConfig): 1, 2, 4, then 8 to 248 by 8, then 256 up by 16.
CAPTURE_SIZES = (1, 2, 4, *range(8, 256, 8), *range(256, 1025, 16))


@dataclass(frozen=True)
class Settings:
    """What the recipe asks of the engine (its flags, or the engine's defaults)."""

    tp: int
    pp: int
    gpu_memory: int  # bytes one GPU has (the cluster's gpu_memory)
    utilization: float
    max_model_len: int | None  # None: the model's max_position_embeddings; -1: vLLM's auto-fit
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_dtype: str = "auto"
    kv_cache_memory: int | None = None  # --kv-cache-memory-bytes: the pool, bypassing the budget
    enforce_eager: bool = False
    block_size: int = 16
    release: tuple[int, int] | None = None  # the image's vLLM release (major, minor); None: the newest rules
    shared_node: bool = False  # the TP ranks share one node (gpus_per_node): NVLink all-reduce, no NCCL in graphs
    loader_staging: float = 0.0  # what a GPU-side loader (--load-format fastsafetensors) leaves reserved

    @property
    def graphs_counted(self) -> bool:
        """vLLM 0.21 and later subtract CUDA graphs' memory from the KV pool at boot."""
        return self.release is None or self.release >= (0, 21)

    @property
    def node_allreduce(self) -> float:
        """vLLM's NVLink all-reduce buffers, when the ranks share a node."""
        return NODE_ALLREDUCE if self.shared_node and self.tp > 1 else 0.0

    @property
    def graphs_through_nccl(self) -> bool:
        """Ranks on different nodes all-reduce through NCCL inside every CUDA graph; on one node, over NVLink."""
        return self.tp > 1 and not self.shared_node

    @property
    def sampler_copies(self) -> float:
        return SAMPLER_COPIES if self.release is None or self.release >= (0, 17) else SAMPLER_COPIES_SORTED


@dataclass(frozen=True)
class Extra:
    """Speculative decoding's draft: its weights (before the TP split) and its layers' KV per token."""

    what: str
    weights: float
    kv_per_token: float = 0.0  # per rank, already split


@dataclass(frozen=True)
class RankMemory:
    rank: int  # the first rank of this pipeline stage (all TP ranks of a stage hold the same)
    stage: int
    ranks: tuple[int, ...]
    layers: int
    budget: float  # gpu_memory x utilization
    weights: float
    overhead: float
    kv_per_token: float  # bytes per token of context on this rank, full-attention (and compressed) layers
    swa_per_token: float  # bytes per token of the sliding-window layers, which hold at most swa_span tokens
    swa_span: int
    block_size: int
    pool_given: float | None = None  # --kv-cache-memory-bytes

    @property
    def pool(self) -> float:
        """Bytes left for the KV cache (vLLM's "Available KV cache memory")."""
        if self.pool_given is not None:
            return self.pool_given
        return self.budget - self.weights - self.overhead

    def request_bytes(self, tokens: int) -> float:
        """One request of `tokens` tokens: whole blocks, the sliding layers capped at their span (+1 block)."""
        blocks = math.ceil(tokens / self.block_size)
        swa_blocks = math.ceil(min(self.swa_span, tokens) / self.block_size) + 1 if self.swa_per_token else 0
        return (blocks * self.kv_per_token + swa_blocks * self.swa_per_token) * self.block_size

    def usable_pool(self) -> float:
        """The pool less the null block the block pool keeps back (get_kv_cache_configs)."""
        return self.pool - (self.kv_per_token + self.swa_per_token) * self.block_size

    def longest(self, limit: int) -> int:
        """The largest length up to `limit` whose one request fits (estimate_max_model_len); 0 if none."""
        pool = self.usable_pool()
        if self.request_bytes(1) > pool:
            return 0
        low, high = 1, limit
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if self.request_bytes(mid) <= pool else (low, mid - 1)
        return low

    def capacity(self, length: int) -> tuple[int, float]:
        """(tokens the pool holds, requests of `length` at once), as vLLM logs them ("GPU KV cache size",
        "Maximum concurrency"). With sliding-window layers vLLM's tokens are its blocks over the kv-cache groups
        (kv_cache_utils: num_blocks // len(groups) x block_size, the null block among them): the whole pool over
        every layer slot, full and sliding (padded), whatever the window caps; one request of `length` is what the
        concurrency counts."""
        per_request = self.request_bytes(length)
        if per_request <= 0:
            return 0, 0.0
        concurrency = max(self.usable_pool(), 0) / per_request
        if not self.swa_per_token:
            return int(concurrency * length), concurrency
        blocks = max(self.pool, 0) // ((self.kv_per_token + self.swa_per_token) * self.block_size)
        return int(blocks) * self.block_size, concurrency


def kv_bytes_per_element(kv_dtype: str, shape: ModelShape) -> float:
    return KV_DTYPE_BYTES.get(kv_dtype) or shape.dtype_bytes


def kv_per_token(shape: ModelShape, layers: int, tp: int, kv_dtype: str) -> tuple[float, float]:
    """(bytes per token of the full/compressed layers, of the sliding-window layers) on one rank holding
    `layers` of the model's layers (a pipeline stage's share, spread evenly over the kinds of layer)."""
    share = layers / shape.layers
    if shape.is_mla:
        slot = MLA_SLOT.get(shape.model_type, MLA_SLOT[None]) if kv_dtype in ("fp8_ds_mla", "nvfp4_ds_mla") else \
            shape.mla_width * kv_bytes_per_element(kv_dtype, shape)
        if shape.model_type == "deepseek_v4" and kv_dtype.startswith("fp8"):
            slot = MLA_SLOT["deepseek_v4"]  # V4 packs its fp8 cache into 584-byte slots
        if shape.compress_ratios:  # V4: one slot per r tokens in layers with r > 1; the rest slide
            compressed = sum(slot / r for r in shape.compress_ratios if r > 1)
            sliding = sum(1 for r in shape.compress_ratios if r <= 1)
            return compressed * share, sliding * slot * share
        return shape.layers * slot * share, 0.0
    heads = max(1, shape.kv_heads // tp)
    per_layer = 2 * heads * shape.head_dim * kv_bytes_per_element(kv_dtype, shape)
    full, sliding = shape.layers - shape.sliding_layers, shape.sliding_layers
    if full and sliding:
        # The hybrid allocator groups layers of one kind in groups of the smaller kind's count and pads the
        # last group (get_kv_cache_groups: "Add N padding layers"): Gemma 3's 52 sliding layers cost 60.
        group = min(full, sliding)
        full, sliding = -(-full // group) * group, -(-sliding // group) * group
    return full * per_layer * share, sliding * per_layer * share


def stage_layers(layers: int, pp: int) -> list[int]:
    """vLLM's get_pp_indices: layers // pp per stage, the remainder one each to the stages before the last."""
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return parts


def capture_counts(max_num_seqs: int) -> tuple[int, int]:
    """(piecewise, full) CUDA graphs vLLM captures by default (FULL_AND_PIECEWISE): piecewise at every capture
    size up to min(2 x max_num_seqs, 512), full decode graphs at those up to max_num_seqs."""
    largest = min(2 * max_num_seqs, 512)
    sizes = [s for s in CAPTURE_SIZES if s <= largest]
    return len(sizes), sum(1 for s in sizes if s <= max_num_seqs)


def cuda_graphs(layers: int, settings: Settings, moe: bool = False) -> float:
    """The CUDA graphs' memory that vLLM 0.21+ profiles and takes from the KV pool; none with --enforce-eager,
    and none counted before 0.21 (the graphs then took their memory outside the budget)."""
    if settings.enforce_eager or not settings.graphs_counted:
        return 0.0
    return graph_estimate(layers, settings.max_num_seqs, moe, nccl=settings.graphs_through_nccl)


def graph_estimate(layers: int, max_num_seqs: int, moe: bool, nccl: bool) -> float:
    """What vLLM logs as "Estimated CUDA graph memory" for the default capture sizes."""
    piecewise, full = capture_counts(max_num_seqs)
    per_layer = GRAPH_PER_LAYER * (GRAPH_NCCL if nccl else 1.0) * (GRAPH_MOE if moe else 1.0)
    return (piecewise + full) * layers * per_layer


def overhead(shape: ModelShape, settings: Settings, vocab_hidden: tuple[int, int], layers: int = 0) -> float:
    """The runtime, NCCL, the profiling run's peak and CUDA graphs: an estimate (see module doc)."""
    vocab, hidden = vocab_hidden
    # The profiling run's torch peak: the larger of the forward pass over max_num_batched_tokens (~16
    # hidden-sized bf16 buffers at the widest layer, split over TP) and the sampler's dummy run over
    # max_num_seqs rows of fp32 logits (SAMPLER_COPIES of them at its peak); the two run one after the other, so
    # they do not add.
    activations = settings.max_num_batched_tokens * hidden * 2 * 16 / settings.tp
    sampler = settings.max_num_seqs * vocab * 4 * settings.sampler_copies
    world = settings.tp * settings.pp
    return (RUNTIME + (NCCL if world > 1 else 0) + settings.node_allreduce + max(activations, sampler)
            + cuda_graphs(layers or shape.layers, settings, shape.moe) + settings.loader_staging)


def per_rank(shape: ModelShape, weights_total: float, settings: Settings, extras: tuple[Extra, ...] = (),
             vocab_hidden: tuple[int, int] = (0, 0), layer_bytes: dict[int, int] | None = None,
             embed_head: tuple[float, float] | None = None) -> list[RankMemory]:
    """Each pipeline stage's rank: its weights (its layers, the embedding on the first, lm_head on the last,
    all split over TP), the overhead, and the KV per token of its layers."""
    parts = shape.weights
    estimated = parts.total(shape.layers) - parts.mtp
    scale = weights_total / estimated if estimated else 1.0  # a known checkpoint total, spread by the parts
    embed, head = embed_head if embed_head is not None else (parts.embed * scale, parts.head * scale)
    if shape.tied:
        head = embed  # the last stage holds lm_head: with tied embeddings, a copy of the embedding
    budget = settings.gpu_memory * settings.utilization
    extra_weights = sum(e.weights for e in extras) / settings.tp
    extra_kv = sum(e.kv_per_token for e in extras)
    ranks = []
    first = 0
    for stage, layers in enumerate(stage_layers(shape.layers, settings.pp)):
        index = range(first, first + layers)
        if layer_bytes:
            body = float(sum(size for i, size in layer_bytes.items() if i in index)) + parts.padding * layers
        else:
            body = parts.layer * scale * layers
        weights = body + (embed if stage == 0 else 0.0) + (head if stage == settings.pp - 1 else 0.0)
        if settings.pp == 1 and shape.tied:
            weights -= head  # one stage: the tied lm_head is the embedding itself
        full, sliding = kv_per_token(shape, layers, settings.tp, settings.kv_dtype)
        last = stage == settings.pp - 1
        ranks.append(RankMemory(
            stage * settings.tp, stage, tuple(range(stage * settings.tp, (stage + 1) * settings.tp)), layers,
            budget, weights / settings.tp + (extra_weights if last else 0.0),
            overhead(shape, settings, vocab_hidden, layers), full + (extra_kv if last else 0.0), sliding,
            (shape.sliding_window or 0) - 1 + settings.max_num_batched_tokens, settings.block_size,
            float(settings.kv_cache_memory) if settings.kv_cache_memory is not None else None))
        first += layers
    return ranks
