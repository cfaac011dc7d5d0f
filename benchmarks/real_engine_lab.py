#!/usr/bin/env python3
"""The real vLLM (CPU build) in the lab, from recipegen's own files: what a boot costs, and how fast a group heals.

For each example recipe (examples/cpu: TP=2 and PP=2 over two lab nodes, the tiny Llama):
- a fresh `recipegen up`: wall time to its first answered request, and the probe's TTFT and tok/s;
- each rank's memory once serving (`docker stats`);
and for TP=2 (issue 35's goal: each within 1.2x of a fresh `up`):
- a worker's engine killed -9 from the host: time to the next answered chat completion;
- the worker's node rebooted (its dockerd stopped and started): time to the next answered chat completion;
- the head's node rebooted: the same;
- issue 39's wedges, each process stopped (SIGSTOP) from the host with its group watch alive: every process of the
  worker's engine; the head's engine core alone (its API server still answers /health); every process of the
  head's engine. For these the detection time (the freeze to the head's recorded restart) is printed apart
  (goal: at most 60 s with the default `wedge_timeout`), and the heal against 1.2x a fresh `up` plus it;
- what each group restart costs the host's memory: MemAvailable before the fault and once serving again.
Each beside the fresh `up`'s time, as a ratio. Prints figures; asserts nothing.

Needs root, the lab's packages and the real-vLLM wheels (.ci/run fetches them):

    sudo python3 benchmarks/real_engine_lab.py [--recipes tiny-llama-tp2,tiny-llama-pp2] [--no-heal] [--overhead]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from lab import Lab, tinymodel, unavailable_reason, vllmimage  # noqa: E402

from generator.deploy.probe import probe  # noqa: E402
from generator.plan.types import GROUP_STATE  # noqa: E402

BIND = [{"VLLM_CPU_OMP_THREADS_BIND": "0"}, {"VLLM_CPU_OMP_THREADS_BIND": "1"}]


def recipegen(lab: Lab, root: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["recipegen", *args], cwd=root, env=lab.env, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode:
        sys.exit(f"recipegen {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


def serving_after(lab: Lab, start: float, timeout: float = 600) -> float:
    """Seconds from start until the head answers a chat completion, after first seeing it stop answering."""
    url = f"http://{lab.nodes[0].address}:8000"
    deadline = time.monotonic() + 60
    while probe(url, "tiny", timeout=10).ok and time.monotonic() < deadline:
        time.sleep(0.5)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe(url, "tiny", timeout=30).ok:
            return time.monotonic() - start
        time.sleep(1)
    sys.exit("the recipe did not serve again")


def memory(lab: Lab, recipe: str) -> list[str]:
    rows = []
    for node in lab.nodes[:2]:
        out = lab.docker(node, "stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}").stdout
        rows += [f"{node.name}: {line.split(' ', 1)[1]}" for line in out.splitlines() if recipe in line]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipes", default="tiny-llama-tp2,tiny-llama-pp2")
    parser.add_argument("--no-heal", action="store_true", help="only fresh boots")
    parser.add_argument("--overhead", action="store_true",
                        help="also run benchmarks/bench_overhead.py against the TP=2 head (llama-benchy alone vs "
                             "through recipegen bench)")
    args = parser.parse_args()
    reason = unavailable_reason() or vllmimage.unavailable_reason()
    if reason:
        sys.exit(f"the lab cannot run here: {reason}")
    with Lab(2) as lab, tempfile.TemporaryDirectory() as tmp:
        start = time.monotonic()
        lab.provide_vllm_image(lab.nodes[:2])
        print(f"image: made and loaded on 2 nodes in {time.monotonic() - start:.1f}s ({lab.timings})")
        for node in lab.nodes[:2]:
            tinymodel.put_in_cache(node.hf_cache)
        root = Path(tmp)
        shutil.copytree(ROOT / "examples" / "cpu" / "recipes", root / "recipes")
        # Seven faults in a row: the default bound (5 restarts in 30 minutes) would stop the group at the fifth.
        tp2 = root / "recipes" / "tiny-llama-tp2" / "recipe.toml"
        tp2.write_text(tp2.read_text("utf-8").replace('distributed_backend = "mp"\n',
                                                      'distributed_backend = "mp"\nrestart_limit = 10\n', 1), "utf-8")
        lab.write_cluster(root / "cluster.toml", lab.nodes[:2], gpu="none", node_env=BIND)
        recipegen(lab, root, "build")
        for recipe in args.recipes.split(","):
            start = time.monotonic()
            up = recipegen(lab, root, "up", recipe, "--timeout", "600")
            fresh = time.monotonic() - start
            line = next(li for li in up.stdout.splitlines() if "first request:" in li)
            print(f"\n{recipe}: fresh up {fresh:.1f}s; {line.split('first request: ', 1)[1]}")
            for row in memory(lab, recipe):
                print(f"  memory {row}")
            if recipe == "tiny-llama-tp2" and args.overhead:
                overhead(lab)
            if recipe == "tiny-llama-tp2" and not args.no_heal:
                heal(lab, recipe, fresh)
            recipegen(lab, root, "down", recipe)


def overhead(lab: Lab) -> None:
    """bench's own cost against the real engine: benchmarks/bench_overhead.py, its figures as it prints them."""
    hub = lab.nodes[0].hf_cache / "hub" / "models--recipegen-lab--tiny-llama" / "snapshots"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_overhead.py"),
                           "--url", f"http://{lab.nodes[0].address}:8000", "--model", tinymodel.REPO,
                           "--served-model-name", "tiny", "--tokenizer", str(next(hub.iterdir())),
                           "--skip-coherence", "-n", "3"], env=lab.env, capture_output=True, text=True, timeout=1800)
    print("  bench overhead (benchmarks/bench_overhead.py):")
    print("\n".join("    " + line for line in (done.stdout + done.stderr).splitlines()))


