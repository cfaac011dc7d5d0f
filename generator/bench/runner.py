"""Running llama-benchy (the pinned `bench` extra) against a running head: its checks first, each a clear error
(the extra missing, the tokenizer not found, the head not serving), then the benchmark as a child process whose
lines are passed on as they come, bounded by a timeout, and its JSON report read back.

Two llama-benchy habits are worked around here, not patched: it reads its prompts from a book it downloads
(`--book-url`), caching it as ~/.cache/llama-benchy/<md5 of the URL>.txt, so `--text FILE` runs it with a
HOME of its own holding FILE under that name (the Hugging Face cache stays where it was); and a tokenizer it
cannot load silently becomes gpt2's, so the tokenizer is loaded here first and a failure stops the run.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from generator.bench.options import LLAMA_BENCHY, BenchOptions, install_command
from generator.resolve.modelid import read_model

OUTPUT_TAIL = 15  # lines of llama-benchy's output shown when it fails


class BenchError(Exception):
    """`bench` cannot run or did not finish: one line saying why and what to do."""


@dataclass(frozen=True)
class BenchRequest:
    url: str  # the head's base URL (no /v1)
    served: str  # the name the engine serves: every request asks for it (asking the HF id gets a 404)
    model: str  # the Hugging Face id: llama-benchy's --model, and the default tokenizer
    options: BenchOptions
    text: Path | None  # a local text to cut prompts from, instead of downloading a book

    @property
    def tokenizer(self) -> str:
        return self.options.tokenizer or self.model


def llama_benchy_version() -> str:
    """The installed llama-benchy's version, or BenchError saying how to install the extra."""
    try:
        version = metadata.version("llama-benchy")
    except metadata.PackageNotFoundError:
        raise BenchError(f"llama-benchy is not installed (the `bench` extra): {install_command()}") from None
    if version != LLAMA_BENCHY:
        raise BenchError(f"llama-benchy {version} is installed; recipegen reads {LLAMA_BENCHY}'s report: {install_command()}")
    return version


