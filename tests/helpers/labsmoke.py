"""Shared by the tests: moved from tests/test_lab_smoke.py, which uses them too."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import pytest
from lab import IFNAME, IMAGE, LAB_MEMLOCK, LIGHT_RAY, RAY_IMAGE, Lab, Node
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


HTTP_TIMEOUT = 60


def http_get(url: str) -> tuple[int, bytes]:
    # No proxies: the lab's addresses are reached directly, never through a proxy from the env.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=3) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def wait_log(lab: Lab, node: Node, name: str, text: str, timeout: float) -> str:
    """Wait (bounded) until the container's log (stdout and stderr) holds text; return the log."""
    deadline = time.monotonic() + timeout
    while True:
        out = lab.docker(node, "logs", name)
        if text in out.stdout + out.stderr:
            return out.stdout + out.stderr
        if time.monotonic() > deadline:
            pytest.fail(f"{node.name}: no {text!r} in the log of {name} within {timeout:.0f}s:\n{out.stdout}{out.stderr}")
        time.sleep(0.5)


def wait_http(url: str, timeout: float = HTTP_TIMEOUT) -> bytes:
    """Poll url until it answers 200 (bounded); return the body."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            status, body = http_get(url)
            if status == 200:
                return body
            last = status
        except OSError as err:
            last = err
        time.sleep(0.5)
    pytest.fail(f"{url} did not answer 200 within {timeout:.0f}s (last: {last})")


def run_detached(lab: Lab, node: Node, name: str, argv: list[str],
                 env: dict[str, str] | None = None, image: str = IMAGE) -> str:
    """Start a container of the engine image (or `image`) with host networking; return its name."""
    flags = [f"--env={k}={v}" for k, v in (env or {}).items()]
    lab.docker(node, "run", "-d", "--name", name, "--network", "host", *flags, image, *argv)
    return name
