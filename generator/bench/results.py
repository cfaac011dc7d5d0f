"""A benchmark's results: one BenchRun per llama-benchy test, read from its JSON report, written as
bench/<recipe>/<UTC time>/results.json (the runs, and what produced them) and results.csv (the runs)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from generator.diagnostics import Diagnostic, RecipegenError, display_path

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
    """The runs and the rest of results.json; a file that is not what `write` wrote (truncated, edited, another
    file's bytes) is one RecipegenError naming it."""
    path = folder / RESULTS

    def damaged(why: str) -> RecipegenError:
        return RecipegenError(Diagnostic(display_path(path), None, None, None, f"not a results file: {why}"))

    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise damaged(f"cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise damaged("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise damaged(f"not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        raise damaged("not a JSON object with a list of `runs`")
    runs = []
    for i, run in enumerate(doc.pop("runs")):
        if not isinstance(run, dict):
            raise damaged(f"runs[{i}] is not an object")
        for f in fields(BenchRun):
            value = run.get(f.name)
            whole = isinstance(value, int) and not isinstance(value, bool)
            figure = value is None or whole or isinstance(value, float)
            if f.name not in run or not (whole if f.type == "int" else figure):
                raise damaged(f"runs[{i}].{f.name} is missing or not a number")
        runs.append(BenchRun(**{f.name: run[f.name] for f in fields(BenchRun)}))
    return runs, doc


def run_folders(root: Path) -> list[Path]:
    """The recipe's result folders, oldest first (their names are UTC times, which sort as times do)."""
    return sorted(p for p in root.iterdir() if (p / RESULTS).is_file()) if root.is_dir() else []
