"""The metrics stack's actions: read it back from out/_metrics/, bring it up (or to out/'s files), put a recipe's
scrape target in or take it out, and say how it runs. Each returns data; the CLI formats it (cli/metrics.py).

A recipe's target is its own file, targets/<recipe>.yml, in Prometheus's target volume (file_sd: Prometheus sees a
change within seconds). `up` copies it there once the recipe serves; `down` replaces it with an empty list before
the recipe stops, so a recipe stopped on purpose is never scraped and never alerts. The copies go through
`docker cp` with a tar on stdin, so no tool is needed inside the Prometheus image. Prometheus reads a target file
again on every change of it, so a read between two writes is followed by a whole one.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from generator.deploy.backends.base import RankState
from generator.deploy.container_files import read_file, write_file
from generator.deploy.docker import DockerError, reason
from generator.deploy.readiness import DIRECT
from generator.deploy.targets import OnNode, each
from generator.plan.metrics import METRICS_DIR, METRICS_LABEL, METRICS_PROJECT, TARGETS_DIR
from generator.resolve.model import Cluster, Node

STOPPED = "# recipegen down: not scraped (stopped on purpose)\n[]\n"  # file_sd's empty list: no target


@dataclass(frozen=True)
class MetricsNode(OnNode):
    compose_file: Path


@dataclass(frozen=True)
class MetricsDeployment:
    """The metrics stack as out/_metrics/ has it: a compose file per node, the stack, the per-recipe targets."""

    cluster: Cluster
    folder: Path  # out/_metrics
    nodes: tuple[MetricsNode, ...]
    home: Node  # the node running Prometheus, Grafana and the blackbox exporter
    prometheus_port: int
    grafana_port: int
    password_env: str

    @property
    def prometheus_url(self) -> str:
        return f"http://{self.home.ssh_host}:{self.prometheus_port}"

    @property
    def grafana_url(self) -> str:
        return f"http://{self.home.ssh_host}:{self.grafana_port}"

    def target_file(self, recipe_id: str) -> Path:
        return self.folder / "targets" / f"{recipe_id}.yml"


@dataclass(frozen=True)
class Applied:
    node: str
    action: str  # "up" (Compose), "recreated <services>" (a configuration file changed), "deployed" (Swarm)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def metrics_from_out(cluster: Cluster, out_dir: Path) -> MetricsDeployment | None:
    """The metrics stack out/ holds for this cluster; None when the cluster has none (or it was never built)."""
    settings = cluster.metrics
    folder = out_dir / METRICS_DIR
    if settings is None or not (folder / "prometheus.yml").is_file():
        return None
    nodes = tuple(MetricsNode(n, folder / n.name / "compose.yaml") for n in cluster.nodes)
    return MetricsDeployment(cluster, folder, nodes, settings.node, settings.prometheus_port, settings.grafana_port,
                             settings.grafana_password_env)


def _container(docker_node: OnNode, role: str) -> str | None:
    """The running container of a role (Compose's or a Swarm task's) on a node, found by recipegen's label."""
    found = docker_node.docker.run("ps", "-q", "--filter", f"label={METRICS_LABEL}={role}").split()
    return found[0] if found else None


def _container_or_none(node: OnNode) -> str | None:
    try:
        return _container(node, "prometheus")
    except DockerError:
        return None


# Configuration files each service on the metrics node reads (compose-configs: Compose 2.40 recreates a
# container for a new image or flag, not for a config's new text).
_SERVICE_FILES = {"prometheus": ("prometheus.yml", "rules/recording.yml", "rules/alerts.yml"),
                  "blackbox": ("blackbox.yml",),
                  "grafana": ("grafana/datasource.yml", "grafana/dashboards.yml", "grafana/dashboard.json")}


def _stale_services(metrics: MetricsDeployment, node: MetricsNode) -> list[str]:
    from generator.render.metrics import CONFIGS

    stale = []
    for service, files in _SERVICE_FILES.items():
        container = _container(node, service)
        if container is None:
            continue
        if any(read_file(node, container, CONFIGS[f]) != (metrics.folder / f).read_bytes() for f in files):
            stale.append(service)
    return stale


