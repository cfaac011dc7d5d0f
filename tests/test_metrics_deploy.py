"""The metrics stack, deploy side, offline: read back from out/, a recipe's target put in by `up` and replaced by an
empty list by `down` (through `docker cp` with a tar, as the real docker receives it), the state `ps` shows. The
docker side is scripted: one Prometheus container whose files are a dict. Compose's up for real is the lab's."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
import yaml

from generator.deploy import metrics as deploy
from generator.deploy.docker import Docker
from generator.resolve.load import load_cluster
from helpers.metricskit import build_project


class FakeDocker:
    """What the metrics node's docker holds: the Prometheus container's files (path -> bytes)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.prometheus_running = True
        self.calls: list[tuple[str, ...]] = []

    def run(self, docker: Docker, *args: str, timeout: float = 0, input: bytes | None = None, env=None) -> str:
        self.calls.append((docker.context, *args))
        if args[:2] == ("ps", "-q"):
            return "c0ffee\n" if self.prometheus_running and args[-1].endswith("=prometheus") else ""
        if args[:2] == ("cp", "-"):
            folder = args[2].split(":", 1)[1]
            with tarfile.open(fileobj=io.BytesIO(input or b"")) as tar:
                for member in tar.getmembers():
                    handle = tar.extractfile(member)
                    assert handle is not None
                    self.files[f"{folder}/{member.name}"] = handle.read()
            return ""
        raise AssertionError(f"unexpected docker {args}")

    def copy_out(self, path: str) -> bytes | None:
        """What `docker cp CONTAINER:PATH -` gives Docker.copy_out: the file, or none (a DockerError's None)."""
        return self.files.get(path)


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    build_project(tmp_path)
    fake = FakeDocker()
    monkeypatch.setattr(Docker, "run", lambda self, *a, **k: fake.run(self, *a, **k))
    monkeypatch.setattr(Docker, "copy_out", lambda self, container, path, timeout=30: fake.copy_out(path))
    metrics = deploy.metrics_from_out(load_cluster(tmp_path / "cluster.toml"), tmp_path / "out")
    assert metrics is not None
    return metrics, fake


def test_read_back_from_out(stack):
    metrics, _ = stack
    assert metrics.home.name == "a" and [n.name for n in metrics.nodes] == ["a", "b"]
    assert metrics.prometheus_url == "http://127.0.0.1:9090" and metrics.grafana_url == "http://127.0.0.1:3000"


def test_no_metrics_without_the_table(tmp_path: Path):
    from helpers.metricskit import CLUSTER

    build_project(tmp_path, CLUSTER.split("[metrics]")[0])
    assert deploy.metrics_from_out(load_cluster(tmp_path / "cluster.toml"), tmp_path / "out") is None


def test_up_puts_the_recipes_target_in_and_down_takes_it_out(stack):
    metrics, fake = stack
    assert deploy.target_file_state(metrics, "small") == "absent"
    assert deploy.set_target(metrics, "small", scraped=True) is None
    written = fake.files["/etc/prometheus/targets/small.yml"]
    assert written == metrics.target_file("small").read_bytes()
    assert yaml.safe_load(written)[0]["targets"] == ["127.0.0.1:8001"]
    assert deploy.target_file_state(metrics, "small") == "scraped"
    assert all(call[0] == "a" for call in fake.calls)  # the metrics node's context only

    assert deploy.set_target(metrics, "small", scraped=False) is None
    assert yaml.safe_load(fake.files["/etc/prometheus/targets/small.yml"]) == []  # file_sd: no target
    assert deploy.target_file_state(metrics, "small") == "stopped"


def test_no_prometheus_running_is_said_not_raised(stack):
    metrics, fake = stack
    fake.prometheus_running = False
    assert deploy.set_target(metrics, "small", scraped=False, wait=0) == "no Prometheus container running on a"
    assert deploy.target_file_state(metrics, "small") == "unknown: no Prometheus container on a"
