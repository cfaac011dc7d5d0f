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
    # The name the health check asks the head's /v1/models for: a head serving another recipe at the same address
    # and port (one GPU per node: recipes take turns on it) must not pass for this one. None: the engine asks
    # for an API key there (`--api-key`, VLLM_API_KEY), and the check asks /health alone.
    check_name: str | None = None

    @property
    def check_pattern(self) -> str:
        """The /v1/models body holds `"id": "<name>"` (compact or not: vLLM's and SGLang's JSON, the lab's)."""
        return '"id" *: *"' + _REGEX_SPECIAL.sub(r"\\\g<0>", self.check_name or "") + '"'

    @property
    def backend(self) -> str:
        return f"recipe_{self.recipe_id}"  # recipe ids are [a-z0-9_-]: a valid HAProxy name as they are


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
                            flag_value(recipe, "--ssl-certfile") is not None, None if keyed else names[0]))
    return RouterPlan(cluster.name, cluster_source, router.nodes, router.port, router.image,
                      size_bytes(router.max_body) or 0, router.api_key_env, _ms(router.health_interval),
                      _ms(router.timeout), tuple(routes))
