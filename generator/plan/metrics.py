"""The metrics stack's plan: what Prometheus scrapes (every recipe's head, the router, a node exporter on every
node), what the blackbox exporter probes, and the alert thresholds, from the same recipes and cluster as the stacks.

One object, read by the renderer (out/_metrics/) and, through what it wrote, by the deployer. A recipe's scrape
target is its own file (targets/<recipe>.yml, Prometheus's file_sd): `recipegen up` puts it in Prometheus's target
folder once the recipe serves and `down` takes it out, so a recipe stopped on purpose is not scraped and cannot
alert, and two recipes taking turns at one address and port are never scraped as each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from generator.engines.ranks import flag_value, serve_port, served_names
from generator.plan.types import LABEL_PREFIX
from generator.resolve.model import Cluster, Metrics, Node, Recipe

METRICS_DIR = "_metrics"  # out/_metrics/: no recipe id starts with `_`, so it cannot clash with one
METRICS_PROJECT = "recipegen-metrics"  # the Compose project and Swarm stack name
METRICS_LABEL = f"{LABEL_PREFIX}.metrics"  # the service's role: prometheus, grafana, blackbox, node-exporter, dcgm
TARGETS_DIR = "/etc/prometheus/targets"  # in the Prometheus container: a volume `up` writes and `down` empties
DATASOURCE_UID = "recipegen-prometheus"  # the dashboard's panels name the datasource by this uid
ENGINE_JOB, PROBE_JOB, NODE_JOB, ROUTER_JOB, GPU_JOB = "engine", "probe", "node", "router", "gpu"
PROBE_INTERVAL_S = 60  # one one-token completion per recipe a minute: nothing an engine notices
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def prometheus_seconds(text: str) -> float:
    """Seconds of a Prometheus duration of the schema's shape (`15s`, `2m`, `15d`)."""
    match = re.fullmatch(r"([0-9]+)(ms|s|m|h|d|w|y)", text)
    assert match, text  # the schema's pattern
    return int(match[1]) * _UNIT_S[match[2]]


def prometheus_duration(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60}m" if whole % 60 == 0 and whole else f"{whole}s"


@dataclass(frozen=True)
class EngineTarget:
    """One recipe's head, as Prometheus scrapes it and the blackbox exporter probes it."""

    recipe_id: str
    engine: str  # vllm | sglang
    nodes: tuple[str, ...]
    tp: int
    pp: int
    head: str  # node name
    address: str  # the head's fabric address
    port: int
    tls: bool
    names: tuple[str, ...]  # its served names, the first asked for by the probe
    keyed: bool  # the engine asks for an API key on /v1: the probe would get a 401, so none is sent

    @property
    def target(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def labels(self) -> dict[str, str]:
        """The labels of every series from this head: what the rules group by and the dashboard shows."""
        return {"recipe": self.recipe_id, "engine": self.engine, "nodes": ",".join(self.nodes), "tp": str(self.tp),
                "pp": str(self.pp), "head": self.head, "model": self.names[0]}

    @property
    def probe_module(self) -> str:
        return f"wedge_{self.recipe_id}"


@dataclass(frozen=True)
class MetricsPlan:
    cluster_name: str
    cluster_source: str  # the cluster file as named in headers
    settings: Metrics
    nodes: tuple[Node, ...]  # every node: a node exporter (and dcgm-exporter) on each
    fabric: dict[str, str]  # node name -> its fabric interfaces (NCCL_SOCKET_IFNAME's names) as a regex, or ""
    engines: tuple[EngineTarget, ...]
    routers: tuple[tuple[Node, int], ...]  # the router's nodes and port: HAProxy's exporter at /metrics

    @property
    def node(self) -> Node:
        return self.settings.node

    @property
    def rate_window(self) -> str:
        """rate()'s window: four scrapes at least (a rate needs two samples; four survive a missed scrape)."""
        return prometheus_duration(max(60.0, 4 * prometheus_seconds(self.settings.scrape_interval)))

    @property
    def quantile_window(self) -> str:
        return prometheus_duration(max(300.0, 4 * prometheus_seconds(self.settings.scrape_interval)))

    @property
    def probe_timeout_s(self) -> float:
        return prometheus_seconds(self.settings.probe_timeout)


def engine_target(recipe: Recipe, cluster: Cluster) -> EngineTarget:
    nodes = cluster.nodes_for(recipe)
    names = tuple(dict.fromkeys(name for name, _ in served_names(recipe)))
    keyed = flag_value(recipe, "--api-key") is not None or "VLLM_API_KEY" in {*recipe.env, *recipe.pass_env,
                                                                              *cluster.env, *cluster.pass_env}
    return EngineTarget(recipe.id, recipe.engine, tuple(n.name for n in nodes), recipe.tensor_parallel_size,
                        recipe.pipeline_parallel_size, nodes[0].name, nodes[0].address, serve_port(recipe),
                        flag_value(recipe, "--ssl-certfile") is not None, names, keyed)


def plan_metrics(recipes: list[Recipe], cluster: Cluster, cluster_source: str) -> MetricsPlan:
    """The metrics stack over `recipes` (every recipe of the project, in order). Requires cluster.metrics."""
    assert cluster.metrics is not None
    routers = tuple((node, cluster.router.port) for node in cluster.router.nodes) if cluster.router else ()
    fabric = {n.name: "|".join(_interfaces(cluster.node_env(n).get("NCCL_SOCKET_IFNAME", ""))) for n in cluster.nodes}
    return MetricsPlan(cluster.name, cluster_source, cluster.metrics, cluster.nodes, fabric,
                       tuple(engine_target(r, cluster) for r in recipes), routers)


def _interfaces(value: str) -> tuple[str, ...]:
    """The interfaces NCCL_SOCKET_IFNAME names (`=` marks an exact name; a `^` list excludes, naming none); none
    when one holds a character a PromQL regex would read as syntax (the dashboard then shows every interface)."""
    names = tuple(part.lstrip("=") for part in value.split(",") if part.lstrip("="))
    if value.startswith("^") or not all(re.fullmatch(r"[A-Za-z0-9_-]+", name) for name in names):
        return ()
    return names
