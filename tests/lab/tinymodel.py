"""A tiny Llama made here, with no hub: random weights (a fixed seed) and a byte-level BPE tokenizer trained on a
text generated here, saved the way a Hugging Face repository holds a model, and laid into a node's Hugging Face
cache the way `hf download` leaves it (blobs, a snapshot of links, refs/main). The real vLLM (CPU) serves it; it
answers nonsense, fast, which is all a deployment test needs.

Sizes: hidden 64, 2 layers, 2 attention heads of 32 (vLLM's CPU attention refuses a head size of 16 at the first
request), 2 KV heads (so TP=2 splits heads evenly), vocabulary 512: 0.1 M parameters, about 0.5 MB of float32.
The same bytes on every run and machine: the weights from numpy's seeded generator, the tokenizer trained on a text
drawn from a seeded Python generator.

Run as a script to lay it into a Hugging Face cache: `python3 tests/lab/tinymodel.py ~/.cache/huggingface`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
from pathlib import Path

REPO = "recipegen-lab/tiny-llama"
HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 64, 128, 2, 2, 2, 32, 512
MAX_POSITIONS = 2048
SEED = 28
SPECIAL = ["<s>", "</s>", "<pad>"]
# Each message on a line of its own, then the assistant's turn: enough for /v1/chat/completions.
CHAT_TEMPLATE = ("{% for message in messages %}<s>{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<s>assistant:{% endif %}")
WORDS = ("the of and to in is was it for on that with as by at from this be are or an which one all were "
         "there model engine node rank serve token cache graph memory fabric head worker spark quick brown fox "
         "jumps over lazy dog paris france capital reply exactly word only please what where when who how why "
         "yes no true false zero two three four five six seven eight nine ten hundred thousand").split()


def training_text() -> list[str]:
    rng = random.Random(SEED)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))) + rng.choice(".?!")
            for _ in range(3000)]


def tokenizer_json() -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(training_text(), trainer)
    return tokenizer.to_str()


def weights() -> dict[str, object]:
    import numpy as np

    rng = np.random.default_rng(SEED)

    def matrix(rows: int, cols: int) -> object:
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)

    tensors: dict[str, object] = {"model.embed_tokens.weight": matrix(VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        tensors |= {
            f"{p}.input_layernorm.weight": np.ones(HIDDEN, np.float32),
            f"{p}.self_attn.q_proj.weight": matrix(HEADS * HEAD_DIM, HIDDEN),
            f"{p}.self_attn.k_proj.weight": matrix(KV_HEADS * HEAD_DIM, HIDDEN),
            f"{p}.self_attn.v_proj.weight": matrix(KV_HEADS * HEAD_DIM, HIDDEN),
            f"{p}.self_attn.o_proj.weight": matrix(HIDDEN, HEADS * HEAD_DIM),
            f"{p}.post_attention_layernorm.weight": np.ones(HIDDEN, np.float32),
            f"{p}.mlp.gate_proj.weight": matrix(INTERMEDIATE, HIDDEN),
            f"{p}.mlp.up_proj.weight": matrix(INTERMEDIATE, HIDDEN),
            f"{p}.mlp.down_proj.weight": matrix(HIDDEN, INTERMEDIATE),
        }
    tensors["model.norm.weight"] = np.ones(HIDDEN, np.float32)
    tensors["lm_head.weight"] = matrix(VOCAB, HIDDEN)
    return tensors


def files() -> dict[str, bytes]:
    """The repository's files, by name."""
    from safetensors.numpy import save

    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "vocab_size": VOCAB, "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "torch_dtype": "float32", "bos_token_id": 0, "eos_token_id": 1,
        "pad_token_id": 2,
    }
    tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                        "pad_token": "<pad>", "model_max_length": MAX_POSITIONS, "chat_template": CHAT_TEMPLATE}
    generation = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}
    as_json = lambda data: (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()  # noqa: E731
    return {
        "config.json": as_json(config),
        "generation_config.json": as_json(generation),
        "tokenizer.json": tokenizer_json().encode(),
        "tokenizer_config.json": as_json(tokenizer_config),
        "model.safetensors": save(weights(), metadata={"format": "pt"}),  # type: ignore[arg-type]
    }


def write_folder(dest: Path) -> Path:
    """The model as a plain folder (what `vllm serve DIR` reads)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name, data in files().items():
        (dest / name).write_bytes(data)
    return dest


def put_in_cache(hf_cache: Path, repo: str = REPO) -> str:
    """Lay the model into a Hugging Face cache (the folder HF_HOME names: hub/ is inside) as `hf download` does:
    each file a blob named by its hash (sha256 for the weights, as LFS names them; git's blob sha1 for the rest),
    the snapshot's files relative links to them, refs/main the commit. Returns the commit."""
    data = files()
    blob_names = {name: (hashlib.sha256(body).hexdigest() if name.endswith(".safetensors")
                         else hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest())
                  for name, body in data.items()}
    commit = hashlib.sha1("".join(f"{n} {h}\n" for n, h in sorted(blob_names.items())).encode()).hexdigest()
    repo_dir = hf_cache / "hub" / f"models--{repo.replace('/', '--')}"
    (repo_dir / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot = repo_dir / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, body in data.items():
        blob = repo_dir / "blobs" / blob_names[name]
        if not blob.exists():
            blob.write_bytes(body)
        link = snapshot / name
        if not link.is_symlink():
            link.symlink_to(os.path.join("..", "..", "blobs", blob_names[name]))
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(commit)
    return commit


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} HF_CACHE   (e.g. ~/.cache/huggingface)")
    made = put_in_cache(Path(sys.argv[1]).expanduser())
    print(f"{REPO} at revision {made} in {sys.argv[1]}")
