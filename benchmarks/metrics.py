#!/usr/bin/env python3
"""The metrics stack's costs (issue 40):

- `memory`: Prometheus's memory with the generated config for 4 and 16 recipes. Debian's prometheus (apt-get install
  prometheus) runs out/_metrics/prometheus.yml as built for N recipes on loopback, each head a server answering the
  /metrics text recorded from the real vLLM (tests/fixtures/metrics/vllm-0.32-cpu.metrics), every target in (as
  `up` puts them), scraped every 5 s for --seconds; then its resident memory (VmRSS) and head series. Runs anywhere:

      python3 benchmarks/metrics.py memory [--seconds 60]

- `scrape`: what scraping costs the engine: the real vLLM (CPU) of the lab, TP=2 on two lab nodes, one streamed chat
  completion after another, in rounds alternating without and with a GET /metrics every 5 s (what Prometheus does),
  so drift hits both alike; median TTFT and decode tok/s of each, as a ratio (goal >= 0.99). Needs root, the lab's
  packages and the real-vLLM wheels (.ci/run fetches them), and the lab's lock:

      sudo flock /tmp/recipegen-lab.lock python3 benchmarks/metrics.py scrape [--rounds 6] [--requests 8]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

RECORDED = ROOT / "tests" / "fixtures" / "metrics" / "vllm-0.32-cpu.metrics"


class _Head(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


def _project(root: Path, ports: list[int]) -> Path:
    """A project of len(ports) recipes on one loopback node, with [metrics] scraping every 5 s, built."""
    from click.testing import CliRunner

    from generator.cli import main

    root.mkdir(parents=True)
    (root / "cluster.toml").write_text('name = "bench"\ngpu = "none"\nrdma = false\n[[nodes]]\nname = "a"\n'
                                       'address = "127.0.0.1"\ncontext = "a"\n[metrics]\nnode = "a"\n'
                                       'scrape_interval = "5s"\n')
    for i, port in enumerate(ports):
        folder = root / "recipes" / f"model-{i:02d}"
        folder.mkdir(parents=True)
        (folder / "recipe.toml").write_text(
            f'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\nmodel = "tiny"\n'
            f'args = ["--served-model-name", "tiny", "--port", "{port}"]\n')
    import os

    here = Path.cwd()
    os.chdir(root)
    try:
        result = CliRunner().invoke(main, ["build"], catch_exceptions=False)
    finally:
        os.chdir(here)
    if result.exit_code:
        sys.exit(result.output)
    return root / "out" / "_metrics"


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _series(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return next((line.split()[-1] for line in text.splitlines() if line.startswith("prometheus_tsdb_head_series ")),
                "?")


def memory(recipes: int, seconds: float) -> None:
    from metricskit import checkable_config
    from routerkit import free_port

    _Head.body = RECORDED.read_bytes()
    servers = [ThreadingHTTPServer(("127.0.0.1", free_port()), _Head) for _ in range(recipes)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        built = _project(Path(tmp) / "p", [s.server_address[1] for s in servers])
        config = checkable_config(built, Path(tmp) / "etc")
        targets = Path(tmp) / "etc" / "targets"
        targets.mkdir(exist_ok=True)  # as `up` leaves it: every recipe's target in
        port = free_port()
        prometheus = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
                                       f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
        try:
            time.sleep(seconds)
            print(f"{recipes:2d} recipes: Prometheus {_rss_mib(prometheus.pid):.0f} MiB resident after {seconds:.0f} s "
                  f"of 5 s scrapes, {_series(port)} head series")
        finally:
            prometheus.terminate()
            prometheus.wait(30)
            for server in servers:
                server.shutdown()


def scrape(rounds: int, requests: int) -> None:
    from lab import Lab, tinymodel, unavailable_reason, vllmimage

    from generator.deploy.probe import probe

    reason = unavailable_reason() or vllmimage.unavailable_reason()
    if reason:
        sys.exit(f"the lab cannot run here: {reason}")
    with Lab(2) as lab, tempfile.TemporaryDirectory() as tmp:
        lab.provide_vllm_image(lab.nodes[:2])
        for node in lab.nodes[:2]:
            tinymodel.put_in_cache(node.hf_cache)
        root = Path(tmp)
        shutil.copytree(ROOT / "examples" / "cpu" / "recipes", root / "recipes")
        lab.write_cluster(root / "cluster.toml", lab.nodes[:2], gpu="none",
                          node_env=[{"VLLM_CPU_OMP_THREADS_BIND": "0"}, {"VLLM_CPU_OMP_THREADS_BIND": "1"}])
        for args in (["build"], ["up", "tiny-llama-tp2", "--timeout", "600"]):
            done = subprocess.run(["recipegen", *args], cwd=root, env=lab.env, capture_output=True, text=True,
                                  timeout=900)
            if done.returncode:
                sys.exit(done.stdout + done.stderr)
        url = f"http://{lab.nodes[0].address}:8000"
        figures: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for r in range(rounds):
            for scraping in ((False, True) if r % 2 == 0 else (True, False)):
                stop = threading.Event()
                scraper = threading.Thread(target=_scrape_every, args=(url, 5.0, stop), daemon=True)
                if scraping:
                    scraper.start()
                for _ in range(requests):
                    result = probe(url, "tiny", timeout=120)
                    if result.ok and result.ttft_ms and result.decode_tps:
                        figures[scraping].append((result.ttft_ms, result.decode_tps))
                stop.set()
        without, with_ = figures[False], figures[True]
        ttft = [statistics.median(t for t, _ in f) for f in (without, with_)]
        tps = [statistics.median(s for _, s in f) for f in (without, with_)]
        print(f"TTFT median: {ttft[0]:.1f} ms without scraping, {ttft[1]:.1f} ms with a scrape every 5 s: "
              f"ratio {ttft[0] / ttft[1]:.3f} (without / with; goal >= 0.99)")
        print(f"decode tok/s median: {tps[0]:.1f} without, {tps[1]:.1f} with: ratio {tps[1] / tps[0]:.3f} "
              f"(with / without; goal >= 0.99); {len(without)} + {len(with_)} requests")


def _scrape_every(url: str, every: float, stop: threading.Event) -> None:
    while not stop.is_set():
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
            response.read()
        stop.wait(every)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    mem = sub.add_parser("memory")
    mem.add_argument("--seconds", type=float, default=60.0)
    cost = sub.add_parser("scrape")
    cost.add_argument("--rounds", type=int, default=6)
    cost.add_argument("--requests", type=int, default=8)
    args = parser.parse_args()
    if args.what == "memory":
        if shutil.which("prometheus") is None:
            sys.exit("needs Debian's prometheus (apt-get install prometheus)")
        for recipes in (4, 16):
            memory(recipes, args.seconds)
    else:
        scrape(args.rounds, args.requests)


if __name__ == "__main__":
    main()
