"""What the engine stand-ins share: their log lines, flag parsing, the rank rendezvous and HTTP.

The rank rendezvous is a line over TCP: a worker sends "rank R" to the head's listener, which
records it and answers "ok"; the head serves HTTP only once enough distinct lines arrived, like a
real engine that serves only when every rank has joined. Standard library only: the image has
python3 and nothing else, like a real engine image's base.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import NoReturn

# Names of the fabric environment the stand-ins print first; tests read them from `docker logs`.
FABRIC_ENV = ("NCCL_", "GLOO_", "VLLM_HOST_IP", "MASTER_ADDR")


def setting(name: str, default: int) -> int:
    """An integer knob of the lab from the environment (LAB_JOIN_TIMEOUT, LAB_RANK_TIMEOUT)."""
    return int(os.environ.get(name, default))


def join_timeout() -> int:
    """How long a worker keeps trying to reach its head (real engines retry for a while too)."""
    return setting("LAB_JOIN_TIMEOUT", 20)


def rank_timeout() -> int:
    """How long a head waits for its workers before giving up."""
    return setting("LAB_RANK_TIMEOUT", 600)


class Log:
    """Lines tagged "[tag] ": stdout for progress, stderr for the error that ends the process.
    Every line is flushed at once: the process may be killed, and `docker logs` is read live."""

    def __init__(self, tag: str):
        self.tag = tag

    def __call__(self, message: str) -> None:
        print(f"[{self.tag}] {message}", flush=True)

    def die(self, message: str) -> NoReturn:
        print(f"[{self.tag}] error: {message}", file=sys.stderr, flush=True)
        sys.exit(1)

    def start(self, argv: Iterable[str]) -> None:
        """The argv and the fabric env, first thing."""
        self("argv:" + "".join(f" '{a}'" for a in argv))
        self.env(os.environ, "env")

    def env(self, env: dict[str, str] | os._Environ[str], label: str) -> None:
        for name in sorted(env):
            if name.startswith(FABRIC_ENV):
                self(f"{label}: {name}={env[name]}")


def parse_flags(args: list[str], booleans: Callable[[str], bool]) -> tuple[dict[str, str], list[str]]:
    """Flags as real engine CLIs take them, in any order: `--flag value`, `--flag=value`, and the
    flags `booleans` accepts, which take no value. Returns ({flag: value}, positionals); a flag
    without a value maps to "". Flags the stand-ins do not know are parsed the same way and ignored."""
    flags: dict[str, str] = {}
    positionals: list[str] = []
    rest = list(args)
    while rest:
        word = rest.pop(0)
        if not word.startswith("-") or word == "-":
            positionals.append(word)
        elif "=" in word and word.startswith("--"):
            name, _, value = word.partition("=")
            flags[name] = value
        elif booleans(word) or not rest or rest[0].startswith("--"):
            flags[word] = ""
        else:
            flags[word] = rest.pop(0)
    return flags, positionals


def integers(log: Log, **values: str) -> dict[str, int]:
    """Each value as an int, or die naming the one that is not."""
    out = {}
    for name, value in values.items():
        if not value.isdigit():
            log.die(f"not an integer: '{value}'")
        out[name] = int(value)
    return out


def on_stop(log: Log) -> None:
    """Exit 0 on SIGTERM/SIGINT. Needed because a stand-in runs as PID 1 of its container, which
    ignores signals it has no handler for: without it `docker stop` waits the whole grace period."""

    def stop(signum: int, frame: object) -> None:
        log("stopped")
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def join(log: Log, host: str, port: int | str, line: str) -> None:
    """Deliver `line` to a head's listener, retrying up to LAB_JOIN_TIMEOUT seconds; die if the
    head cannot be reached (or LAB_FAIL_JOIN is set: fault injection for the deploy tests)."""
    if not host or not str(port):
        log.die(f"no head address to join (host='{host}' port='{port}')")
    if os.environ.get("LAB_FAIL_JOIN"):
        log.die(f"cannot join {host}:{port}: {os.environ['LAB_FAIL_JOIN']}")
    deadline = time.monotonic() + join_timeout()
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=3) as conn:
                conn.sendall(f"{line}\n".encode())
                if conn.makefile().readline().strip() == "ok":
                    log(f"joined {host}:{port} as '{line}'")
                    return
        except OSError:
            pass
        if time.monotonic() >= deadline:
            log.die(f"cannot reach head at {host}:{port} after {join_timeout()}s")
        time.sleep(0.2)


class Rendezvous:
    """The head's listener: accepts join lines on a port in a thread and records the distinct ones
    (also in `record`, a file in the container, for whoever looks inside)."""

    def __init__(self, log: Log, port: int, record: str):
        self.log = log
        self.lines: set[str] = set()
        self.record = Path(record)
        self.record.parent.mkdir(parents=True, exist_ok=True)
        self.record.write_text("")
        self.server = socket.create_server(("", port), reuse_port=False)
        threading.Thread(target=self._accept, daemon=True).start()
        log(f"listening for ranks on port {port}")

    def _accept(self) -> None:
        while True:
            conn, _ = self.server.accept()
            with conn:
                conn.settimeout(5)
                try:
                    line = conn.makefile().readline().strip()
                    if line:
                        self.lines.add(line)
                        with self.record.open("a") as f:
                            f.write(line + "\n")
                        conn.sendall(b"ok\n")
                except OSError:
                    pass

    def wait(self, count: int, what: str) -> None:
        wait_for(self.log, lambda: len(self.lines), count, what)


def wait_for(log: Log, have: Callable[[], int], count: int, what: str) -> None:
    """Wait until have() reaches count, for at most LAB_RANK_TIMEOUT seconds."""
    log(f"waiting for {count} {what}")
    deadline = time.monotonic() + rank_timeout()
    while (got := have()) < count:
        if time.monotonic() >= deadline:
            log.die(f"only {got} of {count} {what} joined after {rank_timeout()}s")
        time.sleep(0.2)
    log(f"all {count} {what} joined")


def serve(log: Log, host: str, port: int, model: str, owner: str, flags: dict[str, str] | None = None) -> NoReturn:
    """Serve the OpenAI API (labengine.openai_api) until stopped; over TLS when the flags give
    --ssl-certfile and --ssl-keyfile, as vLLM and SGLang do."""
    from labengine.openai_api import OpenAIHandler

    handler = type("Handler", (OpenAIHandler,), {"served": model, "owner": owner})
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as err:
        log.die(f"cannot serve on {host}:{port}: {err}")
    cert, key = (flags or {}).get("--ssl-certfile"), (flags or {}).get("--ssl-keyfile")
    scheme = "http"
    if cert:
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key or None)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    log(f"serving {model} on {scheme}://{host}:{port}")
    server.serve_forever()
    log.die("the HTTP server stopped")


def stay() -> NoReturn:
    """Keep a worker up until it is stopped (on_stop ends it)."""
    while True:
        signal.pause()
