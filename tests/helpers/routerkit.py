"""What the router's tests and benchmarks/router.py share: OpenAI stand-ins on loopback (the lab engine's own HTTP
side, tests/lab/engine/python/labengine/openai_api.py), Debian's haproxy running a generated haproxy.cfg, and a
streamed chat request timed to its first token.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lab" / "engine" / "python"))
from labengine.openai_api import OpenAIHandler  # noqa: E402  (the lab image's stand-in, as it is)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: object, client_address: object) -> None:
        """HAProxy's health checks close with a reset: nothing to report."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


@dataclass
class StandIn:
    """An OpenAI server answering `served` on host:port, in this process; start() again after stop()."""

    host: str
    port: int
    served: str
    _server: _Server | None = field(default=None, repr=False)

    def start(self) -> "StandIn":
        # HTTP/1.0, as the stand-in is written: a stream's end is the connection's close.
        handler = type("Handler", (OpenAIHandler,), {"served": self.served, "owner": "stand-in"})
        self._server = _Server((self.host, self.port), handler)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def haproxy_binary() -> str | None:
    return shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy",) if os.path.exists(p)), None)


def need_haproxy() -> str:
    """haproxy's path for a test that runs it. The README's steps do not install it: outside CI the test skips
    with the reason printed (as the lab's tests do); under CI (`CI` set), which installs it, the test fails."""
    import pytest

    binary = haproxy_binary()
    if binary is None:
        reason = "haproxy is missing: apt-get install haproxy (.ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must run the router tests", pytrace=False)
        print(f"\nrouter tests skipped: {reason}")
        pytest.skip(reason)
    return binary


def start_haproxy(config: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Debian's haproxy on the generated config, in master-worker mode as the router's compose file runs it."""
    binary = haproxy_binary()
    assert binary, "haproxy is not installed (apt-get install haproxy; .ci/run installs it)"
    return subprocess.Popen([binary, "-W", "-db", "-f", str(config)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                                           **(env or {})})


def wait_listening(host: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port}")


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes  # the whole body (for a stream: every event)
    ttft: float | None  # seconds to the first content chunk
    total: float  # seconds to the end
    chunks: int  # content chunks
    arrivals: tuple[float, ...] = ()  # seconds from the start at which each content chunk arrived

    def json(self) -> dict:
        return json.loads(self.body)


def request(host: str, port: int, method: str, path: str, body: dict | bytes | None = None,
            headers: dict[str, str] | None = None, timeout: float = 30.0) -> Answer:
    """One request; a streamed answer (text/event-stream) is read event by event, each content chunk timed."""
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    start = time.perf_counter()
    try:
        conn.request(method, path, data, {"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        arrivals: list[float] = []
        parts: list[bytes] = []
        if response.getheader("Content-Type", "").startswith("text/event-stream"):
            while line := response.readline():
                parts.append(line)
                if line.startswith(b"data: {") and b'"content": "' in line and b'"content": ""' not in line:
                    arrivals.append(time.perf_counter() - start)
        else:
            parts.append(response.read())
        return Answer(response.status, b"".join(parts), arrivals[0] if arrivals else None,
                      time.perf_counter() - start, len(arrivals), tuple(arrivals))
    finally:
        conn.close()


def chat(model: str, max_tokens: int = 16, stream: bool = True) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "Say something"}], "max_tokens": max_tokens,
            "ignore_eos": True, "stream": stream}