def check_tokenizer(name: str) -> str:
    """Load the tokenizer as llama-benchy will (a tokenizer.json, a folder holding one, or a Hugging Face id);
    BenchError when it cannot be, rather than llama-benchy's silent fall-back to gpt2's."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise BenchError(f"the tokenizers library is missing (the `bench` extra): {install_command()}") from None
    path = Path(name).expanduser()
    if path.exists():
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise BenchError(f"tokenizer not found: {path} has no tokenizer.json")
        try:
            Tokenizer.from_file(str(file))
        except Exception as err:  # noqa: BLE001 - the library's own error types are not public
            raise BenchError(f"tokenizer {file} cannot be read: {err}") from None
        return str(file)
    if read_model(name).hub_id is None:  # the one reading of ids and paths every command shares
        raise BenchError(f"tokenizer not found: no file or folder {name}")
    try:
        Tokenizer.from_pretrained(name)
    except Exception as err:  # noqa: BLE001
        raise BenchError(f"tokenizer {name} not found in the Hugging Face cache nor downloadable ({err}); "
                         "give --tokenizer PATH (a tokenizer.json or its folder)") from None
    return name


def command(request: BenchRequest, tokenizer: str, report: Path, book_url: str | None) -> list[str]:
    argv = [sys.executable, "-m", "llama_benchy", "--base-url", f"{request.url}/v1", "--model", request.model,
            "--served-model-name", request.served, "--tokenizer", tokenizer, *request.options.argv(),
            "--format", "json", "--save-result", str(report), "--emit-progress", "-"]
    return argv + (["--book-url", book_url] if book_url else [])


def environment(request: BenchRequest, home: Path | None) -> dict[str, str]:
    """The child's environment: the head reached directly (no proxy), and with --text a HOME of its own while
    the Hugging Face cache stays the user's."""
    env = dict(os.environ)
    host = urlsplit(request.url).hostname or ""
    for name in ("NO_PROXY", "no_proxy"):
        env[name] = ",".join(p for p in (env.get(name, ""), host) if p)
    if home is not None:
        env.setdefault("HF_HOME", os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface"))
        env["HOME"] = str(home)
    return env


def run(request: BenchRequest, on_line: Callable[[str], None],
        on_event: Callable[[dict[str, Any]], None] = lambda e: None) -> dict[str, Any]:
    """llama-benchy's JSON report of this request (with a schedule, its runs' reports as one, in the order they
    ran); BenchError when one fails or the whole runs out of time."""
    tokenizer = check_tokenizer(request.tokenizer)
    passes = request.options.passes()
    timeout = request.options.timeout
    deadline = time.monotonic() + timeout if timeout else None
    with tempfile.TemporaryDirectory(prefix="recipegen-bench-") as scratch:
        home = book_url = None
        if request.text is not None:
            if not request.text.is_file():
                raise BenchError(f"--text {request.text}: no such file")
            home = Path(scratch) / "home"
            book_url = request.text.resolve().as_uri()
            cache = home / ".cache" / "llama-benchy"
            cache.mkdir(parents=True)
            name = hashlib.md5(book_url.encode()).hexdigest()  # noqa: S324 - llama-benchy's cache key, not security
            (cache / f"{name}.txt").write_text(request.text.read_text("utf-8", errors="replace"), "utf-8")
        env = environment(request, home)
        reports = []
        for n, options in enumerate(passes, 1):
            cell = (f"cell {n} of {len(passes)} (depth {options.depth[0]}, concurrency {options.concurrency[0]}): "
                    if len(passes) > 1 else "")
            report = Path(scratch) / f"report-{n}.json"
            try:
                tail = _run(command(replace(request, options=options), tokenizer, report, book_url), env,
                            (deadline, timeout), on_line, on_event)
            except BenchError as err:
                raise BenchError(f"{cell}{err}") from None
            if not report.is_file():
                shown = "\n".join(tail)
                raise BenchError(f"{cell}llama-benchy wrote no report; its last lines:\n{shown}")
            reports.append(json.loads(report.read_text("utf-8")))
    return _merged(reports)


def _merged(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One report of several runs' (sparkrun's consolidate_per_task_results): the first's header, every run's
    tests in order."""
    tests = [test for report in reports for test in report.get("benchmarks", [])]
    if len(reports) == 1:
        return reports[0]
    return {**reports[0], "benchmarks": tests,
            "max_concurrency": max((int(t.get("concurrency") or 0) for t in tests), default=0)}


def _run(argv: list[str], env: dict[str, str], limit: tuple[float | None, float | None],
         on_line: Callable[[str], None], on_event: Callable[[dict[str, Any]], None]) -> list[str]:
    """Run llama-benchy until it ends or the deadline passes (limit: the deadline on time.monotonic() and the
    seconds the whole benchmark was given): its progress events come on stdout (`--emit-progress -` moves its own
    prints to stderr), its lines on stderr, read on a thread of their own. Returns its last lines."""
    deadline, total = limit
    timeout = None if deadline is None else deadline - time.monotonic()
    if timeout is not None and timeout <= 0:
        raise BenchError(f"llama-benchy did not finish within {total:.0f}s")
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", stdin=subprocess.DEVNULL)
    timer = threading.Timer(timeout, proc.kill) if timeout else None
    if timer:
        timer.start()
    tail: list[str] = []

    def lines() -> None:
        nonlocal tail
        assert proc.stderr is not None
        for line in proc.stderr:
            tail = (tail + [line.rstrip("\n")])[-OUTPUT_TAIL:]
            on_line(tail[-1])

    reader = threading.Thread(target=lines, daemon=True)
    reader.start()
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            if isinstance(event, dict):
                on_event(event)
        code = proc.wait()
        reader.join(timeout=10)
    finally:
        if timer:
            timer.cancel()
        if proc.poll() is None:  # interrupted: the child goes too
            proc.kill()
            proc.wait()
    if code != 0:
        shown = "\n".join(tail)
        why = f"did not finish within {total:.0f}s" if timer and code == -9 else f"failed (exit {code})"
        raise BenchError(f"llama-benchy {why}; its last lines:\n{shown}")
    return tail
