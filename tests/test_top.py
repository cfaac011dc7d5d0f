"""`recipegen top` (issue 40): reading a head's /metrics (vLLM's names and SGLang's), Prometheus's
histogram_quantile, the stalled state, and the whole command in a real terminal (tmux) against a loopback server
that serves a /metrics text recorded from the real vLLM (CPU, the lab's tiny Llama after a few requests:
tests/fixtures/metrics/vllm-0.32-cpu.metrics), whose numbers the screen must show."""

from __future__ import annotations

import math
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from generator.deploy.enginemetrics import STALL_AFTER, Watch, parse, quantile, row, sample
from generator.plan.metrics import EngineTarget
from helpers.routerkit import free_port
from helpers.golden import REPO, write_project
from helpers.topkit import row_of, screen_of

RECORDED = REPO / "tests" / "fixtures" / "metrics" / "vllm-0.32-cpu.metrics"


def test_parse_reads_labels_escapes_and_skips_comments():
    text = ('# HELP x y\n# TYPE x counter\nx_total{a="1",b="q\\"uote"} 3.5\nplain 2e3\n'
            'h_bucket{le="+Inf",m="k"} 7\nbroken line here\n')
    found = parse(text)
    assert found["x_total"] == [({"a": "1", "b": 'q\\"uote'}, 3.5)]
    assert found["plain"] == [({}, 2000.0)] and found["h_bucket"] == [({"le": "+Inf", "m": "k"}, 7.0)]


def test_quantile_is_prometheus_histogram_quantile():
    buckets = [(0.1, 0.0), (0.5, 4.0), (1.0, 8.0), (math.inf, 8.0)]
    assert quantile(0.5, buckets) == 0.5  # rank 4: the top of the (0.1, 0.5] bucket
    assert quantile(0.75, buckets) == pytest.approx(0.75)  # rank 6: halfway through (0.5, 1]
    assert quantile(0.99, [(0.1, 0.0), (math.inf, 3.0)]) == 0.1  # in +Inf: the highest finite bound
    assert quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]) is None  # no request yet


def target(names: tuple[str, ...] = ("tiny",)) -> EngineTarget:
    return EngineTarget("r", "vllm", ("a",), 1, 1, "a", "127.0.0.1", 8000, False, names, False)


def test_sglang_names_are_read_too():
    text = ('sglang:generation_tokens_total{model_name="glm"} 120\nsglang:num_running_reqs{model_name="glm"} 2\n'
            'sglang:num_queue_reqs{model_name="glm"} 5\nsglang:token_usage{model_name="glm"} 0.42\n')
    s = sample(text, 1.0)
    assert (s.generation, s.running, s.waiting, s.kv, s.models) == (120, 2, 5, 0.42, frozenset({"glm"}))


def test_a_head_serving_another_recipes_model_is_not_this_recipe():
    watch = Watch(target(("mine",)), "http://x", last=sample('vllm:num_requests_running{model_name="theirs"} 0\n', 1))
    assert row(watch, 2.0).state == "other"


def test_stalled_when_requests_run_and_no_token_comes(monkeypatch: pytest.MonkeyPatch):
    texts = iter(['vllm:generation_tokens_total{model_name="tiny"} 10\nvllm:num_requests_running{model_name="tiny"} 1\n'
                  ] * 3)
    clock = iter([0.0, 10.0, 10.0 + STALL_AFTER])
    monkeypatch.setattr("generator.deploy.enginemetrics.scrape", lambda url: next(texts))
    monkeypatch.setattr("generator.deploy.enginemetrics.time.monotonic", lambda: next(clock))
    watch = Watch(target(), "http://x")
    watch.read()
    watch.read()
    assert row(watch, 10.0).state == "serving" and row(watch, 10.0).tokens_per_s == 0.0
    watch.read()
    assert row(watch, 10.0 + STALL_AFTER).state == "stalled"


class _Recorded(BaseHTTPRequestHandler):
    """The recorded /metrics, its generation counter moved on by 50 at each read (a head producing tokens)."""

    reads = 0

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).reads += 1
        text = re.sub(r"^(vllm:generation_tokens_total\{[^}]*\}) (\S+)$",
                      lambda m: f"{m[1]} {float(m[2]) + 50 * type(self).reads}", RECORDED.read_text("utf-8"),
                      flags=re.M)
        body = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_top_in_a_real_terminal_shows_the_recorded_heads_numbers(tmp_path: Path):
    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), _Recorded)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cluster = ('name = "loop"\ngpu = "none"\nrdma = false\n[[nodes]]\nname = "a"\naddress = "127.0.0.1"\n'
                   'context = "a"\n')
        recipe = ('engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\nmodel = "tiny-llama"\n'
                  f'args = ["--served-model-name", "tiny", "--port", "{port}"]\n')
        write_project(tmp_path, cluster, {"tiny-llama": recipe})
        # Its first frame has no rate yet (one read); two more reads later the row has every figure.
        screen = screen_of(["python3", "-m", "generator", "top", "--no-docker", "--interval", "0.5"], tmp_path,
                           _env(), "restarts", timeout=30, settle=1.5)
    finally:
        server.shutdown()
    shown = row_of(screen, "tiny-llama")
    # The recording: nothing running or waiting, KV cache 0.0, and 4 requests' TTFT in buckets le=0.02: 1,
    # le=0.04: 2, le=0.06: 3, le=0.1: 4. The median is rank 2 of 4: the top of the (0.02, 0.04] bucket, 40 ms
    # (what Prometheus's histogram_quantile answers: the lab test compares top with it on the live engine).
    assert (shown["nodes"], shown["state"], shown["running"], shown["waiting"]) == ("a", "idle", "0", "0"), screen
    assert shown["KV %"] == "0.0" and shown["TTFT p50"] == "40 ms", screen
    assert float(shown["tok/s"]) > 0, screen  # 50 tokens a read: the rate between the last two reads


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm-256color", "COLUMNS": "200"}
