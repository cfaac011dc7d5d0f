#!/usr/bin/env python3
"""The `fit` estimate against published vLLM boot logs: prints the table of docs/fit.md and the error
distribution under it. Run from anywhere:

    python3 benchmarks/fit_accuracy.py

Each case of tests/fixtures/fit-logs/cases.toml is a recipe (engine, image, model, parallelism, flags) and the
cluster's gpu_memory, judged by the same code `recipegen fit` runs (fit_report, judge) against the model's
config.json in tests/fixtures/hf-cache (sources in its SOURCES.md); the published figures are what the log printed
("Model loading took X GiB", "Available KV cache memory", "GPU KV cache size", the largest length it named) and the
verdict the engine reached. Nothing here runs an engine.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from generator.check.fit import judge  # noqa: E402
from generator.check.fitreport import FitReport, fit_report  # noqa: E402
from generator.engines.memory import GIB, graph_estimate  # noqa: E402
from generator.engines.modelshape import model_shape  # noqa: E402
from generator.resolve.load import load_cluster, load_recipe  # noqa: E402
from generator.resolve.modelfiles import NotFound  # noqa: E402

CASES = ROOT / "tests" / "fixtures" / "fit-logs" / "cases.toml"
CACHE = ROOT / "tests" / "fixtures" / "hf-cache" / "hub"
VERDICTS = {"fit": "cannot load", "fit-context": "refused"}


@dataclass(frozen=True)
class Outcome:
    case: dict[str, Any]
    report: FitReport
    verdict: str
    # "weights", "pool", "largest", "tokens", "graphs" -> (estimate - published) / published; "layout": the tokens
    # recipegen puts in the published pool against the published tokens (the KV layout alone, no overhead)
    errors: dict[str, float]
    graphs: float  # what vLLM would log as "Estimated CUDA graph memory", in bytes


def fixture_config(model: str) -> dict[str, Any]:
    """The model's config.json in the fixture cache."""
    return json.loads((CACHE / f"models--{model.replace('/', '--')}" / "snapshots" / "fixture" / "config.json")
                      .read_text("utf-8"))


