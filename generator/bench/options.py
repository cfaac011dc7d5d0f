"""What `recipegen bench` runs: llama-benchy's options, layered. llama-benchy's own defaults, then the recipe's
`[bench]` table, then a named profile, then the command line (each wins over the one before); and the llama-benchy
runs they take: one for the whole grid, or with a schedule one per (depth, concurrency) cell, in its order."""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field, replace
from typing import Any

from generator.resolve.benchtable import LIST_OPTIONS, SWITCH_OPTIONS, BenchTable

LLAMA_BENCHY = "0.4.0"  # the pinned release (the `bench` extra); its CLI and JSON are what this package reads


def install_command() -> str:
    """The command that installs the `bench` extra of the recipegen in use: its own requirements, read from its
    metadata, with this Python's pip. Never `pip install 'recipegen[bench]'`, which fetches whatever the registry
    calls recipegen, not this project."""
    from importlib import metadata

    try:
        wanted = [r.split(";")[0].strip() for r in metadata.requires("recipegen") or ()
                  if re.search(r"""extra\s*==\s*["']bench["']""", r)]
    except metadata.PackageNotFoundError:
        wanted = []
    words = " ".join(shlex.quote(r) for r in wanted or [f"llama-benchy=={LLAMA_BENCHY}", "matplotlib"])
    return f"{shlex.quote(sys.executable)} -m pip install {words}"

Cell = tuple[int, int]  # depth, concurrency

# The Spark Arena leaderboard's profile as published: spark-arena/recipe-registry benchmarking/spark-arena-v2.yaml
# at 7aff4a2dd12d6e02d10aa99270f87e8816c94479 (copied as tests/fixtures/spark-arena/, which
# tests/test_bench_arena.py holds this to). Its schedule is "heat-aware", in the file's words, made by a script that
# is not published (sparkrun-internal/benchmark-heat-load.py, bucket_43521_seed42): a fixed order, kept as is.
ARENA_SCHEDULE: tuple[Cell, ...] = (
    (8192, 5), (4096, 5), (8192, 10), (8192, 2), (4096, 2), (100000, 5), (100000, 2), (65535, 10), (65535, 1),
    (0, 1), (65535, 5), (32768, 2), (4096, 10), (16384, 1), (8192, 1), (32768, 5), (0, 10), (16384, 10),
    (32768, 1), (0, 5), (16384, 5), (100000, 1), (32768, 10), (16384, 2), (0, 2), (65535, 2), (4096, 1),
    (100000, 10))

# Named profiles. quick: one short test, to see that it works. arena: the leaderboard's (above).
PROFILES: dict[str, dict[str, Any]] = {
    "quick": {"pp": [512], "tg": [32], "depth": [0], "concurrency": [1], "runs": 1},
    "arena": {"depth": [0, 4096, 8192, 16384, 32768, 65535, 100000], "pp": [2048], "tg": [128],
              "concurrency": [1, 2, 5, 10], "enable_prefix_caching": True, "runs": 3, "schedule": ARENA_SCHEDULE},
}
# What every llama-benchy run of a schedule but the first is given, unless the options say otherwise: sparkrun's
# rule (src/sparkrun/benchmarking/scheduler.py, run_schedule: `setdefault`), the engine being warm already.
LATER_CELLS = {"no_warmup": True, "skip_coherence": True}


@dataclass(frozen=True)
class BenchOptions:
    pp: tuple[int, ...] = (2048,)  # llama-benchy's defaults
    tg: tuple[int, ...] = (32,)
    depth: tuple[int, ...] = (0,)
    concurrency: tuple[int, ...] = (1,)
    runs: int = 3
    tokenizer: str | None = None  # None: the model's own (its Hugging Face id)
    timeout: float | None = None  # seconds for the whole benchmark
    extra: dict[str, Any] = field(default_factory=dict)  # other llama-benchy options from [bench]
    schedule: tuple[Cell, ...] = ()  # the order of the grid's cells, one llama-benchy run each; () = one run

    def passes(self) -> list[BenchOptions]:
        """The llama-benchy runs these options take, in order. Without a schedule, one: llama-benchy runs the
        whole grid itself (depth, then pp, tg, concurrency). With one, a run per cell of depth x concurrency (it
        cannot take cells in another order in one run): the cells the schedule names first, in its order, then
        those it does not (a grid the command line changed), depth first."""
        if not self.schedule:
            return [self]
        grid = [(d, c) for d in self.depth for c in self.concurrency]
        cells = [cell for cell in self.schedule if cell in grid] + [cell for cell in grid
                                                                    if cell not in self.schedule]
        later = {**LATER_CELLS, **self.extra}
        return [replace(self, depth=(d,), concurrency=(c,), schedule=(), extra=self.extra if i == 0 else later)
                for i, (d, c) in enumerate(cells)]

    def argv(self) -> list[str]:
        """These options as llama-benchy's command line (without what the runner sets: URL, names, output)."""
        words: list[str] = []
        for name in LIST_OPTIONS:
            words += [f"--{name}", *(str(v) for v in getattr(self, name))]
        words += ["--runs", str(self.runs)]
        for name, value in sorted(self.extra.items()):
            flag = f"--{name.replace('_', '-')}"
            if name in SWITCH_OPTIONS:
                words += [flag] if value else []
            else:
                words += [flag, str(value)]
        return words


def _listed(value: Any) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (list, tuple)) else (int(value),)


def layered(table: BenchTable, profile: str | None, given: dict[str, Any]) -> BenchOptions:
    """The options in force: [bench], then the profile, then what the command line gave (None: not given)."""
    fields: dict[str, Any] = {"timeout": float(table.timeout) if table.timeout else None}
    extra: dict[str, Any] = {}
    for layer in (table.options, PROFILES[profile] if profile else {}, {k: v for k, v in given.items()
                                                                       if v not in (None, ())}):
        for name, value in layer.items():
            if name in LIST_OPTIONS:
                fields[name] = _listed(value)
            elif name == "runs":
                fields[name] = int(value)
            elif name in ("tokenizer", "timeout"):
                fields[name] = value
            elif name == "schedule":
                fields[name] = tuple(value)
            else:
                extra[name] = value
    return BenchOptions(**fields, extra=extra)
