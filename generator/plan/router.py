"""The router's plan: which served name goes to which head, and how the HAProxy in front of them is set up.

One object, read by the renderer (haproxy.cfg, the router's compose files and stack) and by the deployer (through
what it wrote). Built from the recipes the cluster's `[router]` serves, after check/router.py found no conflict.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from generator.engines.ranks import flag_value, serve_port, served_names
from generator.plan.types import LABEL_PREFIX
from generator.read.units import duration_ns, size_bytes
from generator.resolve.model import Cluster, Node, Recipe

ROUTER_DIR = "_router"  # out/_router/: no recipe id starts with `_` (RECIPE_ID), so it cannot clash with one
ROUTER_PROJECT = "recipegen-router"  # the Compose project and Swarm stack name
ROUTER_SERVICE = "router"
ROUTER_LABEL = f"{LABEL_PREFIX}.router"  # not the recipes' label: a router never holds a node against a recipe
CONFIG_PATH = "/usr/local/etc/haproxy/haproxy.cfg"  # where the official haproxy image reads its config
STATS_PATH = "/router/stats"  # HAProxy's own stats page (`;csv` for `recipegen ps`)
# Room beside the body in HAProxy's buffer: the request line and headers, and HAProxy's rewrite reserve.
HEADER_ROOM = 64 * 1024
MAXREWRITE = 16 * 1024


_REGEX_SPECIAL = re.compile(r"[.\[\]{}()*+?^$|\\]")  # what a regular expression (PCRE or POSIX ERE) reads as syntax


@dataclass(frozen=True)
class Route:
    """One recipe behind the router: the names its engine answers to and where its head serves."""

    recipe_id: str
    names: tuple[str, ...]
    head: str  # node name
    address: str  # the head node's fabric address
    port: int
    tls: bool  # the engine serves https (`--ssl-certfile`)
    keyed: bool = False  # the engine asks for an API key (`--api-key`, VLLM_API_KEY) on /v1/models


HEAD_BACKEND = "head_"  # every HAProxy backend is a head endpoint: head_<address>_<port> (the dashboard selects them)
_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._:-]")  # what an HAProxy proxy name may not hold


@dataclass(frozen=True)
class Endpoint:
    """One head address and port behind the router, with every routed recipe serving there. One GPU per node:
    recipes take turns at it (two profiles of one model, say), so it is one backend with one server and one health
    check; which recipe holds it now is the containers' label's to say (`recipegen ps`), not the router's."""

    address: str
    port: int
    head: str  # node name
    tls: bool
    routes: tuple[Route, ...]

    @property
    def backend(self) -> str:
        return f"{HEAD_BACKEND}{_UNSAFE_IN_NAME.sub('_', self.address)}_{self.port}"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(name for route in self.routes for name in route.names))

    @property
    def recipe_ids(self) -> tuple[str, ...]:
        return tuple(route.recipe_id for route in self.routes)

    @property
    def check_pattern(self) -> str | None:
        """What the head's /v1/models body holds while one of these recipes serves there: `"id": "<name>"`
        (compact or not, the name as JSON writes it), for any recipe's first name: another model at the same
        address does not pass. None: an engine there asks for an API key, and the check asks /health alone."""
        if any(route.keyed for route in self.routes):
            return None
        firsts = dict.fromkeys(route.names[0] for route in self.routes)
        said = [_REGEX_SPECIAL.sub(r"\\\g<0>", json.dumps(name, ensure_ascii=False)[1:-1]) for name in firsts]
        return '"id" *: *"' + (said[0] if len(said) == 1 else "(" + "|".join(said) + ")") + '"'


@dataclass(frozen=True)
class RouterPlan:
    cluster_name: str
    cluster_source: str  # the cluster file as named in headers
    nodes: tuple[Node, ...]
    port: int
    image: str
    max_body: int  # bytes
    api_key_env: str
    health_interval_ms: int
    timeout_ms: int
    routes: tuple[Route, ...]

    @property
    def bufsize(self) -> int:
        """tune.bufsize: the largest body, plus headers and HAProxy's rewrite reserve."""
        return self.max_body + HEADER_ROOM

    @property
    def names(self) -> tuple[str, ...]:
        """Every served name once: alternatives at one head (check/router.py, served-name) share theirs."""
        return tuple(dict.fromkeys(name for route in self.routes for name in route.names))

    @property
    def models_json(self) -> str:
        """The static, merged /v1/models: every served name once, in the routes' order (OpenAI's list shape);
        `owned_by` names the first recipe serving it, whose backend HAProxy's first matching rule picks."""
        owner: dict[str, str] = {}
        for route in self.routes:
            for name in route.names:
                owner.setdefault(name, route.recipe_id)
        data = [{"id": name, "object": "model", "created": 0, "owned_by": recipe} for name, recipe in owner.items()]
        return json.dumps({"object": "list", "data": data}, separators=(",", ":"), ensure_ascii=False)

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        """The routes grouped by head address and port, in the order each first appears."""
        grouped: dict[tuple[str, int], list[Route]] = {}
        for route in self.routes:
            grouped.setdefault((route.address, route.port), []).append(route)
        return tuple(Endpoint(address, port, routes[0].head, routes[0].tls, tuple(routes))
                     for (address, port), routes in grouped.items())


def _ms(text: str) -> int:
    return max(1, (duration_ns(text) or 0) // 10**6)


def plan_router(recipes: list[Recipe], cluster: Cluster, cluster_source: str) -> RouterPlan:
    """The router over `recipes` (routed, checked, in order). Requires cluster.router."""
    router = cluster.router
    assert router is not None
    routes = []
    for recipe in recipes:
        head = cluster.nodes_for(recipe)[0]
        names = tuple(dict.fromkeys(name for name, _ in served_names(recipe)))
        keyed = flag_value(recipe, "--api-key") is not None or "VLLM_API_KEY" in {*recipe.env, *recipe.pass_env,
                                                                                  *cluster.env, *cluster.pass_env}
        routes.append(Route(recipe.id, names, head.name, head.address, serve_port(recipe),
                            flag_value(recipe, "--ssl-certfile") is not None, keyed))
    return RouterPlan(cluster.name, cluster_source, router.nodes, router.port, router.image,
                      size_bytes(router.max_body) or 0, router.api_key_env, _ms(router.health_interval),
                      _ms(router.timeout), tuple(routes))