def _write_case(case: dict[str, Any], folder: Path) -> tuple[Path, Path]:
    recipe = folder / "case" / "recipe.toml"
    recipe.parent.mkdir(parents=True)
    tp, per_node = int(case["tp"]), int(case.get("gpus_per_node", 1))  # GPUs one NVLink node holds
    count = -(-tp // per_node)  # the nodes the ranks fill (cases have no pipeline stages)
    recipe.write_text(f'engine = "vllm"\ndocker_image = {json.dumps(case["image"])}\n'
                      f'model = {json.dumps(case["model"])}\nrequired_nodes = {count}\ntensor_parallel_size = {tp}\n'
                      f"args = {json.dumps(case['args'])}\n", "utf-8")
    nodes = "".join(f'\n[[nodes]]\nname = "n{i}"\naddress = "10.0.0.{i + 1}"\ncontext = "n{i}"\n' for i in range(count))
    cluster = folder / "cluster.toml"
    cluster.write_text(f'name = "logs"\nuser = "u"\ngpu_memory = "{case["gpu_memory"]}"\ngpus_per_node = {per_node}\n'
                       f"{nodes}", "utf-8")
    return recipe, cluster


def outcome(case: dict[str, Any]) -> Outcome:
    """The case judged by recipegen's own code, with the fixture cache as the Hugging Face cache."""
    os.environ["HF_HUB_CACHE"] = str(CACHE)
    with tempfile.TemporaryDirectory() as tmp:
        recipe_path, cluster_path = _write_case(case, Path(tmp))
        report = fit_report(load_recipe(recipe_path, Path(tmp)), load_cluster(cluster_path))
    if isinstance(report, NotFound):
        raise SystemExit(f"{case['name']}: {report.reason}")
    rules = {j.rule for j in judge(report)}
    verdict = next((VERDICTS[r] for r in ("fit", "fit-context") if r in rules), "started")
    rank = min(report.ranks, key=lambda m: m.pool)
    published = case["published"]
    graphs = graph_estimate(report.ranks[0].layers, report.settings.max_num_seqs, model_shape(fixture_config(
        case["model"])).moe, report.settings.graphs_through_nccl)  # also where the release leaves them out
    estimate = {"weights": max(m.weights for m in report.ranks) / GIB, "pool": rank.pool / GIB,
                "largest": float(rank.longest(1 << 24)), "tokens": float(rank.capacity(report.length)[0]),
                "graphs": graphs / GIB}
    errors = {k: estimate[k] / published[_key(k)] - 1 for k in estimate if _key(k) in published}
    if "tokens" in published and "pool_gib" in published:
        given = dataclasses.replace(rank, pool_given=published["pool_gib"] * GIB)
        errors["layout"] = given.capacity(report.length)[0] / published["tokens"] - 1
    return Outcome(case, report, verdict, errors, graphs)


def _key(figure: str) -> str:
    return f"{figure}_gib" if figure in ("weights", "pool", "graphs") else figure


def _shown(o: Outcome) -> tuple[str, str]:
    published, rank = o.case["published"], min(o.report.ranks, key=lambda m: m.pool)
    said, est = [], []
    if "weights_gib" in published:
        said.append(f"weights {published['weights_gib']:.2f} GiB")
        est.append(f"weights {max(m.weights for m in o.report.ranks) / GIB:.2f} GiB")
    if "pool_gib" in published:
        said.append(f"KV pool {published['pool_gib']:.2f} GiB")
        est.append(f"KV pool {rank.pool / GIB:.2f} GiB (weights {rank.weights / GIB:.2f}, overhead "
                   f"{rank.overhead / GIB:.2f})")
    if "largest" in published:
        said.append(f"largest --max-model-len {published['largest']:,}")
        est.append(f"largest {rank.longest(1 << 24):,}")
    if "graphs_gib" in published:
        said.append(f"CUDA graphs {published['graphs_gib']:.2f} GiB")
        est.append(f"CUDA graphs {o.graphs / GIB:.2f} GiB")
    if "tokens" in published:
        said.append(f"{published['tokens']:,} tokens")
        est.append(f"{rank.capacity(o.report.length)[0]:,} tokens")
    return "; ".join(said), "; ".join(est)


def _distribution(outcomes: list[Outcome]) -> list[str]:
    lines = ["| figure | logs | errors | largest miss |", "|---|---|---|---|"]
    for key, label in (("weights", "weights per rank"), ("pool", "KV pool"), ("largest", "largest --max-model-len"),
                       ("tokens", "KV tokens"), ("layout", "KV tokens in the published pool"),
                       ("graphs", "CUDA graphs")):
        errors = sorted(o.errors[key] for o in outcomes if key in o.errors)
        if errors:
            worst = max(errors, key=abs)
            lines.append(f"| {label} | {len(errors)} | {', '.join(f'{e:+.2%}' for e in errors)} | {worst:+.2%} |")
    return lines


def main() -> None:
    outcomes = [outcome(case) for case in tomllib.loads(CASES.read_text("utf-8"))["case"]]
    print("| setup | published (source) | estimate | error | verdict: engine / recipegen | why it misses |")
    print("|---|---|---|---|---|---|")
    for o in outcomes:
        said, est = _shown(o)
        errors = ", ".join(f"{k} {e:+.2%}" for k, e in o.errors.items())
        engine = o.case["published"].get("verdict")
        verdict = f"{engine} / {o.verdict}" + (" (right)" if engine == o.verdict else " (WRONG)") if engine else \
            f"not in the log / {o.verdict}"
        print(f"| {o.case['name']} | {said} ({o.case['source']}: \"{o.case['quote']}\") | {est} | {errors} | "
              f"{verdict} | {o.case.get('why', '')} |")
    print()
    print("\n".join(_distribution(outcomes)))


if __name__ == "__main__":
    main()
