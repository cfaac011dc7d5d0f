"""The first real request (`up`'s end, `recipegen smoke`): against the lab's engine stand-in run on this machine's
loopback (the same code the lab image runs), so what it measures can be compared with the rates the stand-in was
given; and `up`'s handling of a failed probe, against the scripted backend of test_actions."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from generator.deploy import probe as probe_module
from generator.deploy.backends.base import Removal
from generator.deploy.port import PortHolder
from generator.deploy.probe import PROMPT_ANSWER, ProbeResult, probe
from helpers.actions import deployment  # noqa: F401 - the fixture: a compiled two-node recipe

ENGINE_PYTHON = Path(__file__).parent / "lab" / "engine" / "python"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def stand_in(env: dict[str, str], *flags: str, engine: str = "sglang") -> Iterator[str]:
    """The stand-in engine serving 'tiny' (model org/tiny) on loopback; yields its base URL."""
    port = free_port()
    argv = ([sys.executable, "-m", "sglang.launch_server", "--model-path", "org/tiny"] if engine == "sglang" else
            [sys.executable, "-c", "import sys; from labengine.vllm import main; sys.exit(main())", "serve",
             "org/tiny", "--host", "127.0.0.1"])
    argv += ["--served-model-name", "tiny", "--port", str(port), *flags]
    proc = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(ENGINE_PYTHON), **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    scheme = "https" if "--ssl-certfile" in flags else "http"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.05)
        yield f"{scheme}://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def within(measured: float | None, expected: float, share: float = 0.3) -> bool:
    return measured is not None and abs(measured - expected) <= share * expected


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_probe_measures_the_rates_the_engine_was_given(engine: str):
    with stand_in({"LAB_DECODE_TPS": "25", "LAB_TTFT_BASE_MS": "400"}, engine=engine) as url:
        result = probe(url, "tiny", timeout=60)
    assert result.ok, result.error
    assert result.text == PROMPT_ANSWER
    assert result.counted == "usage" and result.tokens == len(PROMPT_ANSWER.split())
    assert within(result.ttft_ms, 400), result.ttft_ms
    assert within(result.decode_tps, 25), result.decode_tps


def test_the_time_to_first_token_grows_with_the_prompt():
    with stand_in({"LAB_PREFILL_TPS": "100", "LAB_TTFT_BASE_MS": "0"}) as url:
        result = probe(url, "tiny", timeout=60)
    prompt_tokens = len(probe_module.PROMPT.split()) + 1  # words, and the ':' after "exactly"
    assert within(result.ttft_ms, prompt_tokens / 100 * 1000), result.ttft_ms


def test_the_hugging_face_id_is_not_the_served_name_and_gets_a_404():
    with stand_in({}) as url:
        result = probe(url, "org/tiny", timeout=30)
    assert result.error == "HTTP 404: The model `org/tiny` does not exist."


def test_completions_that_fail_while_health_answers_fail_the_probe_with_the_engines_message():
    with stand_in({"LAB_FAIL_COMPLETIONS": "CUDA out of memory while allocating the KV cache"}) as url:
        import urllib.request

        assert urllib.request.urlopen(f"{url}/health", timeout=5).status == 200
        result = probe(url, "tiny", timeout=30)
    assert result.error == "HTTP 500: CUDA out of memory while allocating the KV cache"


def test_a_head_given_a_certificate_is_probed_over_https(tmp_path: Path):
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=spark1.example.com", "-keyout", str(key), "-out", str(cert)], check=True,
                   capture_output=True, timeout=60)
    with stand_in({}, "--ssl-certfile", str(cert), "--ssl-keyfile", str(key), engine="vllm") as url:
        assert url.startswith("https:")
        result = probe(url, "tiny", timeout=30)
        plain = probe(url.replace("https:", "http:"), "tiny", timeout=10)
    assert result.ok and result.text == PROMPT_ANSWER, result.error
    assert not plain.ok


def test_an_engine_that_never_answers_times_out_with_the_option_named():
    with socket.create_server(("127.0.0.1", 0)) as server:
        held = []
        threading.Thread(target=lambda: held.append(server.accept()), daemon=True).start()
        start = time.monotonic()
        result = probe(f"http://127.0.0.1:{server.getsockname()[1]}", "tiny", timeout=1.5)
    assert result.error == "no answer within 2s (--probe-timeout)"
    assert time.monotonic() - start < 10


def test_nothing_listening_is_a_failure_naming_the_url():
    result = probe(f"http://127.0.0.1:{free_port()}", "tiny", timeout=5)
    assert result.error is not None and result.error.startswith("cannot reach http://127.0.0.1:")


# --- up: a failed first request fails up like a dying rank ------------------------------------------------


def test_up_whose_first_request_fails_shows_the_error_and_the_logs_and_cleans_up(deployment, monkeypatch):
    from helpers.actions import FakeBackend, up

    from generator.deploy import actions, readiness

    serving(deployment, monkeypatch, readiness)
    commands = {t.name: [sys.executable, "-c", f"print('last words of {t.name}')"] for t in deployment.targets}
    monkeypatch.setattr(actions, "container_logs", lambda dep, nodes, follow, tail: commands)
    monkeypatch.setattr(probe_module, "probe", lambda url, model, timeout: ProbeResult(
        f"{url}/v1/chat/completions", model, error="HTTP 500: chat template failed"))
    backend = FakeBackend()
    result = up(deployment, backend)
    assert result.started and not result.ok
    assert result.failure == (f"the first request to {deployment.plan.served_model_name} at "
                              f"{deployment.url}/v1/chat/completions failed: HTTP 500: chat template failed")
    assert result.last_logs == {"spark1": "last words of spark1", "spark2": "last words of spark2"}
    # what this up started is removed (issue 22: only that)
    assert result.cleanup == [Removal("spark1", ("new-spark1",)), Removal("spark2", ("new-spark2",))]
    assert backend.calls[-1] == "remove_new"


def test_up_returns_the_first_requests_answer(deployment, monkeypatch):
    from helpers.actions import FakeBackend, up

    from generator.deploy import readiness

    serving(deployment, monkeypatch, readiness)
    asked = []
    good = ProbeResult("u", "m", ttft_ms=12.0, tokens=20, decode_tps=30.0, text=PROMPT_ANSWER)
    monkeypatch.setattr(probe_module, "probe", lambda url, model, timeout: asked.append((url, model)) or good)
    result = up(deployment, FakeBackend())
    assert result.ok and result.probe == good
    assert asked == [(deployment.url, deployment.plan.served_model_name)]


def serving(deployment, monkeypatch, readiness) -> None:
    import json

    served = deployment.plan.served_model_name
    answers = {f"{deployment.url}/health": b"", f"{deployment.url}/v1/models": json.dumps(
        {"data": [{"id": served}]}).encode()}
    monkeypatch.setattr(readiness, "_get", lambda url: answers.get(url))
    # the node names this recipe's head as what listens on the port (issue 22: the answer is its own)
    monkeypatch.setattr(readiness, "holder_or_reason", lambda node, image, port: PortHolder(
        42, "vllm", "f" * 64, f"{deployment.project}-engine-1", deployment.project, "0"))


class _NoUsage:
    """An engine whose stream carries no usage (an older SGLang, a proxy that drops it): each chunk one token,
    the first few a reasoning model's `reasoning_content`."""

    @staticmethod
    def serve() -> tuple[str, object]:
        import http.server
        import json

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                deltas = [{"reasoning_content": "Think"}, {"reasoning_content": " ok"}] + \
                    [{"content": f" w{i}"} for i in range(10)]
                for delta in deltas:
                    time.sleep(0.02)
                    event = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
                    self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{server.server_address[1]}", server


