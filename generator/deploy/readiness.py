"""`up`'s wait: until the head answers /health and /v1/models lists the served model, failing as soon as a rank
dies. The ranks are read through the backend, so Compose and Swarm wait the same way.

The answer must come from this recipe's own head: preflight found the port free (or held by this head), and
before `up` says it serves, either the head's container is healthy by its own healthcheck (which asks the engine
from inside that container) or the node names this recipe's head as the process listening on the port."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from typing import Callable

from generator.deploy.backends.base import Backend, RankState
from generator.deploy.port import PortHolder, holder_or_reason
from generator.deploy.targets import CompiledDeployment

READY_POLL_FIRST, READY_POLL_MAX = 0.2, 2.0  # seconds: quick at first, then gentle on the nodes


class DeployFailed(Exception):
    """`up` cannot finish: a rank died, the head never served, a node refused to start."""


def _cause(dep: CompiledDeployment, backend: Backend, failed: list[RankState]) -> RankState:
    """Of the ranks down at once, the one whose end it was: not a rank whose group watch only followed (its exit
    status says so while it is down), else the node the head's group record names (a restarted rank runs again,
    its exit status gone), else the first."""
    own = [r for r in failed if not r.followed]
    if len(own) > 1:
        record = backend.group(dep)
        named = [r for r in own if record is not None and r.node == record.last_node]
        own = named or own
    return (own or failed)[0]


def wait_until_serving(dep: CompiledDeployment, backend: Backend, timeout: float,
                       on_change: Callable[[str, str], None]) -> None:
    deadline = time.monotonic() + timeout
    pause = READY_POLL_FIRST
    seen: dict[str, str] = {}
    phase = "starting"
    served = dep.plan.served_model_name
    head_health = "-"
    while True:
        states = backend.states(dep)
        for rank in states:
            if rank.node == dep.head.name:
                head_health = rank.health
            shown = rank.state + (f" ({rank.restarts} restarts)" if rank.restarts else "")
            if seen.get(rank.node) != shown:
                seen[rank.node] = shown
                on_change(rank.node, shown)
        failed = [r for r in states if r.failed]
        if failed:
            cause = _cause(dep, backend, failed)
            raise DeployFailed(f"rank on {cause.node} is {cause.state}: {cause.status}")
        health = _get(f"{dep.url}/health")
        if health is not None and phase == "starting":
            phase = "healthy"
            on_change(dep.head.name, "/health answers")
        if health is not None:
            models = _get(f"{dep.url}/v1/models")
            if models and served in model_ids(models) and _from_own_head(dep, head_health):
                on_change(dep.head.name, f"serving {served} at {dep.url}")
                return
        if time.monotonic() > deadline:
            raise DeployFailed(f"the head did not serve {served} at {dep.url} within {timeout:.0f}s")
        time.sleep(pause)
        pause = min(pause * 1.5, READY_POLL_MAX)


def _from_own_head(dep: CompiledDeployment, health: str) -> bool:
    """Whether what answered on the head's port is this recipe's head. Its healthcheck passing says so; before
    the first one has run, the node is asked who listens. Another process there fails `up` (it is not ours to
    stop); a node that cannot say leaves preflight's word (the port was free) standing."""
    if health == "healthy":
        return True
    holder = holder_or_reason(dep.head, dep.plan.head.image, dep.plan.serve_port)
    if isinstance(holder, PortHolder) and not (holder.recipe == dep.project and holder.rank == "0"):
        raise DeployFailed(f"port {dep.plan.serve_port} on {dep.head.name} answers from {holder.describe()}, not "
                           f"from this recipe's head")
    return holder is not None


# The head is asked directly: an http_proxy in the environment must not answer for it. Its certificate is not
# verified: this only asks whether the engine answers, sends nothing secret, and an engine's certificate is often
# self-signed or names another host than the ssh_host it is reached by.
_NO_VERIFY = ssl.create_default_context()
_NO_VERIFY.check_hostname = False
_NO_VERIFY.verify_mode = ssl.CERT_NONE
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=_NO_VERIFY))


def _get(url: str) -> bytes | None:
    try:
        with DIRECT.open(url, timeout=3) as response:
            body: bytes = response.read()
            return body if response.status == 200 else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def model_ids(body: bytes) -> set[str]:
    try:
        return {str(m.get("id")) for m in json.loads(body).get("data", [])}
    except (ValueError, AttributeError, TypeError):
        return set()
