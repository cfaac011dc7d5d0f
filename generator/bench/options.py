"""What `recipegen bench` runs: llama-benchy's options, layered. llama-benchy's own defaults, then the recipe's
`[bench]` table, then a named profile, then the command line (each wins over the one before)."""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field
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

# Named profiles. quick: one short test, to see that it works. arena: shaped like the Spark Arena leaderboard's
# sweep (prompt 2048 tokens, 32 and 128 generated, deeper contexts, a few concurrent users).
PROFILES: dict[str, dict[str, Any]] = {
    "quick": {"pp": [512], "tg": [32], "depth": [0], "concurrency": [1], "runs": 1},
    "arena": {"pp": [2048], "tg": [32, 128], "depth": [0, 4096, 8192, 16384], "concurrency": [1, 2, 4], "runs": 3},
}


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
            else:
                extra[name] = value
    return BenchOptions(**fields, extra=extra)
