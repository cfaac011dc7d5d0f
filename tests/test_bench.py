"""`recipegen bench` without a head: options layered ([bench] < profile < command line), llama-benchy's command
line and report as its 0.4.0 writes them, results files, the comparison, and the errors a user meets first."""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

import pytest

from generator.bench.compare import compare
from generator.bench.options import PROFILES, BenchOptions, layered
from generator.bench.results import BenchRun, load, runs_of, write
from generator.bench.runner import BenchError, BenchRequest, check_tokenizer, command
from generator.resolve.benchtable import bench_table


def test_the_command_line_wins_over_the_profile_which_wins_over_the_recipe():
    table = bench_table({"pp": 1024, "tg": [64], "runs": 5, "no_cache": True, "timeout": 90})
    assert layered(table, None, {}) == BenchOptions(pp=(1024,), tg=(64,), runs=5, timeout=90.0,
                                                    extra={"no_cache": True})
    quick = layered(table, "quick", {"concurrency": (1, 4), "runs": None})
    assert quick.pp == tuple(PROFILES["quick"]["pp"]) and quick.runs == PROFILES["quick"]["runs"]
    assert quick.concurrency == (1, 4) and quick.extra == {"no_cache": True}


def test_llama_benchy_is_asked_for_the_served_name_never_the_hugging_face_id(tmp_path: Path):
    options = BenchOptions(pp=(128,), depth=(0, 4096), extra={"no_cache": True, "no_warmup": False,
                                                             "latency_mode": "none"})
    argv = command(BenchRequest("http://10.0.0.1:8000", "tiny", "org/tiny", options, None), "tok.json",
                   tmp_path / "r.json", None)
    assert argv[argv.index("--served-model-name") + 1] == "tiny"
    assert argv[argv.index("--model") + 1] == "org/tiny"  # its tokenizer default and report label only
    assert argv[argv.index("--base-url") + 1] == "http://10.0.0.1:8000/v1"
    words = " ".join(argv)
    assert "--pp 128 " in words and "--depth 0 4096 " in words and "--no-cache" in words
    assert "--no-warmup" not in words and "--latency-mode none" in words
    assert "--format json --save-result" in words


REPORT = {"version": "0.4.0", "benchmarks": [
    {"concurrency": 1, "context_size": 0, "prompt_size": 512, "response_size": 32,
     "is_context_prefill_phase": False, "pp_throughput": {"mean": 2000.0, "std": 1, "values": [2000.0]},
     "tg_throughput": {"mean": 40.0, "std": 0, "values": [40.0]}, "e2e_ttft": {"mean": 250.0, "std": 0,
                                                                               "values": [250.0]}},
    {"concurrency": 1, "context_size": 4096, "prompt_size": 512, "response_size": 32,
     "is_context_prefill_phase": True, "pp_throughput": {"mean": 1.0, "std": 0, "values": [1.0]}},
    {"concurrency": 2, "context_size": 4096, "prompt_size": 512, "response_size": 32,
     "is_context_prefill_phase": False, "pp_throughput": None, "tg_throughput": {"mean": 70.0, "std": 0,
                                                                                 "values": [70.0]}},
]}


