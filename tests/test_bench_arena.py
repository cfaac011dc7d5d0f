"""`recipegen bench --profile arena` against the Spark Arena leaderboard's published profile
(tests/fixtures/spark-arena/spark-arena-v2.yaml, a copy of spark-arena/recipe-registry's file; its README names the
commit): every option, and the schedule cell by cell in its order. The YAML is parsed here, so the test fails when
the profile drifts from the file or the file from the profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from generator.bench.options import PROFILES, BenchOptions, layered
from generator.resolve.benchtable import ALIASES, LIST_OPTIONS, BenchTable

PUBLISHED = Path(__file__).parent / "fixtures" / "spark-arena" / "spark-arena-v2.yaml"


@pytest.fixture(scope="module")
def published() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(PUBLISHED.read_text())
    assert data["framework"] == "llama-benchy"
    return data


@pytest.fixture(scope="module")
def arena() -> BenchOptions:
    return layered(BenchTable(), "arena", {})


def test_every_option_of_the_published_profile_is_the_arena_profiles(published: dict[str, Any],
                                                                     arena: BenchOptions):
    args = {ALIASES.get(k, k): v for k, v in published["args"].items()}  # sparkrun's prefix_caching alias
    in_force = {name: list(getattr(arena, name)) for name in LIST_OPTIONS}
    in_force |= {"runs": arena.runs, **arena.extra}
    assert in_force == args
    # the values the issue quotes, read from the file rather than trusted
    assert args["depth"] == [0, 4096, 8192, 16384, 32768, 65535, 100000]
    assert (args["pp"], args["tg"], args["concurrency"]) == ([2048], [128], [1, 2, 5, 10])
    assert args["enable_prefix_caching"] is True and args["runs"] == 3


def test_the_schedule_is_the_published_one_cell_by_cell_in_its_order(published: dict[str, Any],
                                                                     arena: BenchOptions):
    entries = published["schedule"]
    assert all(set(e) == {"depth", "concurrency"} for e in entries)  # no per-cell overrides to carry
    cells = [(e["depth"], e["concurrency"]) for e in entries]
    assert list(arena.schedule) == cells
    # the schedule orders the grid: each of depth x concurrency exactly once
    assert len(cells) == 28 and sorted(cells) == sorted((d, c) for d in arena.depth for c in arena.concurrency)


def test_the_arena_runs_llama_benchy_once_per_cell_as_sparkrun_does(arena: BenchOptions):
    """sparkrun's scheduler (src/sparkrun/benchmarking/scheduler.py, run_schedule): one llama-benchy process per
    cell, each with that one depth and concurrency; after the first, --no-warmup and --skip-coherence."""
    passes = arena.passes()
    assert [(p.depth, p.concurrency) for p in passes] == [((d,), (c,)) for d, c in arena.schedule]
    first, *rest = [p.argv() for p in passes]
    for argv in (first, *rest):
        words = " ".join(argv)
        assert "--pp 2048 --tg 128 " in words and "--runs 3" in words and "--enable-prefix-caching" in words
    assert "--no-warmup" not in first and "--skip-coherence" not in first
    assert all("--no-warmup" in argv and "--skip-coherence" in argv for argv in rest)
    assert first[first.index("--depth"):first.index("--depth") + 4] == ["--depth", "8192", "--concurrency", "5"]


def test_the_command_line_narrows_the_grid_and_the_schedule_keeps_its_order(arena: BenchOptions):
    narrowed = layered(BenchTable(), "arena", {"concurrency": (1,)})
    assert [(p.depth[0], p.concurrency[0]) for p in narrowed.passes()] == [c for c in arena.schedule if c[1] == 1]
    # cells the schedule does not name run after it, depth first, as llama-benchy orders a grid
    other = layered(BenchTable(), "arena", {"depth": (0, 256)})
    assert [(p.depth[0], p.concurrency[0]) for p in other.passes()] == [
        (0, 1), (0, 10), (0, 5), (0, 2), (256, 1), (256, 2), (256, 5), (256, 10)]


def test_options_without_a_schedule_are_one_llama_benchy_run_of_the_whole_grid():
    options = layered(BenchTable(), "quick", {"depth": (0, 4096), "concurrency": (1, 2)})
    assert options.schedule == () and options.passes() == [options]
    assert "schedule" not in PROFILES["quick"]


def test_skip_coherence_comes_from_the_recipe_or_the_command_line():
    table = BenchTable(options={"skip_coherence": True})
    assert "--skip-coherence" in layered(table, None, {}).argv()
    assert "--skip-coherence" in layered(BenchTable(), None, {"skip_coherence": True}).argv()
    assert "--skip-coherence" not in layered(BenchTable(), None, {"skip_coherence": None}).argv()


def test_the_timeout_bounds_the_whole_schedule_not_each_cell(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A stand-in for llama-benchy: the first cell takes 1.5 s, the second would take 30. With 4 s for the whole,
    the second is stopped 4 s after the start (2.5 s into it), not 4 s into it."""
    import sys
    import time

    from generator.bench import runner

    def command(request: runner.BenchRequest, tokenizer: str, report: Path, book_url: str | None) -> list[str]:
        pause = 1.5 if request.options.depth == (0,) else 30
        return [sys.executable, "-c", f"import time; time.sleep({pause}); open({str(report)!r}, 'w').write('{{}}')"]

    monkeypatch.setattr(runner, "command", command)
    monkeypatch.setattr(runner, "check_tokenizer", lambda name: name)
    options = BenchOptions(depth=(0, 1), schedule=((0, 1), (1, 1)), timeout=4)
    started = time.monotonic()
    with pytest.raises(runner.BenchError, match=r"^cell 2 of 2 \(depth 1, concurrency 1\): llama-benchy did not "
                                                r"finish within 4s"):
        runner.run(runner.BenchRequest("http://127.0.0.1:9", "tiny", "org/tiny", options, None), lambda line: None)
    assert time.monotonic() - started < 5.0