def apply_compose(metrics: MetricsDeployment) -> list[Applied]:
    """Every node's project up (`up -d`: unchanged containers stay); on the metrics node a service whose
    configuration file changed is recreated (Prometheus's samples and targets live in volumes)."""
    def bring(node: MetricsNode) -> Applied:
        node.docker.compose(str(node.compose_file), "up", "-d", "--remove-orphans", timeout=600)
        if node.name != metrics.home.name:
            return Applied(node.name, "up")
        stale = _stale_services(metrics, node)
        if stale:
            node.docker.compose(str(node.compose_file), "up", "-d", "--force-recreate", *stale, timeout=600)
        return Applied(node.name, f"up, recreated {', '.join(stale)} (new configuration)" if stale else "up")

    results = each(metrics.nodes, bring)
    return [r if isinstance(r := results[n.name], Applied) else Applied(n.name, "failed", reason(r))
            for n in metrics.nodes]


def apply_swarm(metrics: MetricsDeployment) -> list[Applied]:
    from generator.deploy.backends.swarm import SwarmBackend

    try:
        SwarmBackend(metrics.cluster).manager.run("stack", "deploy", "--prune", "-c",
                                                  str(metrics.folder / "stack.yaml"), METRICS_PROJECT, timeout=600)
    except DockerError as exc:
        return [Applied(n.name, "failed", exc.short) for n in metrics.nodes]
    return [Applied(n.name, "deployed") for n in metrics.nodes]


def apply(metrics: MetricsDeployment, swarm: bool) -> list[Applied]:
    return apply_swarm(metrics) if swarm else apply_compose(metrics)


def home(metrics: MetricsDeployment) -> MetricsNode:
    return next(n for n in metrics.nodes if n.name == metrics.home.name)


def set_target(metrics: MetricsDeployment, recipe_id: str, scraped: bool, wait: float = 60.0) -> str | None:
    """Put the recipe's target in (scraped) or replace it with an empty list; None when done, else why not.
    Waits for Prometheus's container, which `apply` may have just started."""
    node = home(metrics)
    deadline = time.monotonic() + wait
    while (container := _container_or_none(node)) is None:
        if time.monotonic() > deadline:
            return f"no Prometheus container running on {node.name}"
        time.sleep(1)
    data = metrics.target_file(recipe_id).read_bytes() if scraped else STOPPED.encode()
    try:
        write_file(node, container, TARGETS_DIR, f"{recipe_id}.yml", data)
    except DockerError as exc:
        return exc.short
    return None


def target_file_state(metrics: MetricsDeployment, recipe_id: str) -> str:
    """"scraped", "stopped" (down took it out), "absent" (never up since the stack started), or "unknown: why"."""
    node = home(metrics)
    try:
        container = _container(node, "prometheus")
    except DockerError as exc:
        return f"unknown: {exc.short}"
    if container is None:
        return f"unknown: no Prometheus container on {node.name}"
    data = read_file(node, container, f"{TARGETS_DIR}/{recipe_id}.yml")
    return "absent" if data is None else "stopped" if data == STOPPED.encode() else "scraped"


def query(metrics: MetricsDeployment, promql: str, timeout: float = 5.0) -> list[dict[str, object]]:
    """An instant query's samples (Prometheus's HTTP API), each {"metric": labels, "value": [time, text]}."""
    url = f"{metrics.prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with DIRECT.open(url, timeout=timeout) as response:
        body = json.loads(response.read())
    result = body.get("data", {}).get("result", []) if isinstance(body, dict) else []
    return [r for r in result if isinstance(r, dict)]


def states(metrics: MetricsDeployment) -> list[RankState]:
    """Every metrics container on every node (Compose's or a Swarm task's), found by recipegen's label."""
    def on(node: MetricsNode) -> list[RankState]:
        rows = node.docker.json_lines("ps", "-a", "--filter", f"label={METRICS_LABEL}", "--format", "{{json .}}")
        return [RankState(node.name, node.node.context, str(r.get("Names", "?")), str(r.get("State", "?")),
                          str(r.get("Status", ""))) for r in rows]

    results = each(metrics.nodes, on)
    found: list[RankState] = []
    for node in metrics.nodes:
        r = results[node.name]
        found += r if isinstance(r, list) else [RankState(node.name, node.node.context, "-", "unreachable",
                                                          reason(r))]
    return found
