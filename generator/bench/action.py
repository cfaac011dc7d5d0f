"""The `bench` action: check, run llama-benchy, write the results folder; returns what it wrote (the CLI formats
it). Every check that can fail before the benchmark does, so a long run never starts to fail at its end."""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import tempfile
import threading
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from generator.bench.options import BenchOptions
from generator.bench.plot import plot, prepare
from generator.bench.results import PLOT, BenchRun, runs_of, write
from generator.bench.runner import BenchError, BenchRequest, llama_benchy_version, run
from generator.deploy.probe import served_models
from generator.deploy.targets import CompiledDeployment


@dataclass(frozen=True)
class BenchOutcome:
    folder: Path  # bench/<recipe>/<UTC time>/ (or, when that could not be written, where the results were kept)
    runs: list[BenchRun]
    produced_by: dict[str, Any]
    not_written: str | None = None  # why bench/<recipe>/<UTC time>/ could not be written (the figures are kept)


def bench(dep: CompiledDeployment, options: BenchOptions, text: Path | None, results_root: Path,
          on_line: Callable[[str], None], on_event: Callable[[dict[str, Any]], None],
          base_url: str | None = None) -> BenchOutcome:
    """Benchmark the running head (or, with `base_url`, the same model through that endpoint: the router);
    BenchError (one line) when it cannot."""
    url = base_url or dep.url
    table = dep.plan.recipe.bench
    if table.framework != "llama-benchy":
        raise BenchError(f"[bench] framework '{table.framework}': recipegen runs llama-benchy only")
    version = llama_benchy_version()
    served = dep.plan.served_model_name
    listed = served_models(url)
    what = "the router" if base_url else "the head"
    if listed is None:
        raise BenchError(f"{what} is not serving at {url} (`recipegen up {dep.project}` first)")
    if served not in listed:
        raise BenchError(f"{what} at {url} serves {', '.join(sorted(listed)) or 'nothing'}, not {served}")
    request = BenchRequest(url, served, dep.plan.recipe.model, options, text)
    _writable(results_root / dep.project)
    started = _now()
    threading.Thread(target=prepare, name="import matplotlib", daemon=True).start()
    report = run(request, on_line, on_event)
    runs = runs_of(report)
    if not runs:
        raise BenchError("llama-benchy reported no test results")
    produced_by = _produced_by(dep, request, version, started)
    folder = _new_folder(results_root / dep.project, started)
    title = f"{dep.project}: {served} ({dep.plan.recipe.docker_image})"
    try:
        _write(folder, runs, produced_by, title)
    except OSError as exc:  # writable a moment ago (disk full, folder removed): the figures go somewhere safe
        shutil.rmtree(folder, ignore_errors=True)  # never half a results folder for --compare to read
        kept = Path(tempfile.mkdtemp(prefix=f"recipegen-bench-{dep.project}-")) / folder.name
        _write(kept, runs, produced_by, title)
        return BenchOutcome(kept, runs, produced_by, f"cannot write {folder}: {exc.strerror or exc}")
    return BenchOutcome(folder, runs, produced_by)


def _write(folder: Path, runs: list[BenchRun], produced_by: dict[str, Any], title: str) -> None:
    write(folder, runs, produced_by)
    plot(runs, title, folder / PLOT)


def _writable(root: Path) -> None:
    """BenchError before the benchmark, not after it, when no results folder can be made under root. The folders
    it had to make for the check are removed again: a benchmark that fails writes nothing."""
    made = [p for p in (root, *root.parents) if not p.exists()]
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=root):
            pass
    except OSError as exc:
        raise BenchError(f"cannot write results in {root}: {exc.strerror or exc} (give --results DIR)") from None
    finally:
        for folder in made:  # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


def _new_folder(root: Path, when: datetime) -> Path:
    stamp = when.strftime("%Y%m%dT%H%M%SZ")
    folder, n = root / stamp, 1
    while folder.exists():  # two runs in one second: the later one sorts after
        n += 1
        folder = root / f"{stamp}-{n}"
    return folder


def _produced_by(dep: CompiledDeployment, request: BenchRequest, version: str,
                 started: datetime) -> dict[str, Any]:
    plan = dep.plan
    text: dict[str, Any] | None = None
    if request.text is not None:
        text = {"path": str(request.text.resolve()),
                "sha256": hashlib.sha256(request.text.read_bytes()).hexdigest()}
    return {
        "recipe": plan.recipe.id, "recipe_file": plan.source, "input_hash": plan.input_hash,
        "image": plan.recipe.docker_image, "engine": plan.recipe.engine, "model": plan.recipe.model,
        "served_model_name": plan.served_model_name, "engine_args": [a.word for a in plan.recipe.args],
        "cluster": {"name": plan.cluster.name, "file": plan.cluster_source,
                    "nodes": [{"name": n.node.name, "address": n.node.address} for n in plan.nodes]},
        "url": request.url, "via_router": request.url != dep.url,
        "started": started.isoformat(), "finished": _now().isoformat(),
        "recipegen": metadata.version("recipegen"), "llama_benchy": version,
        "options": asdict(request.options), "tokenizer": request.tokenizer, "text": text,
    }