def available() -> int:
    """The host's MemAvailable (the lab's nodes share it), in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def container(lab: Lab, which: int, recipe: str) -> str:
    return lab.docker(lab.nodes[which], "ps", "-q", "--filter", f"label=dev.recipegen.recipe={recipe}").stdout.split()[0]


def head_record(lab: Lab, recipe: str) -> dict:
    """The head's group record (docker cp of the watch's file, as `ps` reads it); {} while it cannot be read."""
    copied = subprocess.run(["docker", "--context", lab.nodes[0].context, "cp",
                             f"{container(lab, 0, recipe)}:{GROUP_STATE}", "-"], env=lab.env, capture_output=True,
                            timeout=30)
    try:
        with tarfile.open(fileobj=io.BytesIO(copied.stdout)) as archive:
            member = archive.extractfile(archive.getmembers()[0])
            return json.loads(member.read()) if member else {}
    except (tarfile.TarError, IndexError, ValueError):
        return {}


def watched(lab: Lab, recipe: str, timeout: float = 30) -> None:
    """Wait until the head's watch has seen this boot answer /health (its record says the group served): the next
    fault then hits a watched group, not a boot (a freeze before the watch's first answer waits for the boot bound,
    health_start_period)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if head_record(lab, recipe).get("served_once") is True:
            return
        time.sleep(0.5)
    print(f"  (the head's watch had not seen /health answer {timeout:.0f}s after it served: the next figure may "
          "time a boot, not a watched group)")


def last_restart(lab: Lab, recipe: str) -> dict:
    """The head's group record's last restart."""
    return head_record(lab, recipe)["restarts"][-1]


def tree(pid: int) -> list[int]:
    rows = [line.split() for line in subprocess.run(["ps", "-e", "-o", "pid=,ppid=,comm="], capture_output=True,
                                                    text=True, check=True).stdout.splitlines()]
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        kids = [int(r[0]) for r in rows if int(r[1]) == parent]
        found += kids
        todo += kids
    return found


def heal(lab: Lab, recipe: str, fresh: float) -> None:
    watched(lab, recipe)
    before = available()
    _, engine = lab.pids(lab.nodes[1], container(lab, 1, recipe))
    start = time.monotonic()
    os.kill(engine, signal.SIGKILL)
    took = serving_after(lab, start)
    watched(lab, recipe)
    print(f"  worker engine killed -9: serving again after {took:.1f}s ({took / fresh:.2f}x a fresh up); "
          f"host memory {(available() - before) / 2**20:+.0f} MiB")
    for which in (1, 0):
        node = lab.nodes[which]
        before, start = available(), time.monotonic()
        lab.stop_dockerd(node)
        lab.start_dockerd(node)
        took = serving_after(lab, start)
        watched(lab, recipe)
        print(f"  {'worker' if which else 'head'} node rebooted: serving again after {took:.1f}s "
              f"({took / fresh:.2f}x a fresh up); host memory {(available() - before) / 2**20:+.0f} MiB")
    for what, which, core_only in (("worker engine frozen", 1, False), ("head engine core frozen", 0, True),
                                   ("head engine frozen", 0, False)):
        watch, _ = lab.pids(lab.nodes[which], container(lab, which, recipe))
        pids = [p for p in tree(watch)
                if not core_only or Path(f"/proc/{p}/comm").read_text().startswith("VLLM::EngineCor")]
        before, wall, start = available(), time.time(), time.monotonic()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        took = serving_after(lab, start)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        watched(lab, recipe)
        record = last_restart(lab, recipe)
        detected = record.get("time", wall) - wall
        print(f"  {what}: {record.get('cause')} detected after {detected:.1f}s, serving again after {took:.1f}s "
              f"({(took - detected) / fresh:.2f}x a fresh up after detection); host memory "
              f"{(available() - before) / 2**20:+.0f} MiB")


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces, dockerd)")
    if not re.match(r"3\.(1[1-9])", sys.version.split()[0]):
        sys.exit("needs Python 3.11+")
    main()