def test_runs_are_read_from_llama_benchys_report_without_its_context_loading_phases(tmp_path: Path):
    runs = runs_of(REPORT)
    assert runs == [BenchRun(512, 32, 0, 1, 2000.0, 40.0, 250.0), BenchRun(512, 32, 4096, 2, None, 70.0, None)]
    write(tmp_path / "r", runs, {"recipe": "x", "llama_benchy": "0.4.0"})
    assert load(tmp_path / "r") == (runs, {"recipe": "x", "llama_benchy": "0.4.0"})
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    assert set(doc["runs"][0]) == {"pp", "tg", "depth", "concurrency", "pp_tps", "tg_tps", "ttft_ms"}
    with (tmp_path / "r" / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rows[1] == {"pp": "512", "tg": "32", "depth": "4096", "concurrency": "2", "pp_tps": "", "tg_tps": "70.0",
                       "ttft_ms": ""}


def test_compare_takes_the_last_two_runs_and_marks_what_got_worse(tmp_path: Path):
    root = tmp_path / "bench" / "r"
    write(root / "20260101T000000Z", [BenchRun(512, 32, 0, 1, 2000.0, 40.0, 250.0)], {})
    assert compare(root) is None
    write(root / "20260102T000000Z", [BenchRun(512, 32, 0, 1, 1000.0, 40.0, 250.0)], {})
    write(root / "20260103T000000Z", [BenchRun(512, 32, 0, 1, 1000.0, 41.0, 300.0),
                                      BenchRun(512, 32, 0, 2, 1900.0, 80.0, 260.0)], {})
    result = compare(root)
    assert result is not None and (result.old.name, result.new.name) == ("20260102T000000Z", "20260103T000000Z")
    same, added = result.rows
    assert same.ratio("tg_tps") == pytest.approx(41 / 40) and not same.worse("tg_tps")
    assert same.worse("ttft_ms") and same.regressed  # 20% slower to the first token
    assert added.ratio("pp_tps") is None and not added.regressed


def test_a_tokenizer_that_is_not_there_is_named(tmp_path: Path):
    pytest.importorskip("tokenizers")
    with pytest.raises(BenchError, match="tokenizer not found: no file or folder ./missing/tokenizer.json"):
        check_tokenizer("./missing/tokenizer.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BenchError, match="has no tokenizer.json"):
        check_tokenizer(str(tmp_path / "empty"))


@pytest.mark.parametrize("name", ["org/name--x", "org/na..me", "../tok"])
def test_a_tokenizer_is_read_as_a_path_or_an_id_as_every_command_reads_a_model(name: str):
    """modelid.read_model decides: what is no Hugging Face id is a path, named missing, never asked of the hub."""
    pytest.importorskip("tokenizers")
    with pytest.raises(BenchError, match=f"tokenizer not found: no file or folder {re.escape(name)}$"):
        check_tokenizer(name)


def test_without_the_bench_extra_the_error_gives_the_pip_command(monkeypatch: pytest.MonkeyPatch):
    from importlib import metadata

    from generator.bench import runner

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(runner.metadata, "version", missing)
    with pytest.raises(BenchError, match=r"llama-benchy is not installed \(the `bench` extra\): ") as raised:
        runner.llama_benchy_version()
    # the extra of the project in use (its own requirements, this Python's pip): never whatever a registry
    # calls recipegen (issue 30)
    said = str(raised.value)
    assert f"{sys.executable} -m pip install llama-benchy==0.4.0 'matplotlib" in said
    assert "recipegen[bench]" not in said


def test_the_live_table_follows_llama_benchys_progress_events():
    """Events as llama-benchy 0.4.0's ProgressEmitter writes them (llama_benchy/progress.py)."""
    from generator.bench.live import LiveTests

    live = LiveTests()
    start = {"schema": 1, "type": "request_start", "model": "org/tiny", "base_url": "u", "prompt_size": 512,
             "response_size": 32, "context_size": 0, "concurrency": 2, "run_index": 1, "target_label": ""}
    assert live.event({"schema": 1, "type": "header", "llama_benchy_version": "0.4.0"}) is None
    assert live.event({**start, "request_id": 1}) == (512, 32, 0, 2)
    live.event({**start, "request_id": 2})
    # a streamed chunk (one a token) changes no figure: no redraw of the table for it
    assert live.event({"schema": 1, "type": "tokens", "ts": 1.0, "request_id": 1, "count": 1, "snippet": "a",
                       "estimated": True}) is None
    live.event({"type": "request_first_token", "request_id": 1, "ttft_s": 0.2})
    live.event({"type": "request_first_token", "request_id": 2, "ttft_s": 0.4})
    live.event({"type": "request_end", "request_id": 1, "total_tokens": 32, "prompt_tokens": 512,
                "decode_seconds": 0.775, "error": ""})
    live.event({"type": "request_end", "request_id": 2, "total_tokens": 0, "prompt_tokens": 0,
                "decode_seconds": 0, "error": "HTTP 500: boom"})
    test = live.tests[512, 32, 0, 2]
    assert (test.started, test.done, test.errors) == (2, 2, 1)
    assert test.ttft_ms == pytest.approx(300) and test.tps == pytest.approx(40)
    assert live.event({"type": "request_end", "request_id": 99}) is None  # a warm-up's: not a test's
