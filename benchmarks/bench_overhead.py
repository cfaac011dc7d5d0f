#!/usr/bin/env python3
"""What `recipegen bench` costs over llama-benchy alone: both against the same running OpenAI-compatible head,
with the same options, side by side, alternating (the order swaps every round so that a drifting machine or
engine weighs on both alike), N rounds after one untimed warm-up round. Prints each run's wall time, both
sides' figures (pp and tg tokens/s, time to first token) and the ratio recipegen / alone; the goal is 1.05 or
less (issue 28).

    python3 benchmarks/bench_overhead.py --url http://127.0.0.1:8000 --model org/tiny \\
        --served-model-name tiny --tokenizer /path/to/tokenizer.json [--skip-coherence] [-n 5]

  llama-benchy alone: `python -m llama_benchy --base-url URL/v1 --model M --served-model-name S --tokenizer T
                      --pp .. --tg .. --depth .. --concurrency .. --runs R --book-url file://TEXT
                      --format json --save-result F` (its own CLI, a child process).
  through recipegen:  `python -m generator bench overhead --tokenizer T --text TEXT --pp .. ...` in a scratch
                      project whose one-node cluster and recipe point at URL (built once, untimed): everything
                      a user's `recipegen bench` does (compile and check out/, ask the head what it serves, check
                      the tokenizer, run llama-benchy, write results.json/csv and plot.png).

Both read prompts from the same local text (--text, or one written here from a fixed word list) through
llama-benchy's book cache, so neither downloads anything. Nothing is written outside a temporary folder.
The ratio is a fixed cost over the benchmark's own time: the longer the benchmark (--pp, --tg, --runs, more
depths), the nearer 1; the difference in seconds is printed too. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from generator.bench.results import BenchRun, runs_of  # noqa: E402 - parsing the reports only

GOAL = 1.05
RECIPE = "overhead"
WORDS = ("the of and to in is was it for on that with as his he at by this had not are but from or have an they "
         "which one you were her all she there would their we him been has when who will more no if out so said "
         "what up its about into than them can only other new some time could these two may then do first any "
         "my now such like our over man me even most made after also did many before must through back years "
         "where much your way well down should because each just those people how too little state good very "
         "make world still own see men work long get here between both life being under never day same another "
         "know while last might us great old year off come since against go came right used take three").split()


@dataclass
class Run:
    side: str  # "alone" or "recipegen"
    seconds: float  # wall time
    cpu: float  # CPU seconds of the process and its children (llama-benchy under recipegen): what a busy
    figures: list[BenchRun]  # machine's wall times blur, the work itself


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="the head's base URL, without /v1 (http://HOST:PORT)")
    parser.add_argument("--model", required=True, help="the Hugging Face id (llama-benchy --model; the recipe's)")
    parser.add_argument("--served-model-name", required=True, help="the name the engine serves")
    parser.add_argument("--tokenizer", required=True, metavar="PATH", help="a tokenizer.json or its folder")
    parser.add_argument("--text", type=Path, help="a text to cut prompts from (default: one written here)")
    parser.add_argument("--pp", default="128", help="prompt tokens, comma-separated (default 128)")
    parser.add_argument("--tg", default="32", help="tokens generated (default 32)")
    parser.add_argument("--depth", default="0", help="context depths (default 0)")
    parser.add_argument("--concurrency", default="1", help="concurrent requests (default 1)")
    parser.add_argument("--runs", type=int, default=3, help="llama-benchy --runs (default 3)")
    parser.add_argument("--skip-coherence", action="store_true", help="a random-weight model cannot name Paris")
    parser.add_argument("-n", "--rounds", type=int, default=5, help="timed rounds, each side once (default 5)")
    args = parser.parse_args()
    url = urlsplit(args.url)
    if url.scheme != "http" or not url.hostname or not url.port or url.path not in ("", "/"):
        parser.error(f"--url {args.url}: give http://HOST:PORT (without /v1)")
    if not Path(args.tokenizer).exists():
        parser.error(f"--tokenizer {args.tokenizer}: no such file or folder")
    args.tokenizer = str(Path(args.tokenizer).resolve())  # both sides run in folders of their own
    return args


def options(args: argparse.Namespace, lists: str) -> list[str]:
    """The benchmark's options, the same for both sides; lists as each takes them: llama-benchy `--pp 128 512`
    (lists="words"), recipegen `--pp 128,512` (lists="commas")."""
    words = []
    for name in ("pp", "tg", "depth", "concurrency"):
        values = getattr(args, name).replace(",", " ").split()
        words += [f"--{name}", *values] if lists == "words" else [f"--{name}", ",".join(values)]
    return words + ["--runs", str(args.runs)] + (["--skip-coherence"] if args.skip_coherence else [])


def project(scratch: Path, args: argparse.Namespace, env: dict[str, str]) -> Path:
    """A one-node cluster whose head is the URL's host, a recipe serving on its port, compiled by the recipegen
    that will bench it (env: this repository's first on PYTHONPATH)."""
    url = urlsplit(args.url)
    root = scratch / "project"
    (root / "recipes" / RECIPE).mkdir(parents=True)
    (root / "recipes" / RECIPE / "recipe.toml").write_text(
        f'engine = "vllm"\ndocker_image = "vllm/vllm-openai:latest"\nmodel = {json.dumps(args.model)}\n'
        f'args = ["--served-model-name", {json.dumps(args.served_model_name)}, "--port", "{url.port}"]\n')
    address = url.hostname if all(p.isdigit() for p in str(url.hostname).split(".")) else "127.0.0.1"
    (root / "cluster.toml").write_text(f'name = "overhead"\n[[nodes]]\nname = "head"\naddress = "{address}"\n'
                                       f'ssh_host = "{url.hostname}"\ncontext = "default"\n')
    subprocess.run([sys.executable, "-m", "generator", "build"], cwd=root, env=env, check=True, capture_output=True)
    return root


def text(scratch: Path, given: Path | None) -> Path:
    if given is not None:
        return given.resolve()
    rng = random.Random(28)
    path = scratch / "book.txt"
    path.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(14)) + "." for _ in range(3000)))
    return path


