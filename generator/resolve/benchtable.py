"""A recipe's `[bench]` table: the defaults of `recipegen bench`, in the shape of a sparkrun recipe's `benchmark:`
block so an imported recipe keeps its benchmark. sparkrun's keys are `framework`, `args`, `metadata`, `timeout`
and `schedule`; any other key is a benchmark option (sparkrun sweeps such "flat" keys into `args`, `args` winning).

Options are llama-benchy's, named as its CLI names them with `_` for `-` (`pp`, `tg`, `depth`, `concurrency`,
`runs`, `tokenizer`, `no_cache` ...). Their list of names, and which take lists or nothing, is here so the schema,
the loader and the bench runner agree (tests/test_bench_table.py compares it with the schema).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# sparkrun's own keys of a `benchmark:` block (sparkrun/core/benchmark_profiles.py: _KNOWN_BENCHMARK_KEYS).
BLOCK_KEYS = ("framework", "args", "metadata", "timeout", "schedule")
FRAMEWORK = "llama-benchy"  # the only framework recipegen runs (sparkrun's default too)

# llama-benchy 0.4.0's options that take several values (`--pp 512 2048`).
LIST_OPTIONS = ("pp", "tg", "depth", "concurrency")
# What llama-benchy can run for each (the schema says the same: tests/test_bench_table.py compares). A prompt
# and a generation need a token; llama-benchy builds each prompt (depth + pp tokens) as a list of token ids
# repeated up to that length in memory (llama_benchy/prompts.py), so 2**24 tokens: above every served model's
# context (the longest, 10M) and ~130 MB a prompt, where 10**20 ended in its MemoryError. Each concurrent request
# is a connection of its own (aiohttp, limit = concurrency + 5): 512 stays within the usual 1024 open files.
MAX_TOKENS = 2**24
BOUNDS = {"pp": (1, MAX_TOKENS), "tg": (1, MAX_TOKENS), "depth": (0, MAX_TOKENS), "concurrency": (1, 512)}
# ... that take no value (present or not).
SWITCH_OPTIONS = ("exact_tg", "no_cache", "no_warmup", "skip_coherence", "adapt_prompt", "no_adapt_prompt",
                  "enable_prefix_caching", "exit_on_first_fail", "no_results_on_fail",
                  "save_total_throughput_timeseries", "save_all_throughput_timeseries")
# ... that take one value.
VALUE_OPTIONS = ("runs", "tokenizer", "latency_mode", "book_url", "post_run_cmd")
# sparkrun's shorthand (sparkrun/benchmarking/llama_benchy.py: _ARG_ALIASES).
ALIASES = {"prefix_caching": "enable_prefix_caching"}
# What recipegen itself sets on llama-benchy's command line: never taken from a recipe.
OWNED = ("base_url", "model", "served_model_name", "api_key", "format", "save_result", "emit_progress")
OPTIONS = LIST_OPTIONS + SWITCH_OPTIONS + VALUE_OPTIONS + tuple(ALIASES)


@dataclass(frozen=True)
class BenchTable:
    framework: str = FRAMEWORK
    options: dict[str, Any] = field(default_factory=dict)  # llama-benchy option -> value (flat keys and `args`)
    timeout: int | None = None  # seconds the whole benchmark may take
    metadata: dict[str, Any] = field(default_factory=dict)  # free text for people (sparkrun keeps it too)
    schedule: tuple[dict[str, Any], ...] = ()  # sparkrun's; kept, not run by recipegen (`bench` says so)


def merged(tables: list[dict[str, Any]]) -> dict[str, Any]:
    """The `[bench]` tables of a recipe's chain, root parent first: a child's key replaces its parent's, and its
    `args` / `metadata` merge key by key."""
    out: dict[str, Any] = {}
    for table in tables:
        for key, value in table.items():
            out[key] = {**out.get(key, {}), **value} if key in ("args", "metadata") else value
    return out


def bench_table(data: dict[str, Any]) -> BenchTable:
    """The table as `bench` uses it: sparkrun's rule, `args` winning over a flat key, aliases resolved."""
    options = {k: v for k, v in data.items() if k not in BLOCK_KEYS}
    options.update(data.get("args", {}))
    options = {ALIASES.get(k, k): v for k, v in options.items()}
    return BenchTable(framework=data.get("framework", FRAMEWORK), options=options, timeout=data.get("timeout"),
                      metadata=dict(data.get("metadata", {})), schedule=tuple(data.get("schedule", ())))
