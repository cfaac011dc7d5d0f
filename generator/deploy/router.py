"""The router's actions: read it back from out/_router/, bring it up (or to the new config), and ask it how each
recipe's backend is doing. Each returns data; the CLI formats it (generator/cli/router.py).

Health comes from the router itself: HAProxy's stats page (`/router/stats;csv`) on each router node, asked from
here as a client asks the router, with the API key when the deploying shell has one.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator.deploy.backends.base import RankState
from generator.deploy.backends.router import Applied, RouterBackend, RouterDeployment, RouterTarget
from generator.deploy.readiness import DIRECT
from generator.deploy.targets import Deployment, each
from generator.diagnostics import Diagnostic, RecipegenError
from generator.plan.router import ROUTER_DIR, ROUTER_SERVICE, STATS_PATH
from generator.resolve.model import Cluster

BACKEND_PREFIX = "head_"  # generator/plan/router.py's Endpoint.backend
# The comment under each endpoint's backend in haproxy.cfg (templates/haproxy.cfg.j2): which recipes serve there.
_ENDPOINT = re.compile(r"^backend (head_\S+)\n    # The head on .* of recipe\(s\): ([a-z0-9_ -]+)$", re.MULTILINE)
UP_WAIT = 15.0  # seconds for the router's health checks to see a new head (two checks at 1s, a reload)
DOWN_WAIT = 10.0


@dataclass(frozen=True)
class BackendHealth:
    """One head endpoint's backend as a router node sees it (HAProxy's status and last check)."""

    backend: str
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
    backends: dict[str, BackendHealth] = field(default_factory=dict)  # backend name -> health
    error: str | None = None  # why the router did not say how its backends are


@dataclass(frozen=True)
class RouterUp:
    """The router step of `up`: the router brought to out/_router's config on each node, then whether each node
    routes to the recipe's head (its health, or why it could not say)."""

    applied: list[Applied]
    routes: dict[str, BackendHealth | str] = field(default_factory=dict)  # router node -> health (or why not)
    urls: dict[str, str] = field(default_factory=dict)  # router node -> where clients go

    @property
    def ok(self) -> bool:
        return all(a.ok for a in self.applied) and len(self.routes) == len(self.applied) and all(
            isinstance(h, BackendHealth) and h.up for h in self.routes.values())


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
    config = (folder / "haproxy.cfg").read_text("utf-8", "replace")
    backends = {recipe: name for name, recipes in _ENDPOINT.findall(config) for recipe in recipes.split()}
    return RouterDeployment(cluster, folder, tuple(targets), image, router.port, router.api_key_env, backends)


def router_of(dep: Deployment) -> RouterDeployment | None:
    """The cluster's router when it routes this recipe (`[router] recipes` may leave it out)."""
    routed = dep.cluster.router.recipes if dep.cluster.router is not None else None
    if routed is not None and dep.project not in routed:
        return None
    return router_from_out(dep.cluster, dep.out_dir)


def without_router(dep: Deployment) -> str:
    """Why `--via-router` has no router to go through for this recipe."""
    if dep.cluster.router is not None and router_from_out(dep.cluster, dep.out_dir) is not None:
        return "its [router] does not route this recipe (add it to `recipes`)"
    return "has no [router] built in out/ (add one to the cluster file and run `recipegen build`)"


def via_router(router: RouterDeployment) -> tuple[str, str | None]:
    """The first router node's base URL and the API key the deploying shell gives it."""
    return router.url(router.targets[0]), os.environ.get(router.api_key_env) or None


def join(dep: Deployment, swarm: bool, timeout: float = UP_WAIT) -> RouterUp | None:
    """`up`'s router step: bring the router up or to the current config, then wait until every router node
    routes to the recipe's head. None: no router routes this recipe."""
    from generator.deploy.backends.router import choose_router

    router = router_of(dep)
    if router is None:
        return None
    applied = apply(router, choose_router(swarm, dep.cluster))
    if not all(a.ok for a in applied):
        return RouterUp(applied)
    said = wait_backend(router, dep.project, up=True, timeout=timeout)
    return RouterUp(applied, said, {t.name: router.url(t) for t in router.targets})


def leave(dep: Deployment, swarm: bool, timeout: float = DOWN_WAIT) -> dict[str, BackendHealth | str] | None:
    """After `down`: each running router node's word on the recipe's head (its checks take it out within
    seconds). None: no router routes this recipe; a router that is not running is not asked."""
    from dataclasses import replace

    from generator.deploy.backends.router import choose_router

    router = router_of(dep)
    if router is None:
        return None
    router = replace(router, targets=running_targets(router, choose_router(swarm, dep.cluster)))
    return wait_backend(router, dep.project, up=False, timeout=timeout)


def _key_header(router: RouterDeployment) -> dict[str, str]:
    key = os.environ.get(router.api_key_env)
    return {"Authorization": f"Bearer {key}"} if key else {}


def backend_health(router: RouterDeployment, target: RouterTarget, timeout: float = 5.0
                   ) -> dict[str, BackendHealth]:
    """Every head endpoint's backend's health on one router node (by backend name), from HAProxy's stats."""
    request = urllib.request.Request(f"{router.url(target)}{STATS_PATH};csv", headers=_key_header(router))
    with DIRECT.open(request, timeout=timeout) as response:
        text = response.read().decode("utf-8", "replace")
    rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
    found = {}
    for row in rows:
        proxy = row.get("pxname") or ""
        if proxy.startswith(BACKEND_PREFIX) and row.get("svname") not in ("BACKEND", "FRONTEND"):
            changed = row.get("lastchg") or ""
            found[proxy] = BackendHealth(proxy, row.get("status") or "?", row.get("check_status") or "-",
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
        backend = router.backends.get(recipe_id, "")
        found = each(router.targets, lambda t: backend_health(router, t).get(backend))
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


@dataclass(frozen=True)
class RouterPs:
    """`ps`'s router rows for one recipe: each router node, the recipe's head endpoint's health there, and which
    recipe holds that head now (its running container's label on the head node: recipes take turns there)."""

    backend: str | None  # the recipe's head endpoint's backend (None: out/_router does not route it)
    nodes: list[RouterNode]
    holders: list[str] | str  # recipes running on the head node, or why that could not be said


def holders(dep: Deployment) -> list[str] | str:
    """The recipes whose containers run on the recipe's head node (their label says which recipe each is)."""
    from generator.deploy.docker import DockerError
    from generator.deploy.names import RECIPE_LABEL

    try:
        lines = dep.head.docker.run("ps", "--filter", f"label={RECIPE_LABEL}", "--format",
                                    f'{{{{json (.Label "{RECIPE_LABEL}")}}}}', timeout=10).splitlines()
    except DockerError as exc:
        return exc.short
    return sorted({str(json.loads(line)) for line in lines if line.strip()} - {""})


def ps(dep: Deployment, swarm: bool) -> RouterPs | None:
    """The router's part of `ps RECIPE`; None when no router routes the recipe."""
    from generator.deploy.backends.router import choose_router

    router = router_of(dep)
    if router is None:
        return None
    return RouterPs(router.backends.get(dep.project), status(router, choose_router(swarm, dep.cluster)),
                    holders(dep))
