"""The generated alert rules under Prometheus's own rule tester (`promtool test rules`): the cases in
tests/fixtures/metrics/alerts.test.yml (the wedge alert on flat tokens while a request runs, quiet on healthy and
idle engines, the one-token probe, a target down and a recipe `down` stopped), on the committed out/_metrics and on
a fresh build. Skipped with its reason where promtool is missing; CI installs it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from helpers.metricskit import build_project, promtool
from helpers.golden import REPO

CASES = REPO / "tests" / "fixtures" / "metrics" / "alerts.test.yml"


def with_annotations(cases: dict, alerts_file: Path) -> dict:
    """Each expected alert's annotations, as the rule states them with its labels filled in ($labels only)."""
    rules = {r["alert"]: r for g in yaml.safe_load(alerts_file.read_text("utf-8"))["groups"] for r in g["rules"]}
    for test in cases["tests"]:
        for case in test.get("alert_rule_test", []):
            for alert in case.get("exp_alerts", []):
                labels = alert["exp_labels"]
                alert["exp_annotations"] = {
                    k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: str(labels[m[1]]), v)
                    for k, v in rules[case["alertname"]]["annotations"].items()}
    return cases


def run_cases(metrics: Path, into: Path) -> subprocess.CompletedProcess[str]:
    into.mkdir()
    for rules in (metrics / "rules").glob("*.yml"):
        shutil.copy(rules, into / rules.name)
    cases = with_annotations(yaml.safe_load(CASES.read_text("utf-8")), into / "alerts.yml")
    (into / "tests.yml").write_text(yaml.safe_dump(cases, sort_keys=False), "utf-8")
    return subprocess.run([promtool(), "test", "rules", str(into / "tests.yml")], capture_output=True, text=True)


@pytest.mark.parametrize("where", ["committed", "fresh"])
def test_promtool_proves_the_alert_cases(tmp_path: Path, where: str):
    metrics = REPO / "out" / "_metrics" if where == "committed" else build_project(tmp_path / "p")
    run = run_cases(metrics, tmp_path / "cases")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def test_the_cases_can_fail(tmp_path: Path):
    """A wedge rule that never fires fails the cases: promtool compares, it does not just parse."""
    broken = tmp_path / "broken"
    shutil.copytree(REPO / "out" / "_metrics", broken)
    alerts = broken / "rules" / "alerts.yml"
    alerts.write_text(alerts.read_text("utf-8").replace("min_over_time(vllm:num_requests_running[2m])) > 0",
                                                        "min_over_time(vllm:num_requests_running[2m])) > 9"), "utf-8")
    run = run_cases(broken, tmp_path / "cases")
    assert run.returncode != 0 and "EngineWedged" in run.stdout + run.stderr
