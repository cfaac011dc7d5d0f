"""`recipegen bench RECIPE`: llama-benchy against the running head (generator.bench), a live table while it runs,
the results table at the end; `--compare` shows the last two runs side by side. Formatting only."""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click

from generator.cli.compile import cluster_option, compile_recipe, inputs
from generator.cli.deploy import out_option
from generator.cli.params import counts, seconds
from generator.deploy.progress import LiveTable
from generator.resolve.benchtable import BOUNDS

if TYPE_CHECKING:
    from rich.table import Table

    from generator.bench.compare import Comparison
    from generator.bench.results import BenchRun

def _list_option(name: str, what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    least, most = BOUNDS[name]
    return click.option(f"--{name}", multiple=True, callback=counts(least, most), metavar="N[,N...]",
                        help=f"{what}, {least} to {most} (llama-benchy --{name}).")


@click.command()
@click.argument("recipe")
@cluster_option
@out_option
@click.option("--profile", type=click.Choice(["quick", "arena"]),
              help="quick: one short test; arena: the Spark Arena leaderboard's profile (spark-arena-v2: 28 "
                   "depth x concurrency cells in its fixed order, one llama-benchy run each; docs/bench.md).")
@_list_option("pp", "Prompt lengths, tokens")
@_list_option("tg", "Tokens generated per request")
@_list_option("depth", "Context depths, tokens")
@_list_option("concurrency", "Concurrent requests")
@click.option("--runs", type=click.IntRange(min=1), help="Runs per test (llama-benchy --runs).")
@click.option("--tokenizer", metavar="PATH|ID", help="Tokenizer: a tokenizer.json, its folder, or a Hugging Face id "
                                                     "(default: the model's own).")
@click.option("--skip-coherence", is_flag=True, help="Skip llama-benchy's coherence test (it asks the capital of "
                                                       "France: a model with random weights cannot answer).")
@click.option("--text", type=click.Path(path_type=Path, dir_okay=False),
              help="A local text to cut prompts from, instead of downloading a book (runs with no internet).")
@click.option("--timeout", callback=seconds(open_=True),
              help="Seconds the whole benchmark may take (default: [bench] timeout, else none).")
@click.option("--results", "results_root", type=click.Path(path_type=Path, file_okay=False),
              help="Folder of results (default: bench/ of the project).")
@click.option("--compare", is_flag=True, help="Run nothing: show the last two runs side by side, with ratios.")
@click.option("--via-router", is_flag=True, help="Through the cluster's router (its first node) instead of the head "
                                                  "(a router that asks for an API key is not supported here).")
def bench(recipe: str, cluster_path: Path | None, out_dir: Path | None, profile: str | None,
          pp: tuple[int, ...] | None, tg: tuple[int, ...] | None, depth: tuple[int, ...] | None,
          concurrency: tuple[int, ...] | None, runs: int | None,
          tokenizer: str | None, skip_coherence: bool, text: Path | None, timeout: float | None,
          results_root: Path | None, compare: bool, via_router: bool) -> None:
    """Benchmark RECIPE's running head with llama-benchy (prompt processing and generation tokens/s, time to first
    token, over prompt depth and concurrency). Results: bench/<recipe>/<UTC time>/ with results.json,
    results.csv and plot.png. Defaults come from the recipe's [bench] table."""
    given = inputs(cluster_path, out_dir, (recipe,))
    root = (results_root or given.project.root / "bench")
    if compare:
        from generator.bench.compare import compare as compare_runs

        rid = given.project.recipe_id(recipe)
        comparison = compare_runs(root / rid)
        if comparison is None:
            click.echo(f"{rid}: fewer than two runs under {root / rid} to compare", err=True)
            sys.exit(1)
        _show_comparison(rid, comparison)
        return
    from generator.bench.action import bench as run_bench
    from generator.bench.options import layered
    from generator.bench.runner import BenchError
    from generator.deploy.targets import deployment

    plan, files, _ = compile_recipe(recipe, given)
    dep = deployment(plan, files, given.out)
    options = layered(plan.recipe.bench, profile, {
        "pp": pp, "tg": tg, "depth": depth, "concurrency": concurrency,
        "runs": runs, "tokenizer": tokenizer, "timeout": timeout,
        "skip_coherence": True if skip_coherence else None})  # not given: the recipe's [bench] decides
    if plan.recipe.bench.schedule:
        click.echo(f"{dep.project}: [bench] schedule is sparkrun's; recipegen runs the options only", err=True)
    base_url = None
    if via_router:
        from generator.cli.router import router_url

        base_url, key = router_url(dep)
        if key:  # llama-benchy takes a key only on its command line, where every user of the machine reads it
            click.echo(f"{dep.project}: bench --via-router: the router asks for an API key, which llama-benchy "
                       "would have to get on its command line; bench the head directly", err=True)
            sys.exit(1)
    live = _Live()
    try:
        with live:
            outcome = run_bench(dep, options, text, root, live.line, live.event, base_url)
    except BenchError as err:
        click.echo(f"{dep.project}: bench: {err}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo(f"{dep.project}: bench interrupted; llama-benchy was stopped, nothing was written", err=True)
        sys.exit(130)
    _show_runs(f"{dep.project}: {outcome.produced_by['served_model_name']}", outcome.runs)
    if outcome.not_written is not None:
        click.echo(f"{dep.project}: bench: {outcome.not_written}; the results are kept in {outcome.folder} "
                   "(results.json, results.csv, plot.png): move them under bench/", err=True)
        sys.exit(1)
    click.echo(f"{dep.project}: results in {outcome.folder} (results.json, results.csv, plot.png)")
    # Everything is written. The interpreter's exit would search matplotlib's many objects for cycles (0.2 s of
    # CPU here, benchmarks/bench_overhead.py): frozen, they go with the process.
    gc.freeze()


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _show_runs(title: str, runs: list[BenchRun]) -> None:
    from generator.cli.table import table

    table(title, ["pp", "tg", "depth", "concurrency", "pp tok/s", "tg tok/s", "TTFT ms"],
          [[str(r.pp), str(r.tg), str(r.depth), str(r.concurrency), _fmt(r.pp_tps), _fmt(r.tg_tps),
            _fmt(r.ttft_ms, 0)] for r in sorted(runs, key=lambda r: r.key)])  # the files keep the order run


def _show_comparison(rid: str, c: Comparison) -> None:
    from generator.bench.compare import FIGURES, REGRESSION
    from generator.cli.table import table

    rows = []
    for row in c.rows:
        cells = [str(v) for v in row.key]
        for figure in FIGURES:
            ratio = row.ratio(figure)
            mark = " !" if row.worse(figure) else ""
            cells += [_fmt(row.old[figure]), _fmt(row.new[figure]), "-" if ratio is None else f"{ratio:.2f}{mark}"]
        rows.append(cells)
    columns = ["pp", "tg", "depth", "conc"]
    for figure in ("pp tok/s", "tg tok/s", "TTFT ms"):
        columns += [f"{figure} old", "new", "ratio"]
    table(f"{rid}: {c.old.name} -> {c.new.name}", columns, rows)
    regressed = [r for r in c.rows if r.regressed]
    if regressed:
        click.echo(f"{rid}: {len(regressed)} of {len(c.rows)} tests regressed (marked !: more than "
                   f"{REGRESSION:.0%} worse)")
    else:
        click.echo(f"{rid}: no regression beyond {REGRESSION:.0%}")


class _Live(LiveTable):
    """llama-benchy's tests as they run (generator.bench.live): a rich table on a terminal, refreshed as requests
    finish; a line per test as it starts and as it ends otherwise (CI, pipes)."""

    def __init__(self) -> None:
        from generator.bench.live import LiveTests

        super().__init__()
        self.tests = LiveTests()
        self._current: tuple[int, int, int, int] | None = None

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            super().__exit__(*exc)
        elif self._current is not None and exc[0] is None:
            self._said(self._current, "done")

    def line(self, text: str) -> None:
        pass  # llama-benchy's own prints: shown only when it fails (the runner keeps its last lines)

    def event(self, event: dict[str, Any]) -> None:
        key = self.tests.event(event)
        if key is None:
            return
        if self._live is not None:
            self._live.update(self._table())
        elif key != self._current:
            if self._current is not None:
                self._said(self._current, "done")
            self._current = key
            self._said(key, "running")

    def _said(self, key: tuple[int, int, int, int], state: str) -> None:
        test = self.tests.tests[key]
        figures = f": TTFT {_fmt(test.ttft_ms, 0)} ms, {_fmt(test.tps)} tok/s per request" if state == "done" else ""
        print(f"[{time.monotonic() - self.started:6.1f}s] bench pp {key[0]}, tg {key[1]}, depth {key[2]}, "
              f"concurrency {key[3]}: {state}{figures}", file=sys.stderr, flush=True)

    def _table(self) -> Table:
        from rich.table import Table

        table = Table("pp", "tg", "depth", "concurrency", "requests", "errors", "TTFT ms", "tok/s per request",
                      title=f"llama-benchy ({time.monotonic() - self.started:.0f}s)")
        for (pp, tg, depth, conc), test in self.tests.tests.items():
            table.add_row(str(pp), str(tg), str(depth), str(conc), f"{test.done}/{test.started}", str(test.errors),
                          _fmt(test.ttft_ms, 0), _fmt(test.tps))
        return table