def alone(args: argparse.Namespace, book: Path, home: Path, report: Path) -> list[str]:
    return [sys.executable, "-m", "llama_benchy", "--base-url", f"{args.url.rstrip('/')}/v1", "--model",
            args.model, "--served-model-name", args.served_model_name, "--tokenizer", args.tokenizer,
            *options(args, "words"), "--book-url", book.as_uri(), "--format", "json", "--save-result", str(report)]


def through_recipegen(args: argparse.Namespace, book: Path, results: Path) -> list[str]:
    return [sys.executable, "-m", "generator", "bench", RECIPE, "--tokenizer", args.tokenizer, "--text", str(book),
            *options(args, "commas"), "--results", str(results)]


def timed(side: str, argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of the command (CPU: its own and its waited-for descendants')."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"{side} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    args = arguments()
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        scratch = Path(tmp)
        host = urlsplit(args.url).hostname or ""
        base = {**os.environ, "NO_PROXY": host, "no_proxy": host}
        env_recipegen = {**base, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                                                if p)}
        root, book = project(scratch, args, env_recipegen), text(scratch, args.text)
        # llama-benchy alone reads the text as its cached "book" (HOME/.cache/llama-benchy/<md5 of the URL>.txt),
        # as recipegen's --text has it do; the Hugging Face cache stays the user's.
        home = scratch / "home"
        (home / ".cache" / "llama-benchy").mkdir(parents=True)
        cached = hashlib.md5(book.as_uri().encode()).hexdigest()  # noqa: S324 - llama-benchy's cache key
        (home / ".cache" / "llama-benchy" / f"{cached}.txt").write_text(book.read_text())
        env_alone = {**base, "HOME": str(home), "HF_HOME": os.environ.get("HF_HOME")
                     or str(Path.home() / ".cache" / "huggingface")}

        def one(side: str, n: int) -> Run:
            if side == "alone":
                report = scratch / f"alone-{n}.json"
                seconds, cpu = timed(side, alone(args, book, home, report), scratch, env_alone)
                return Run(side, seconds, cpu, runs_of(json.loads(report.read_text())))
            results = scratch / f"results-{n}"
            seconds, cpu = timed(side, through_recipegen(args, book, results), root, env_recipegen)
            [written] = (results / RECIPE).glob("*/results.json")
            return Run(side, seconds, cpu, [BenchRun(**r) for r in json.loads(written.read_text())["runs"]])

        print(f"llama-benchy alone vs `recipegen bench`, {' '.join(options(args, 'words'))}, at {args.url}",
              flush=True)
        rounds: list[tuple[Run, Run]] = []
        for n in range(args.rounds + 1):
            order = ("alone", "recipegen") if n % 2 == 0 else ("recipegen", "alone")
            done = {side: one(side, n) for side in order}
            label = "warm-up (not counted)" if n == 0 else f"round {n}"
            a, b = done["alone"], done["recipegen"]
            print(f"{label:>22}: alone {a.seconds:6.2f} s (CPU {a.cpu:5.2f} s), recipegen {b.seconds:6.2f} s "
                  f"(CPU {b.cpu:5.2f} s), {order[0]} first: ratio {b.seconds / a.seconds:.3f}", flush=True)
            if n:
                rounds.append((done["alone"], done["recipegen"]))
        report(rounds)


def report(rounds: list[tuple[Run, Run]]) -> None:
    a = statistics.median(r[0].seconds for r in rounds)
    b = statistics.median(r[1].seconds for r in rounds)
    print("\nfigures, mean over the rounds (alone | recipegen):")
    keys = list(dict.fromkeys(f.key for pair in rounds for run in pair for f in run.figures))
    for key in keys:
        cells = []
        for i in (0, 1):
            mine = [f for pair in rounds for f in pair[i].figures if f.key == key]
            cells.append(tuple(statistics.fmean(v for f in mine if (v := getattr(f, name)) is not None)
                               if any(getattr(f, name) is not None for f in mine) else float("nan")
                               for name in ("pp_tps", "tg_tps", "ttft_ms")))
        print(f"  pp {key[0]} tg {key[1]} depth {key[2]} concurrency {key[3]}: "
              + " | ".join(f"pp {c[0]:.1f} tok/s, tg {c[1]:.1f} tok/s, TTFT {c[2]:.0f} ms" for c in cells))
    ratio = b / a
    cpu_a = statistics.median(r[0].cpu for r in rounds)
    cpu_b = statistics.median(r[1].cpu for r in rounds)
    print(f"\nCPU time, median of {len(rounds)}: alone {cpu_a:.2f} s, recipegen {cpu_b:.2f} s: recipegen adds "
          f"{cpu_b - cpu_a:.2f} s")
    print(f"wall time, median of {len(rounds)}: alone {a:.2f} s, recipegen {b:.2f} s: recipegen adds "
          f"{b - a:.2f} s; ratio {ratio:.3f} (goal <= {GOAL}: {'met' if ratio <= GOAL else 'not met'})")


if __name__ == "__main__":
    main()
