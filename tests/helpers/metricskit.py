"""What the metrics stack's tests share: a project with a `[metrics]` table built into a temporary out/, the
dashboard's JSON read back, and Debian's promtool (skipped with its reason where it is missing, failed in CI)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from helpers.golden import recipegen, write_project
from helpers.routerproject import CLUSTER as ROUTER_CLUSTER

# The router tests' two loopback nodes, with a fabric interface, the router and the metrics stack.
CLUSTER = ROUTER_CLUSTER + """[env]
NCCL_SOCKET_IFNAME = "lo"
[router]
nodes = ["a"]
port = 4000
[metrics]
node = "a"
"""

VLLM = ('engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\nmodel = "Qwen/Qwen3-0.6B"\n'
        'nodes = ["a"]\nargs = ["--served-model-name", "small", "--port", "8001"]\n')
SGLANG = ('engine = "sglang"\ndocker_image = "lmsysorg/sglang:v0.5.4"\nmodel = "zai-org/GLM-4.5-Air"\n'
          'nodes = ["b"]\nargs = ["--served-model-name", "glm", "--port", "30000"]\n')


def build_project(root: Path, cluster: str = CLUSTER, recipes: dict[str, str] | None = None) -> Path:
    """A built project (its out/ under root); the build must succeed."""
    write_project(root, cluster, recipes if recipes is not None else {"small": VLLM, "glm": SGLANG})
    result = recipegen(root, "build")
    assert result.exit_code == 0, result.output
    return root / "out" / "_metrics"


def dashboard(metrics_dir: Path) -> dict:
    """The dashboard as Grafana reads it: after recipegen's two header lines, which its container strips."""
    text = (metrics_dir / "grafana" / "dashboard.json").read_text("utf-8")
    return json.loads("".join(line for line in text.splitlines(True) if not line.startswith("#")))


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        reason = "promtool (Debian's `prometheus` package) is not installed: .ci/run installs it"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return found


def checkable_config(metrics_dir: Path, into: Path) -> Path:
    """out/_metrics/ copied with its container paths (/etc/prometheus/...) pointing into the copy, as promtool
    reads the rule files a config names from where it names them."""
    shutil.copytree(metrics_dir, into)
    config = into / "prometheus.yml"
    config.write_text(config.read_text("utf-8").replace("/etc/prometheus/", f"{into}/"), "utf-8")
    return config
