"""What a model's config.json says about its memory: the attention's cache shape and the bytes of its weights by
part (embedding, lm_head, each decoder layer, multi-token-prediction layers), for the `fit` rules.

The weights are counted from the architecture when no checkpoint sizes are known, and the parts split a known
total between pipeline stages. Counted as the checkpoints store them: linear weights at the quantisation's bytes
per parameter (block scales included), embeddings and lm_head at the model's dtype (quantisers leave them out:
`modules_to_not_convert`, `ignore: [lm_head]`), norms and routers ignored (under 0.1%).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from generator.engines.modeldefaults import with_defaults

DTYPE_BYTES = {"float32": 4.0, "float": 4.0, "float16": 2.0, "half": 2.0, "bfloat16": 2.0, "float8_e4m3fn": 1.0}

# model_type prefixes whose attention is Multi-head Latent Attention: one compressed latent per token and layer,
# replicated on every tensor-parallel rank (sparkrun models/kv/mla.py; vLLM's MLAAttentionSpec, num_kv_heads 1).
MLA_TYPES = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_v4", "kimi_k2", "kimi_linear", "glm_moe_dsa")
# Fixed MLA slot bytes per token and layer where the backend packs latent, scales and RoPE tail itself (vLLM
# v1/kv_cache_interface.py MLAAttentionSpec.real_page_size_bytes: "fp8_ds_mla" -> 656; DeepSeek-V4's
# "448B NoPE + 128B RoPE + 8B fp8 scale = 584B", as sparkrun's models/kv/mla.py quotes vLLM).
MLA_SLOT = {"deepseek_v4": 584, None: 656}


@dataclass(frozen=True)
class WeightParts:
    """Bytes of the weights as stored, by where vLLM places them across pipeline stages."""

    embed: float
    head: float  # 0 when tied to the embedding: one stage holds one copy; with PP the last stage holds its own
    layer: float  # one decoder layer (the mean, for MoE models with a few dense layers)
    mtp: float  # the multi-token-prediction layers the checkpoint carries (num_nextn_predict_layers)
    padding: float = 0.0  # of `layer`: what the engine adds at load to the checkpoint's bytes (MXFP4 experts)

    def total(self, layers: int) -> float:
        return self.embed + self.head + self.layer * layers + self.mtp


@dataclass(frozen=True)
class ModelShape:
    model_type: str
    layers: int
    hidden: int
    kv_heads: int
    head_dim: int
    mla_width: int  # elements cached per token and layer by MLA (kv_lora_rank + qk_rope_head_dim); 0: not MLA
    sliding_window: int | None  # the window of the sliding-window layers
    sliding_layers: int  # how many of the layers use it (gpt-oss: every other one)
    compress_ratios: tuple[int, ...]  # DeepSeek-V4: a layer with ratio r > 1 caches one slot per r tokens
    dtype_bytes: float
    max_position: int | None
    tied: bool
    nextn_layers: int
    weights: WeightParts
    moe: bool = False  # routed experts in its layers (their kernels' graphs cost up to twice a dense layer's)

    @property
    def is_mla(self) -> bool:
        return self.mla_width > 0


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs keep the language model's fields under text_config (or llm_config / language_config)."""
    for key in ("text_config", "llm_config", "language_config"):
        nested = config.get(key)
        if isinstance(nested, dict) and ("num_hidden_layers" in nested or "model_type" in nested):
            return with_defaults({**config, **nested})
    return with_defaults(config)


class ShapeError(ValueError):
    """The config lacks what the estimate needs, or holds a number that is not one (it names the key)."""


COUNT_MAX = 1 << 40  # no count in a model's shape (layers, widths, vocabulary, context) comes near this


