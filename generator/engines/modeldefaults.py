"""What transformers fills in for a model family when its config.json leaves a field out: the released file holds
only what differs from the family's config class, so reading it alone misses fields (Gemma 3's config.json has
neither `vocab_size` nor `layer_types`). The defaults and the derived layout are transformers' own
(models/<family>/configuration_<family>.py), for the fields the memory estimate reads.
"""

from __future__ import annotations

from typing import Any

# Gemma3TextConfig: vocab_size 262_208, sliding_window 4096 with one full-attention layer every sixth
# (`sliding_window_pattern` 6: layer i slides unless (i + 1) % 6 == 0), tied embeddings, 131,072 positions.
_GEMMA3 = {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
           "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096,
           "sliding_window_pattern": 6, "tie_word_embeddings": True, "max_position_embeddings": 131_072}
# Gemma2Config: vocab 256_000, every other layer slides (layer i slides unless (i + 1) % 2 == 0), window 4096.
_GEMMA2 = {"vocab_size": 256_000, "head_dim": 256, "sliding_window": 4096, "sliding_window_pattern": 2,
           "tie_word_embeddings": True, "max_position_embeddings": 8192}
# GptOssConfig: alternating sliding (128) and full layers, sliding first.
_GPT_OSS = {"vocab_size": 201_088, "sliding_window": 128, "sliding_window_pattern": 2, "tie_word_embeddings": False}
FAMILIES: dict[str, dict[str, Any]] = {
    "gemma3_text": _GEMMA3, "gemma3": _GEMMA3, "gemma2": _GEMMA2, "gemma": {"vocab_size": 256_000,
                                                                          "tie_word_embeddings": True},
    "gpt_oss": _GPT_OSS,
}


def with_defaults(cfg: dict[str, Any]) -> dict[str, Any]:
    """`cfg` (the text model's fields) with its family's defaults under it and, where the family derives it, the
    layer layout (`layer_types`) the config class would compute."""
    family = FAMILIES.get(str(cfg.get("model_type") or ""))
    if family is None:
        return cfg
    filled = {**family, **{k: v for k, v in cfg.items() if v is not None}}
    pattern = filled.get("sliding_window_pattern")
    layers = filled.get("num_hidden_layers")
    if not isinstance(filled.get("layer_types"), list) and isinstance(pattern, int) and pattern > 0 \
            and isinstance(layers, int) and not isinstance(layers, bool) and 0 < layers <= 1 << 20:
        filled["layer_types"] = ["sliding_attention" if (i + 1) % pattern else "full_attention"
                                 for i in range(layers)]
    return filled
