"""The Grafana dashboard recipegen generates for the cluster (not copied from an example): a row per recipe (its
served names, up, tok/s, TTFT, running and waiting, KV cache), a row per node (unified memory, CPU, fabric
traffic) and the router's row (requests and errors per backend). Panels sit on Grafana's 24-column grid, each
naming the provisioned datasource by its uid; ids are unique and follow the layout, so the JSON is deterministic.
"""

from __future__ import annotations

import json
from typing import Any

from generator.plan.metrics import DATASOURCE_UID, NODE_JOB, ROUTER_JOB, MetricsPlan
from generator.plan.router import HEAD_BACKEND

GRID = 24
HEIGHT = 6


class _Layout:
    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.y = 0
        self.x = 0

    def row(self, title: str) -> None:
        self.y += HEIGHT if self.x else 0
        self.x = 0
        self.panels.append({"id": len(self.panels) + 1, "type": "row", "title": title, "collapsed": False,
                            "gridPos": {"h": 1, "w": GRID, "x": 0, "y": self.y}, "panels": []})
        self.y += 1

    def panel(self, kind: str, title: str, width: int, unit: str, targets: list[tuple[str, str]]) -> None:
        if self.x + width > GRID:
            self.x, self.y = 0, self.y + HEIGHT
        self.panels.append({
            "id": len(self.panels) + 1, "type": kind, "title": title,
            "datasource": {"type": "prometheus", "uid": DATASOURCE_UID},
            "gridPos": {"h": HEIGHT, "w": width, "x": self.x, "y": self.y},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend,
                         "datasource": {"type": "prometheus", "uid": DATASOURCE_UID}}
                        for i, (expr, legend) in enumerate(targets)]})
        self.x += width


def _recipe_rows(layout: _Layout, plan: MetricsPlan) -> None:
    for engine in plan.engines:
        sel = f'{{recipe="{engine.recipe_id}"}}'
        layout.row(f"{', '.join(engine.names)} (recipe {engine.recipe_id}: {engine.engine}, "
                   f"{'+'.join(engine.nodes)}, tp {engine.tp}, pp {engine.pp})")
        layout.panel("stat", "up", 3, "none", [(f'up{{job="engine",recipe="{engine.recipe_id}"}}', "up")])
        layout.panel("timeseries", "tokens/s", 5, "none", [(f"recipe:generation_tokens:rate{sel}", "generated"),
                                                           (f"recipe:prompt_tokens:rate{sel}", "prompt")])
        layout.panel("timeseries", "time to first token", 6, "s", [(f"recipe:ttft_seconds:p50{sel}", "p50"),
                                                                   (f"recipe:ttft_seconds:p95{sel}", "p95")])
        layout.panel("timeseries", "requests", 5, "none", [(f"recipe:requests_running{sel}", "running"),
                                                           (f"recipe:requests_waiting{sel}", "waiting")])
        layout.panel("timeseries", "KV cache", 5, "percentunit", [(f"recipe:kv_cache_usage:ratio{sel}", "used")])


def _node_rows(layout: _Layout, plan: MetricsPlan) -> None:
    w = plan.rate_window
    for node in plan.nodes:
        sel = f'job="{NODE_JOB}",node="{node.name}"'
        layout.row(f"node {node.name} ({node.address})")
        layout.panel("timeseries", "unified memory", 8, "bytes", [
            (f"node_memory_MemTotal_bytes{{{sel}}} - node_memory_MemAvailable_bytes{{{sel}}}", "used"),
            (f"node_memory_MemAvailable_bytes{{{sel}}}", "available")])
        layout.panel("timeseries", "CPU busy", 8, "percentunit", [(f'node:cpu_busy:ratio{{node="{node.name}"}}',
                                                                   "busy")])
        device = f',device=~"{plan.fabric[node.name]}"' if plan.fabric.get(node.name) else ""
        layout.panel("timeseries", "fabric traffic" if device else "network traffic", 8, "Bps", [
            (f"sum by (device) (rate(node_network_receive_bytes_total{{{sel}{device}}}[{w}]))", "in {{device}}"),
            (f"sum by (device) (rate(node_network_transmit_bytes_total{{{sel}{device}}}[{w}]))", "out {{device}}")])


def _router_row(layout: _Layout, plan: MetricsPlan) -> None:
    if not plan.routers:
        return
    w = plan.rate_window
    sel = f'job="{ROUTER_JOB}",proxy=~"{HEAD_BACKEND}.*"'
    layout.row("router")
    layout.panel("timeseries", "requests per head (backend)", 12, "reqps", [
        (f"sum by (proxy) (rate(haproxy_backend_http_requests_total{{{sel}}}[{w}]))", "{{proxy}}")])
    layout.panel("timeseries", "errors per head (5xx)", 12, "reqps", [
        (f'sum by (proxy) (rate(haproxy_backend_http_responses_total{{{sel},code="5xx"}}[{w}]))', "{{proxy}}")])


def dashboard(plan: MetricsPlan) -> dict[str, Any]:
    layout = _Layout()
    _recipe_rows(layout, plan)
    _node_rows(layout, plan)
    _router_row(layout, plan)
    return {"uid": "recipegen", "title": f"recipegen: {plan.cluster_name}", "editable": False,
            "schemaVersion": 39, "version": 1, "refresh": "10s", "time": {"from": "now-1h", "to": "now"},
            "timezone": "", "tags": ["recipegen"], "panels": layout.panels,
            "templating": {"list": []}, "annotations": {"list": []}}


def dashboard_json(plan: MetricsPlan) -> str:
    return json.dumps(dashboard(plan), indent=1, ensure_ascii=False) + "\n"
