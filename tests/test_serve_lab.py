"""Issue 19 acceptance, through the real lab: `up` ends with one real request whose TTFT and decode rate match
what the stand-in engine was told to do, a head whose completions fail fails `up` (its error, its ranks' logs,
nothing left running), `smoke`, and `bench` with llama-benchy offline (a word-level tokenizer built here, a
local text) writing results.json, results.csv and plot.png, twice, then `--compare`."""

from __future__ import annotations

import csv
import json
import random
import re
from pathlib import Path

import pytest

from lab import Lab
from generator.deploy.probe import probe
from helpers.deploylab import (MODEL, SERVED, containers, project, run, sglang_recipe,  # noqa: F401 - project:
                             vllm_recipe)  # the fixture
from helpers.serve import needs_llama_benchy, word_level_tokenizer  # noqa: F401 - moved to tests/helpers/

pytestmark = pytest.mark.lab

DECODE_TPS, TTFT_BASE_MS = 25, 400
RATES = {"LAB_DECODE_TPS": str(DECODE_TPS), "LAB_TTFT_BASE_MS": str(TTFT_BASE_MS), "LAB_PREFILL_TPS": "4000"}


def test_up_ends_with_a_real_request_at_the_rates_the_engine_was_given(project, clean_lab: Lab):
    lab = clean_lab
    root = project({"served": vllm_recipe(2, env=RATES)}, nodes=2)
    up = run(lab, root, "up", "served", "--timeout", "120", timeout=300)
    assert up.returncode == 0, up.stderr
    line = next(li for li in up.stdout.splitlines() if "first request:" in li)
    ttft = float(re.search(r"TTFT (\d+) ms", line).group(1))
    rate = float(re.search(r"([\d.]+) tok/s", line).group(1))
    assert abs(ttft - TTFT_BASE_MS) <= 0.3 * TTFT_BASE_MS, line  # the prompt adds ~5 ms at 4000 tok/s
    assert abs(rate - DECODE_TPS) <= 0.3 * DECODE_TPS, line
    assert '"The quick brown fox' in line
    # The head 404s the Hugging Face id, so the probe that passed asked the served name.
    head = f"http://{lab.nodes[0].address}:8000"
    assert probe(head, MODEL, timeout=30).error == f"HTTP 404: The model `{MODEL}` does not exist."
    smoke = run(lab, root, "smoke", "served")
    assert smoke.returncode == 0 and re.search(r"TTFT \d+ ms, [\d.]+ tok/s", smoke.stdout), smoke.stderr


def test_up_on_sglang_ends_with_a_real_request_too(project, clean_lab: Lab):
    lab = clean_lab
    recipe = sglang_recipe(2) + "".join(f'{k} = "{v}"\n' for k, v in RATES.items())  # into its [env]
    root = project({"sgl": recipe}, nodes=2)
    up = run(lab, root, "up", "sgl", "--timeout", "120", timeout=300)
    assert up.returncode == 0, up.stderr
    line = next(li for li in up.stdout.splitlines() if "first request:" in li)
    rate = float(re.search(r"([\d.]+) tok/s", line).group(1))
    assert abs(rate - DECODE_TPS) <= 0.3 * DECODE_TPS, line
    assert f"serving {SERVED} at http://{lab.nodes[0].address}:30000" in up.stdout


def test_a_head_whose_completions_fail_fails_up_with_the_error_and_its_logs_and_cleans_up(project,
                                                                                      clean_lab: Lab):
    lab = clean_lab
    root = project({"broken": vllm_recipe(2, env={"LAB_FAIL_COMPLETIONS": "chat template rendering failed"})},
                   nodes=2)
    up = run(lab, root, "up", "broken", "--timeout", "120", timeout=300)
    assert up.returncode == 1
    assert f"the first request to {SERVED}" in up.stderr and "HTTP 500: chat template rendering failed" in up.stderr
    assert "--- last log lines of spark1 ---" in up.stderr and "--- last log lines of spark2 ---" in up.stderr
    assert "spark1 | [vllm] serving tiny" in up.stderr  # /health answered all along
    assert "nothing of it runs on any node" in up.stderr
    for node in lab.nodes[:2]:
        assert containers(lab, node, "broken") == []


def test_bench_offline_writes_results_near_the_engines_rate_then_compares(project, clean_lab: Lab, tmp_path: Path):
    needs_llama_benchy()
    lab = clean_lab
    root = project({"bench1": vllm_recipe(1, env=RATES) + "\n[bench]\ntg = [24]\nruns = 1\n"}, nodes=1)
    rng = random.Random(19)
    vocabulary = [f"w{i}" for i in range(400)] + "the of and to in is was it for on".split()
    text = "\n".join(" ".join(rng.choice(vocabulary) for _ in range(12)) + "." for _ in range(600))
    (tmp_path / "book.txt").write_text(text)
    tokenizer = word_level_tokenizer(text, tmp_path / "tokenizer.json")
    idle = run(lab, root, "bench", "bench1", "--tokenizer", str(tokenizer), "--text", str(tmp_path / "book.txt"))
    assert idle.returncode == 1 and "the head is not serving" in idle.stderr, idle.stderr
    assert run(lab, root, "up", "bench1", "--no-probe", "--timeout", "120", timeout=300).returncode == 0

    missing = run(lab, root, "bench", "bench1", "--tokenizer", str(tmp_path / "nope.json"), "--text",
                  str(tmp_path / "book.txt"))
    assert missing.returncode == 1 and "tokenizer not found" in missing.stderr

    args = ["bench", "bench1", "--tokenizer", str(tokenizer), "--text", str(tmp_path / "book.txt"),
            "--pp", "128", "--depth", "0,256", "--concurrency", "1,2"]
    first = run(lab, root, *args, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    folders = sorted((root / "bench" / "bench1").iterdir())
    assert len(folders) == 1
    results = json.loads((folders[0] / "results.json").read_text())
    tests = {(r["depth"], r["concurrency"]): r for r in results["runs"]}
    assert set(tests) == {(0, 1), (0, 2), (256, 1), (256, 2)}
    assert all(r["pp"] == 128 and r["tg"] == 24 for r in results["runs"])  # [bench] tg, the command line's pp
    for depth in (0, 256):
        assert abs(tests[depth, 1]["tg_tps"] - DECODE_TPS) <= 0.3 * DECODE_TPS, tests[depth, 1]
    assert tests[256, 1]["ttft_ms"] > tests[0, 1]["ttft_ms"]  # a deeper context takes longer to the first token
    assert results["served_model_name"] == SERVED and results["model"] == MODEL
    assert results["llama_benchy"] == "0.4.0" and results["input_hash"] and results["image"]
    with (folders[0] / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["depth"]), int(r["concurrency"])) for r in rows] == [(r["depth"], r["concurrency"])
                                                                         for r in results["runs"]]
    assert (folders[0] / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    second = run(lab, root, *args, "--runs", "1", timeout=600)
    assert second.returncode == 0, second.stderr
    compare = run(lab, root, "bench", "bench1", "--compare")
    assert compare.returncode == 0, compare.stderr
    assert "ratio" in compare.stdout and re.search(r"regress", compare.stdout)
