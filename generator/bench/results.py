"""A benchmark's results: one BenchRun per llama-benchy test, read from its JSON report, written as
bench/<recipe>/<UTC time>/results.json (the runs, and what produced them) and results.csv (the runs)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

RESULTS, CSV, PLOT = "results.json", "results.csv", "plot.png"


@dataclass(frozen=True)
class BenchRun:
    pp: int  # prompt tokens
    tg: int  # generated tokens
    depth: int  # context tokens before the prompt
    concurrency: int
    pp_tps: float | None  # prompt processing, tokens/s (all concurrent requests together)
    tg_tps: float | None  # generation, tokens/s (all concurrent requests together)
    ttft_ms: float | None  # time to first token, end to end, ms

    @property
    def key(self) -> tuple[int, int, int, int]:
        return self.pp, self.tg, self.depth, self.concurrency


def _mean(metric: Any) -> float | None:
    return round(float(metric["mean"]), 3) if isinstance(metric, dict) and metric.get("mean") is not None else None


def runs_of(report: dict[str, Any]) -> list[BenchRun]:
    """llama-benchy's `benchmarks`, one per test; its context-loading phases (prefix caching) measure the cache,
    not a test, and are left out as sparkrun leaves them out."""
    return [BenchRun(int(b["prompt_size"]), int(b["response_size"]), int(b["context_size"]), int(b["concurrency"]),
                     _mean(b.get("pp_throughput")), _mean(b.get("tg_throughput")), _mean(b.get("e2e_ttft")))
            for b in report.get("benchmarks", []) if not b.get("is_context_prefill_phase")]


def csv_text(runs: list[BenchRun]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([f.name for f in fields(BenchRun)])
    for run in runs:
        writer.writerow(["" if v is None else v for v in asdict(run).values()])
    return out.getvalue()


def write(folder: Path, runs: list[BenchRun], produced_by: dict[str, Any]) -> None:
    """results.json and results.csv in a new folder (the plot is plot.py's)."""
    folder.mkdir(parents=True, exist_ok=False)
    doc = {"runs": [asdict(r) for r in runs], **produced_by}
    (folder / RESULTS).write_text(json.dumps(doc, indent=2) + "\n", "utf-8")
    (folder / CSV).write_text(csv_text(runs), "utf-8")


def load(folder: Path) -> tuple[list[BenchRun], dict[str, Any]]:
    doc = json.loads((folder / RESULTS).read_text("utf-8"))
    names = {f.name for f in fields(BenchRun)}
    runs = [BenchRun(**{k: v for k, v in r.items() if k in names}) for r in doc.pop("runs")]
    return runs, doc


def run_folders(root: Path) -> list[Path]:
    """The recipe's result folders, oldest first (their names are UTC times, which sort as times do)."""
    return sorted(p for p in root.iterdir() if (p / RESULTS).is_file()) if root.is_dir() else []
