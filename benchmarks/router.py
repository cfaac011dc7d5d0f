#!/usr/bin/env python3
"""The router's cost (issue 31): time to first token and throughput through HAProxy against direct, side by side in
one run, at concurrency 1 and 16, on loopback. Run from anywhere (needs Debian's haproxy: apt-get install haproxy):

    python3 benchmarks/router.py [--rounds 5] [--tokens 128] [--tps 200]

Two OpenAI stand-ins (the lab engine's own HTTP side, tests/lab/engine/python/labengine/openai_api.py, in a
process of their own) stream `--tps` tokens/s per request; `recipegen build` compiles a project with a `[router]`
in front of them and haproxy runs the generated haproxy.cfg as the router's container runs it (-W -db -f). Each
round sends the same batch (half the requests to each model) directly, through the router, and through the router
with `option http-no-delay` taken out (what that option is for), in turn, so drift hits all three alike.

Figures: median TTFT (ms) and added TTFT against direct; throughput = streamed tokens / wall time of the batch, and
its ratio to direct; the router's memory (master + worker RSS) and how long it takes to listen. Goals (issue 31):
added TTFT <= 1 ms median, throughput >= 0.98 of direct.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from helpers.routerkit import StandIn, chat, free_port, request, start_haproxy, wait_listening  # noqa: E402

MODELS = ("alpha", "beta")
CLUSTER = """name = "bench"
gpu = "none"
rdma = false
[[nodes]]
name = "a"
address = "127.0.0.1"
context = "a"
[router]
nodes = ["a"]
port = {port}
"""
RECIPE = """engine = "vllm"
docker_image = "vllm/vllm-openai:v0.11.0"
model = "org/{name}"
nodes = ["a"]
args = ["--served-model-name", "{name}", "--port", "{port}"]
"""


def _serve(ports: dict[str, int], tps: float) -> None:
    os.environ.update(LAB_DECODE_TPS=str(tps), LAB_TTFT_BASE_MS="5", LAB_PREFILL_TPS="100000")
    for name, port in ports.items():
        StandIn("127.0.0.1", port, name).start()
    while True:
        time.sleep(3600)


def _project(folder: Path, router_port: int, heads: dict[str, int]) -> Path:
    from click.testing import CliRunner

    from generator.cli import main

    folder.mkdir(parents=True)
    (folder / "cluster.toml").write_text(CLUSTER.format(port=router_port))
    for name, port in heads.items():
        (folder / "recipes" / name).mkdir(parents=True)
        (folder / "recipes" / name / "recipe.toml").write_text(RECIPE.format(name=name, port=port))
    previous = Path.cwd()
    os.chdir(folder)
    try:
        result = CliRunner().invoke(main, ["build"])
    finally:
        os.chdir(previous)
    assert result.exit_code == 0, result.output
    return folder / "out" / "_router" / "haproxy.cfg"


def _rss_kib(pid: int) -> int:
    """RSS of a process and its children (the master and its worker)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if entry.name == str(pid) or fields.get("PPid", "").strip() == str(pid):
            total += int(fields.get("VmRSS", "0 kB").split()[0])
    return total


def _batch(target: dict[str, int], concurrency: int, tokens: int) -> tuple[list[float], float, int, list[float]]:
    """`concurrency` streams at once (the models alternating): each TTFT, the batch's wall time, tokens seen, and
    every gap between two chunks of a stream (what buffering or Nagle's algorithm would stretch)."""
    def one(i: int) -> tuple[float | None, int, list[float]]:
        model = MODELS[i % 2]
        answer = request("127.0.0.1", target[model], "POST", "/v1/chat/completions", chat(model, tokens), timeout=120)
        assert answer.status == 200, answer.body[:200]
        gaps = [b - a for a, b in zip(answer.arrivals, answer.arrivals[1:])]
        return answer.ttft, answer.chunks, gaps

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, range(concurrency)))
    wall = time.perf_counter() - start
    return ([t for t, _, _ in results if t is not None], wall, sum(n for _, n, _ in results),
            [g for _, _, gaps in results for g in gaps])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128, help="tokens streamed per request")
    parser.add_argument("--tps", type=float, default=200.0, help="each stand-in's tokens/s per request")
    args = parser.parse_args()

    heads = {name: free_port() for name in MODELS}
    server = multiprocessing.get_context("fork").Process(target=_serve, args=(heads, args.tps), daemon=True)
    server.start()
    procs = []
    try:
        for port in heads.values():
            wait_listening("127.0.0.1", port)
        work = Path(tempfile.mkdtemp(prefix="recipegen-router-bench-"))  # left for a look at the configs
        routers = {}
        for variant in ("router", "router without http-no-delay"):
            port = free_port()
            config = _project(work / variant.replace(" ", "-"), port, heads)
            if variant != "router":
                config.write_text(config.read_text().replace("    option http-no-delay\n", ""))
            began = time.perf_counter()
            procs.append(start_haproxy(config, {"RECIPEGEN_ROUTER_API_KEY": ""}))
            wait_listening("127.0.0.1", port)
            ready = time.perf_counter() - began
            routers[variant] = {name: port for name in MODELS}
            print(f"{variant}: listening {ready * 1000:.0f} ms after start", flush=True)
        time.sleep(2.5)  # two health checks a second: every server up
        memory = _rss_kib(procs[0].pid)
        targets = {"direct": heads, **routers}
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
              f"{args.tokens} tokens per request at {args.tps:.0f} tok/s, {args.rounds} rounds", flush=True)
        print(f"router memory (master + worker RSS): {memory / 1024:.1f} MiB")
        for concurrency in (1, 16):
            ttfts: dict[str, list[float]] = {name: [] for name in targets}
            rates: dict[str, list[float]] = {name: [] for name in targets}
            gaps: dict[str, list[float]] = {name: [] for name in targets}
            for _ in range(args.rounds):
                for name, target in targets.items():
                    times, wall, seen, between = _batch(target, concurrency, args.tokens)
                    ttfts[name] += times
                    rates[name].append(seen / wall)
                    gaps[name] += between
            base_ttft = statistics.median(ttfts["direct"])
            base_rate = statistics.median(rates["direct"])
            print(f"\nconcurrency {concurrency}:")
            print(f"  {'path':32} {'TTFT median':>12} {'added':>9} {'tokens/s':>10} {'vs direct':>10} "
                  f"{'chunk gap p50 / p99 / max':>27}")
            for name in targets:
                ttft, rate = statistics.median(ttfts[name]), statistics.median(rates[name])
                cuts = statistics.quantiles(gaps[name], n=100)
                print(f"  {name:32} {ttft * 1000:9.2f} ms {(ttft - base_ttft) * 1000:+6.2f} ms "
                      f"{rate:10.1f} {rate / base_rate:10.3f} {cuts[49] * 1000:8.1f} / {cuts[98] * 1000:5.1f} / "
                      f"{max(gaps[name]) * 1000:5.1f} ms")
        print("\ngoals: added TTFT <= 1 ms (median), throughput >= 0.98 of direct")
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
        server.kill()


if __name__ == "__main__":
    main()
