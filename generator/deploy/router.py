"""The router's actions: read it back from out/_router/, bring it up (or to the new config), and ask it how each
recipe's backend is doing. Each returns data; the CLI formats it (generator/cli/router.py).

Health comes from the router itself: HAProxy's stats page (`/router/stats;csv`) on each router node, asked from
here as a client asks the router, with the API key when the deploying shell has one.
"""

from __future__ import annotations

import csv
import io
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator.deploy.backends.base import RankState
from generator.deploy.backends.router import Applied, RouterBackend, RouterDeployment, RouterTarget
from generator.deploy.readiness import DIRECT
from generator.deploy.targets import each
from generator.diagnostics import Diagnostic, RecipegenError
from generator.plan.router import ROUTER_DIR, ROUTER_SERVICE, STATS_PATH
from generator.resolve.model import Cluster

BACKEND_PREFIX = "recipe_"  # generator/plan/router.py's Route.backend


@dataclass(frozen=True)
class BackendHealth:
    """One recipe's backend as a router node sees it (HAProxy's status and last check)."""

    recipe_id: str
    status: str  # UP, DOWN, MAINT, "UP 1/2" (going down), "DOWN 1/2" (coming up), "no check"
    check: str  # the last check: L7OK, L4CON (refused), L4TOUT ...
    for_s: int | None = None  # seconds in this status

    @property
    def up(self) -> bool:
        return self.status.startswith("UP")


@dataclass(frozen=True)
class RouterNode:
    """One router node: its container (or task), where clients go, and every backend's health there."""

    container: RankState
    url: str
    backends: dict[str, BackendHealth] = field(default_factory=dict)
    error: str | None = None  # why the router did not say how its backends are


def router_from_out(cluster: Cluster, out_dir: Path) -> RouterDeployment | None:
    """The router out/ holds for this cluster; None when the cluster has none (or it was never built)."""
    from generator.write.verify import read_yaml

    router = cluster.router
    folder = out_dir / ROUTER_DIR
    if router is None or not (folder / "haproxy.cfg").is_file():
        return None
    targets = []
    for node in router.nodes:
        file = folder / node.name / "compose.yaml"
        try:
            compose: Any = read_yaml(file.read_text("utf-8"))
            image = str(compose["services"][ROUTER_SERVICE]["image"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RecipegenError(Diagnostic(str(file), None, None, None, f"not the router's compose file: {exc} "
                                                                         "(run `recipegen build`)")) from None
        targets.append(RouterTarget(node, file))
    return RouterDeployment(cluster, folder, tuple(targets), image, router.port, router.api_key_env)


def _key_header(router: RouterDeployment) -> dict[str, str]:
    key = os.environ.get(router.api_key_env)
    return {"Authorization": f"Bearer {key}"} if key else {}


def backend_health(router: RouterDeployment, target: RouterTarget, timeout: float = 5.0
                   ) -> dict[str, BackendHealth]:
    """Every recipe backend's health on one router node, from HAProxy's stats as CSV."""
    request = urllib.request.Request(f"{router.url(target)}{STATS_PATH};csv", headers=_key_header(router))
    with DIRECT.open(request, timeout=timeout) as response:
        text = response.read().decode("utf-8", "replace")
    rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
    found = {}
    for row in rows:
        proxy = row.get("pxname") or ""
        if proxy.startswith(BACKEND_PREFIX) and row.get("svname") not in ("BACKEND", "FRONTEND"):
            changed = row.get("lastchg") or ""
            found[proxy[len(BACKEND_PREFIX):]] = BackendHealth(
                proxy[len(BACKEND_PREFIX):], row.get("status") or "?", row.get("check_status") or "-",
                int(changed) if changed.isdigit() else None)
    return found


def apply(router: RouterDeployment, backend: RouterBackend) -> list[Applied]:
    return backend.apply(router)


def status(router: RouterDeployment, backend: RouterBackend) -> list[RouterNode]:
    """Each router node's container and every backend's health there (all nodes at once)."""
    containers = {s.node: s for s in backend.states(router)}
    # Asked only where the router runs: a node whose router is stopped, or that does not answer docker, is not
    # also asked over the network (an offline `ps` stays offline).
    running = running_targets(router, backend, containers)
    health = each(running, lambda t: backend_health(router, t))
    nodes = []
    for target in router.targets:
        state = containers[target.name]
        found = health.get(target.name, f"the router is {state.state} there")
        error = None if isinstance(found, dict) else found if isinstance(found, str) else _said(found)
        nodes.append(RouterNode(containers[target.name], router.url(target), found if isinstance(found, dict) else {},
                                error))
    return nodes


def running_targets(router: RouterDeployment, backend: RouterBackend,
                    containers: dict[str, RankState] | None = None) -> tuple[RouterTarget, ...]:
    """The router nodes whose router container (or task) runs."""
    states = containers if containers is not None else {s.node: s for s in backend.states(router)}
    return tuple(t for t in router.targets if states[t.name].state == "running")


def wait_backend(router: RouterDeployment, recipe_id: str, up: bool, timeout: float,
                 poll: float = 0.5) -> dict[str, BackendHealth | str]:
    """Until every router node reports the recipe's backend up (or down), or `timeout`: each node's last word
    (its health, or why it could not say)."""
    deadline = time.monotonic() + timeout
    while True:
        found = each(router.targets, lambda t: backend_health(router, t).get(recipe_id))
        said: dict[str, BackendHealth | str] = {
            name: (h if isinstance(h, BackendHealth) else _said(h) if isinstance(h, Exception) else
                   f"no backend for {recipe_id} (is out/_router current?)") for name, h in found.items()}
        if all(isinstance(h, BackendHealth) and h.up == up and " " not in h.status for h in said.values()) \
                or time.monotonic() > deadline:
            return said
        time.sleep(poll)


def _said(exc: object) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} from the router's stats"
    reason = getattr(exc, "reason", exc)
    return f"the router does not answer: {reason}"