def count(value: object, key: str, default: int = 0, low: int = 0) -> int:
    """A count from a model's file: an int (or a whole float) from `low` to 2^40; absent (None, false) gives the
    default; anything else (a string, Infinity, 1e400, a 400-digit int, a negative) is a ShapeError naming it."""
    if value is None or value is False:
        return default
    if isinstance(value, float) and value.is_integer() and abs(value) <= COUNT_MAX:
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= COUNT_MAX:
        shown = repr(value) if len(repr(value)) <= 24 else repr(value)[:20] + "..."
        raise ShapeError(f"config.json: {key} is {shown}, not a count from {low} to 2^40")
    return value


def _int(cfg: dict[str, Any], *keys: str, default: int = 0) -> int:
    """The first of `keys` the config holds, checked (count)."""
    for key in keys:
        if cfg.get(key) is not None and cfg.get(key) is not False:
            return count(cfg[key], key, default)
    return default


def model_shape(config: dict[str, Any]) -> ModelShape:
    cfg = text_config(config)
    layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _int(cfg, "hidden_size", "n_embd", "d_model")
    heads = _int(cfg, "num_attention_heads", "n_head")
    if not (layers and hidden and heads):
        raise ShapeError("config.json has no num_hidden_layers, hidden_size or num_attention_heads")
    kv_heads = _int(cfg, "num_key_value_heads", "num_kv_heads", default=heads)
    head_dim = _int(cfg, "head_dim", default=hidden // heads)
    model_type = str(cfg.get("model_type") or "")
    rope = _int(cfg, "qk_rope_head_dim")
    mla_width = 0
    if model_type.startswith(MLA_TYPES) or cfg.get("kv_lora_rank"):
        # V2/V3 cache kv_lora_rank + the RoPE tail; V4 has no kv_lora_rank, its head_dim is the whole width.
        mla_width = (_int(cfg, "kv_lora_rank") + rope) if cfg.get("kv_lora_rank") else head_dim
    types = cfg.get("layer_types")
    sliding = sum(1 for t in types[:layers] if t == "sliding_attention") if isinstance(types, list) else 0
    window = _int(cfg, "sliding_window") or None
    if window and not sliding and cfg.get("use_sliding_window"):
        sliding = layers  # Mistral-style: every layer slides
    ratios = cfg.get("compress_ratios")
    if isinstance(ratios, list) and None in ratios[:layers]:
        raise ShapeError("config.json: compress_ratios holds null, not a ratio")
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    dtype_bytes = DTYPE_BYTES.get(dtype, 2.0)
    compress = tuple(count(r, "compress_ratios") for r in ratios[:layers]) if isinstance(ratios, list) else ()
    return ModelShape(model_type, layers, hidden, kv_heads, head_dim, mla_width, window if sliding else None,
                      sliding, compress,
                      dtype_bytes, _int(cfg, "max_position_embeddings") or None,
                      bool(cfg.get("tie_word_embeddings", False)), _int(cfg, "num_nextn_predict_layers"),
                      _weights(cfg, layers, hidden, heads, kv_heads, head_dim, dtype_bytes),
                      bool(_int(cfg, "n_routed_experts", "num_experts", "num_local_experts")))


def _weights(cfg: dict[str, Any], layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int,
             dtype_bytes: float) -> WeightParts:
    vocab = _int(cfg, "vocab_size")
    linear, experts_bytes = _linear_bytes(cfg, dtype_bytes)
    attention = _attention_params(cfg, hidden, heads, kv_heads, head_dim) * linear
    experts = _int(cfg, "n_routed_experts", "num_experts", "num_local_experts")
    dense_ffn = 3 * hidden * _int(cfg, "intermediate_size")
    if experts:
        expert_ffn = _int(cfg, "moe_intermediate_size", "intermediate_size")
        shared = (_int(cfg, "n_shared_experts") * expert_ffn or _int(cfg, "shared_expert_intermediate_size"))
        expert_hidden, expert_width = hidden, expert_ffn
        if _quant_method(cfg) == "mxfp4":
            # vLLM's mxfp4.py pads the experts for its Marlin MoE kernel ("n % 256 == 0 and k % 128 == 0"):
            # hidden to a multiple of 256, the expert width to 128 (gpt-oss: 2880 -> 3072 and 2944). The
            # checkpoint stores them unpadded: the padding is added at load, on top of its size.
            expert_hidden, expert_width = -(-hidden // 256) * 256, -(-expert_ffn // 128) * 128
        padded = experts * 3 * (expert_hidden * expert_width - hidden * expert_ffn) * experts_bytes
        moe_layer = (experts * 3 * expert_hidden * expert_width * experts_bytes + 3 * hidden * shared * linear)
        dense_layers = _dense_layers(cfg, layers)
        ffn = (moe_layer * (layers - dense_layers) + dense_ffn * linear * dense_layers) / layers
        padding = padded * (layers - dense_layers) / layers
        mtp_ffn = moe_layer
    else:
        ffn = mtp_ffn = dense_ffn * linear
        padding = 0.0
    layer = attention + ffn
    embed = vocab * hidden * dtype_bytes
    vision_cfg = cfg.get("vision_config")
    # The vision tower and its projector into the text model's width: on the first stage, with the embedding.
    projector = _int(vision_cfg, "hidden_size") * hidden if isinstance(vision_cfg, dict) else 0
    vision = (_vision_params(vision_cfg) + projector) * dtype_bytes
    nextn = _int(cfg, "num_nextn_predict_layers")
    # An MTP module: one more decoder layer plus its projection of [embedding; hidden] (eh_proj, 2h x h).
    mtp = nextn * (attention + mtp_ffn + 2 * hidden * hidden * linear)
    return WeightParts(embed + vision, 0.0 if cfg.get("tie_word_embeddings") else embed, layer, mtp, padding)


def _vision_params(vision: object) -> int:
    """A ViT vision tower (SigLIP, as Gemma 3 and most VLMs ship it): per layer the q, k, v, o projections and a
    two-matrix MLP; 0 when the config names none or not in these terms."""
    if not isinstance(vision, dict):
        return 0
    hidden, width = _int(vision, "hidden_size"), _int(vision, "intermediate_size")
    patch, image = _int(vision, "patch_size"), _int(vision, "image_size")
    # The patch embedding (a conv of channels x patch^2 per output) and one position embedding per patch.
    embeddings = (_int(vision, "num_channels", default=3) * patch * patch + (image // patch) ** 2) * hidden \
        if patch else 0
    return _int(vision, "num_hidden_layers", "depth") * (4 * hidden * hidden + 2 * hidden * width) + embeddings


def _attention_params(cfg: dict[str, Any], hidden: int, heads: int, kv_heads: int, head_dim: int) -> int:
    rope = _int(cfg, "qk_rope_head_dim")
    if cfg.get("kv_lora_rank"):  # MLA (DeepSeek V2/V3, Kimi K2): low-rank q and kv projections
        nope, v_dim, kv_rank = _int(cfg, "qk_nope_head_dim"), _int(cfg, "v_head_dim"), _int(cfg, "kv_lora_rank")
        q_rank = _int(cfg, "q_lora_rank")
        q = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank else hidden * heads * (nope + rope)
        return q + hidden * (kv_rank + rope) + kv_rank * heads * (nope + v_dim) + heads * v_dim * hidden
    q_rank = _int(cfg, "q_lora_rank")
    if q_rank:  # DeepSeek-V4: low-rank q, one shared kv head, grouped low-rank output
        o_rank, groups = _int(cfg, "o_lora_rank"), _int(cfg, "o_groups", default=1)
        return (hidden * q_rank + q_rank * heads * head_dim + hidden * kv_heads * head_dim
                + heads * head_dim * o_rank // max(groups, 1) * groups + groups * o_rank * hidden)
    return 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim


def _dense_layers(cfg: dict[str, Any], layers: int) -> int:
    """Layers of a MoE model with a plain MLP: DeepSeek/GLM first_k_dense_replace, Qwen mlp_only_layers."""
    only = cfg.get("mlp_only_layers")
    step = _int(cfg, "decoder_sparse_step", default=1)
    count = _int(cfg, "first_k_dense_replace") + (len(only) if isinstance(only, list) else 0)
    if step > 1:
        count += layers - layers // step
    return min(count, layers)


def _quant_method(cfg: dict[str, Any]) -> str:
    quant = cfg.get("quantization_config")
    return str(quant.get("quant_method") or "").lower() if isinstance(quant, dict) else ""


def _linear_bytes(cfg: dict[str, Any], dtype_bytes: float) -> tuple[float, float]:
    """Bytes per parameter of (linear layers, MoE experts) as the checkpoint stores them."""
    quant = cfg.get("quantization_config")
    if not isinstance(quant, dict):
        return dtype_bytes, dtype_bytes
    method = str(quant.get("quant_method") or "").lower()
    algo = str(quant.get("quant_algo") or "").lower()
    if cfg.get("expert_dtype") == "fp4" and method == "fp8":  # DeepSeek-V4: FP4 experts (a scale per 32), FP8 rest
        return 1.0, 0.5 + 1 / 32
    bits = _int(quant, "bits", "w_bit", "num_bits")
    group = _group(quant.get("group_size", quant.get("q_group_size")), _int(cfg, "hidden_size", "n_embd", "d_model"))
    if method == "mxfp4":  # gpt-oss: experts only, 4-bit values + one e8m0 scale per 32 (OCP MX format)
        return dtype_bytes, 0.5 + 1 / 32
    if "nvfp4" in algo or "fp4" in method or method == "modelopt_fp4":
        return 0.5 + 1 / 16, 0.5 + 1 / 16  # NVFP4: 4-bit values + one fp8 scale per 16
    if method in ("fp8", "fbgemm_fp8") or "fp8" in algo:
        return 1.0, 1.0  # block scales (fp32 per 128x128) add 0.02%
    if method == "compressed-tensors":
        bits, group = _compressed_bits(quant, _int(cfg, "hidden_size", "n_embd", "d_model"))
        quantised = 1.0 if bits >= 8 else bits / 8 + 2 / group
        ignored = quant.get("ignore")
        # Checkpoints that quantise the experts alone list the attention in `ignore` (`re:.*self_attn.*`).
        if isinstance(ignored, list) and any("self_attn" in str(i) or "attn" == str(i) for i in ignored):
            return dtype_bytes, quantised
        return quantised, quantised
    if bits and bits < 16:  # awq, gptq, auto-round: packed ints + an fp16 scale (and packed zero) per group
        per = bits / 8 + 2 / group + bits / 8 / group
        return per, per
    return dtype_bytes, dtype_bytes


def _group(value: object, hidden: int) -> int:
    """Weights per quantisation scale: `group_size`, 128 when absent; -1 is one scale per output channel (GPTQ's
    and compressed-tensors' "channel" strategy), about one per `hidden` weights."""
    if value == -1 and not isinstance(value, bool):
        return max(hidden, 1)
    return count(value, "group_size", default=128, low=1)


def _compressed_bits(quant: dict[str, Any], hidden: int) -> tuple[int, int]:
    """(bits, group size) of a compressed-tensors checkpoint's weights: the format keeps them per scheme in
    `config_groups.<name>.weights` (num_bits, group_size), not at the top level; 8 bits when none says."""
    groups = quant.get("config_groups")
    if isinstance(groups, dict):
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, dict) else None
            if isinstance(weights, dict) and weights.get("num_bits") is not None:
                bits = count(weights["num_bits"], "num_bits", low=1)
                if weights.get("strategy") == "channel":
                    return bits, max(hidden, 1)
                return bits, _group(weights.get("group_size"), hidden)
    return 8, 128
