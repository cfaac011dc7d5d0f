"""The metrics stack (issue 40), compile side: what `build` writes for a cluster's `[metrics]`, what it refuses, and
Prometheus's own promtool over the generated config and rules (`check config`, `check rules`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from helpers.metricskit import CLUSTER, build_project, checkable_config, dashboard, promtool
from helpers.golden import REPO, recipegen, write_project

OUT = REPO / "out" / "_metrics"


def generated_dirs(tmp_path: Path) -> list[Path]:
    return [OUT, build_project(tmp_path / "p")]


def test_every_head_is_a_target_of_its_own_with_its_labels(tmp_path: Path):
    metrics = build_project(tmp_path)
    small = yaml.safe_load((metrics / "targets" / "small.yml").read_text("utf-8"))
    assert small == [{"targets": ["127.0.0.1:8001"], "labels": {
        "recipe": "small", "engine": "vllm", "nodes": "a", "tp": "1", "pp": "1", "head": "a", "model": "small",
        "__recipegen_probe": "yes"}}]
    glm = yaml.safe_load((metrics / "targets" / "glm.yml").read_text("utf-8"))
    assert glm[0]["targets"] == ["127.0.0.2:30000"] and glm[0]["labels"]["engine"] == "sglang"


def test_prometheus_scrapes_the_router_and_a_node_exporter_on_every_node(tmp_path: Path):
    config = yaml.safe_load((build_project(tmp_path) / "prometheus.yml").read_text("utf-8"))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert [g["targets"] for g in jobs["node"]["static_configs"]] == [["127.0.0.1:9100"], ["127.0.0.2:9100"]]
    assert jobs["router"]["static_configs"] == [{"targets": ["127.0.0.1:4000"], "labels": {"node": "a"}}]
    assert jobs["engine"]["file_sd_configs"] == [{"files": ["/etc/prometheus/targets/*.yml"]}]


def test_the_router_serves_haproxys_prometheus_exporter(tmp_path: Path):
    build_project(tmp_path)
    config = (tmp_path / "out" / "_router" / "haproxy.cfg").read_text("utf-8")
    assert "http-request use-service prometheus-exporter if { path /metrics } METH_GET" in config


def test_the_blackbox_probe_is_a_one_token_completion_with_a_deadline(tmp_path: Path):
    config = yaml.safe_load((build_project(tmp_path) / "blackbox.yml").read_text("utf-8"))
    module = config["modules"]["wedge_small"]
    assert module["timeout"] == "30s" and module["http"]["method"] == "POST"
    assert yaml.safe_load(module["http"]["body"]) == {"model": "small", "prompt": "1", "max_tokens": 1}


def test_sglang_heads_get_enable_metrics_and_only_with_a_metrics_stack(tmp_path: Path):
    build_project(tmp_path / "with")
    stack = (tmp_path / "with" / "out" / "glm" / "stack.yaml").read_text("utf-8")
    assert stack.count('"--enable-metrics"') == 1
    without = CLUSTER.split("[metrics]")[0]
    write_project(tmp_path / "without", without, {"glm": build_sglang()})
    assert recipegen(tmp_path / "without", "build").exit_code == 0
    assert "--enable-metrics" not in (tmp_path / "without" / "out" / "glm" / "stack.yaml").read_text("utf-8")
    assert not (tmp_path / "without" / "out" / "_metrics").exists()


def build_sglang() -> str:
    from helpers.metricskit import SGLANG
    return SGLANG


def test_the_grafana_password_is_never_written(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("RECIPEGEN_GRAFANA_PASSWORD", "s3cret-pass")
    metrics = build_project(tmp_path)
    compose = (metrics / "a" / "compose.yaml").read_text("utf-8")
    assert "RECIPEGEN_GRAFANA_PASSWORD:  # no value" in compose
    assert all("s3cret-pass" not in p.read_text("utf-8") for p in (tmp_path / "out").rglob("*") if p.is_file())


def test_every_node_runs_a_node_exporter_and_only_the_metrics_node_prometheus(tmp_path: Path):
    metrics = build_project(tmp_path)
    a = yaml.safe_load((metrics / "a" / "compose.yaml").read_text("utf-8"))
    b = yaml.safe_load((metrics / "b" / "compose.yaml").read_text("utf-8"))
    assert set(a["services"]) == {"node-exporter", "prometheus", "blackbox", "grafana"}
    assert set(b["services"]) == {"node-exporter"}
    stack = yaml.safe_load((metrics / "stack.yaml").read_text("utf-8"))
    assert set(stack["services"]) == {"node-exporter-a", "node-exporter-b", "prometheus", "blackbox", "grafana"}


def test_a_metrics_node_the_cluster_lacks_is_refused_at_its_line(tmp_path: Path):
    write_project(tmp_path, CLUSTER.replace('node = "a"', 'node = "zz"'), {})
    result = recipegen(tmp_path, "validate", "cluster.toml")
    assert result.exit_code == 1
    line = CLUSTER.replace('node = "a"', 'node = "zz"').splitlines().index('node = "zz"') + 1
    assert f"cluster.toml:{line}:8: error" in result.output and "no node 'zz'" in result.output
    assert "Traceback" not in result.output


def test_the_dashboard_has_unique_ids_a_24_column_grid_and_the_datasource(tmp_path: Path):
    for metrics in generated_dirs(tmp_path):
        panels = dashboard(metrics)["panels"]
        assert len({p["id"] for p in panels}) == len(panels)
        for p in panels:
            pos = p["gridPos"]
            assert pos["x"] >= 0 and pos["w"] > 0 and pos["x"] + pos["w"] <= 24, p["title"]
            if p["type"] != "row":
                assert p["datasource"]["uid"] == "recipegen-prometheus"
                assert all(t["datasource"]["uid"] == "recipegen-prometheus" for t in p["targets"])
        datasource = yaml.safe_load((metrics / "grafana" / "datasource.yml").read_text("utf-8"))
        assert datasource["datasources"][0]["uid"] == "recipegen-prometheus"


def test_the_dashboard_has_a_row_per_recipe_per_node_and_the_router(tmp_path: Path):
    rows = [p["title"] for p in dashboard(build_project(tmp_path))["panels"] if p["type"] == "row"]
    assert rows == ["glm (recipe glm: sglang, b, tp 1, pp 1)", "small (recipe small: vllm, a, tp 1, pp 1)",
                    "node a (127.0.0.1)", "node b (127.0.0.2)", "router"]


def test_a_rebuild_is_byte_identical(tmp_path: Path):
    first = build_project(tmp_path)
    before = {p: p.read_bytes() for p in first.rglob("*") if p.is_file()}
    assert recipegen(tmp_path, "build", "--check").exit_code == 0
    assert before == {p: p.read_bytes() for p in first.rglob("*") if p.is_file()}


# --- Prometheus's own checks ----------------------------------------------------------------------------------------

def test_promtool_accepts_every_generated_config(tmp_path: Path):
    tool = promtool()
    for i, metrics in enumerate(generated_dirs(tmp_path)):
        config = checkable_config(metrics, tmp_path / f"check{i}")
        run = subprocess.run([tool, "check", "config", str(config)], capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr


def test_promtool_accepts_every_rule_file(tmp_path: Path):
    tool = promtool()
    for metrics in generated_dirs(tmp_path):
        files = sorted(str(p) for p in (metrics / "rules").glob("*.yml"))
        run = subprocess.run([tool, "check", "rules", *files], capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr


def test_the_blackbox_exporter_accepts_every_generated_module_file(tmp_path: Path):
    import os
    import shutil

    tool = shutil.which("prometheus-blackbox-exporter")
    if tool is None:
        reason = "prometheus-blackbox-exporter (Debian's package) is not installed: .ci/run installs it"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    for metrics in generated_dirs(tmp_path):
        run = subprocess.run([tool, "--config.check", f"--config.file={metrics / 'blackbox.yml'}"],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr


def test_a_metrics_port_another_listener_takes_is_refused(tmp_path: Path):
    """Prometheus on node a at 8001 would take the port of the head of `small` there: validate and build refuse."""
    cluster = CLUSTER.replace('node = "a"', 'node = "a"\nprometheus_port = 8001')
    from helpers.metricskit import SGLANG, VLLM

    write_project(tmp_path, cluster, {"small": VLLM, "glm": SGLANG})
    for command in (["validate"], ["build"]):
        result = recipegen(tmp_path, *command)
        assert result.exit_code == 1, result.output
        assert "error[port-collision]" in result.output and "prometheus_port 8001 is also the API port of 'small'" \
            in result.output
    assert not (tmp_path / "out").exists()


def test_the_router_panels_select_the_routers_own_backends(tmp_path: Path):
    """Every HAProxy backend the router config defines is selected by the router row's queries, and they select
    nothing else: the names come from one place (plan/router.py), so a renamed backend cannot leave the panels
    empty (they were, once: the backends became one per head endpoint)."""
    import re

    metrics = build_project(tmp_path)
    config = (tmp_path / "out" / "_router" / "haproxy.cfg").read_text("utf-8")
    blocks = re.findall(r"^backend (\S+)\n(.*?)(?=^\S|\Z)", config, re.M | re.S)
    backends = [name for name, body in blocks if re.search(r"^\s+server ", body, re.M)]  # the heads: with servers
    assert backends and all(b.startswith("head_") for b in backends), blocks
    exprs = [t["expr"] for p in dashboard(metrics)["panels"] for t in p.get("targets", [])
             if "haproxy_backend" in t["expr"]]
    assert exprs
    for expr in exprs:
        pattern = re.search(r'proxy=~"([^"]+)"', expr)
        assert pattern, expr
        assert all(re.fullmatch(pattern[1], b) for b in backends), (pattern[1], backends)