def test_without_usage_in_the_stream_the_chunks_are_counted():
    url, server = _NoUsage.serve()
    try:
        result = probe(url, "tiny", timeout=30)
    finally:
        server.shutdown()  # type: ignore[attr-defined]
    assert result.ok and result.counted == "chunks" and result.tokens == 12
    assert result.text.startswith("Think ok w0")
    assert within(result.decode_tps, 11 / (11 * 0.02), share=0.6), result.decode_tps  # 50/s, loose: sleep jitter


def test_the_up_line_gives_ttft_rate_and_the_first_words():
    from generator.cli.deploy import probe_line

    line = probe_line(ProbeResult("u", "m", ttft_ms=412.4, tokens=20, counted="usage", decode_tps=24.83,
                                  text=PROMPT_ANSWER))
    assert line == ('TTFT 412 ms, 24.8 tok/s (20 tokens, counted from the usage): '
                    '"The quick brown fox jumps over the lazy ..."')


def test_an_empty_answer_fails_the_probe():
    import http.server

    class Empty(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b'data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}\n\n'
                             b'data: {"choices": [], "usage": {"completion_tokens": 0}}\n\ndata: [DONE]\n\n')

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Empty)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = probe(f"http://127.0.0.1:{server.server_address[1]}", "tiny", timeout=30)
    finally:
        server.shutdown()
    assert result.error == "the engine answered with no text (an empty stream)"


def test_the_commands_default_limit_is_the_probes():
    from generator.cli.deploy import smoke, up
    from generator.deploy.probe import PROBE_TIMEOUT

    for command in (up, smoke):
        option = next(p for p in command.params if p.name == "probe_timeout")
        assert option.default == PROBE_TIMEOUT
