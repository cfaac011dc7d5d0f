"""Pieces of the deployer that run offline: uptime from docker's timestamps, readiness parsing, and what the
deploy commands say when docker fails (against a fake `docker` on PATH)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from generator.cli import main
from generator.deploy.backends.base import since as _since
from generator.deploy.docker import DockerError
from generator.deploy.readiness import model_ids as _model_ids
from generator.plan.types import duration_seconds as _seconds


def started(ago: timedelta) -> str:
    """StartedAt as docker writes it: RFC 3339 with nanoseconds."""
    return (datetime.now(timezone.utc) - ago).strftime("%Y-%m-%dT%H:%M:%S") + ".123456789Z"


def test_uptime_shows_the_two_largest_units():
    assert _since(started(timedelta(seconds=40))) in ("40s", "41s")
    assert _since(started(timedelta(hours=1, minutes=2, seconds=5))) == "1h 2m"
    assert _since(started(timedelta(days=3, hours=4, minutes=1))) == "3d 4h"
    assert _since("0001-01-01T00:00:00Z") == "-"  # docker's zero time: never started
    assert _since(None) == "-" and _since("garbage") == "-"


def test_served_models_and_durations():
    assert _model_ids(b'{"object":"list","data":[{"id":"tiny"},{"id":"other"}]}') == {"tiny", "other"}
    assert _model_ids(b"not json") == set() and _model_ids(b'{"data": 3}') == set()
    assert _seconds("90s") == 90 and _seconds("2m") == 120 and _seconds("1m30s") == 90 and _seconds("500ms") == 1


# --- the CLI against a fake `docker` on PATH (offline): what each failure says -----------------------------------


ROOT = Path(__file__).resolve().parent.parent

# The fake docker answers from a table in $FAKE_DOCKER: [[substring of the argv, exit, stdout, stderr], ...],
# first match wins; no match is exit 1 with "unexpected call". It logs every call to $FAKE_DOCKER_LOG.
FAKE = """#!{python}
import json, os, sys
argv = " ".join(sys.argv[1:])
with open(os.environ["FAKE_DOCKER_LOG"], "a") as log:
    log.write(argv + "\\n")
for pattern, code, out, err in json.loads(os.environ["FAKE_DOCKER"]):
    if pattern in argv:
        sys.stdout.write(out)
        sys.stderr.write(err)
        sys.exit(code)
sys.stderr.write("unexpected call: " + argv + "\\n")
sys.exit(1)
"""
NO_CONTEXT = ('Failed to initialize: unable to resolve docker endpoint: context "{0}": context not found: open '
              '/root/.docker/contexts/meta/x/meta.json: no such file or directory\n')


@pytest.fixture
def fake_docker(tmp_path: Path, monkeypatch):
    """A project (the shipped recipes and cluster, built) and a function setting the fake docker's answers."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "recipes", project / "recipes")
    shutil.copy(ROOT / "cluster.toml", project / "cluster.toml")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE.format(python=sys.executable))
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(tmp_path / "calls.log"))
    monkeypatch.chdir(project)
    assert CliRunner().invoke(main, ["build"]).exit_code == 0

    def answers(*table: tuple[str, int, str, str]) -> Path:
        monkeypatch.setenv("FAKE_DOCKER", json.dumps(table))
        return tmp_path / "calls.log"
    return answers


def cli(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


COMPOSE_OK = ("compose version", 0, "Docker Compose version v2.29.7\n", "")
LOCK_OK = ("create --name recipegen-lock", 0, "0123abcd\n", "")  # the node's lock taken (generator/deploy/lock.py)


@pytest.mark.parametrize("said", ["docker: unknown command: docker compose\n\nRun 'docker --help' for more information\n",
                                  "docker: 'compose' is not a docker command.\nSee 'docker --help'\n"])
@pytest.mark.parametrize("command", ["up", "down"])
def test_up_without_the_compose_plugin_says_how_to_install_it(fake_docker, said: str, command: str):
    calls = fake_docker(("compose version", 1, "", said),
                        ("compose -f", 125, "", "unknown shorthand flag: 'f' in -f\n"))
    result = cli(command, "qwen3-coder-30b-a3b-fp8")
    assert result.exit_code == 1
    assert "unknown shorthand flag" not in result.output
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("qwen3-coder-30b-a3b-fp8: `docker compose` does not run here (docker says: docker: ")
    for way in ("docker-compose-plugin", "docker-compose-v2", "~/.docker/cli-plugins/docker-compose"):
        assert way in line
    assert calls.read_text().splitlines() == ["compose version"]  # nothing was tried on a node


def test_up_with_a_missing_context_suggests_creating_it(fake_docker):
    fake_docker(COMPOSE_OK, ("--context spark1", 1, "", NO_CONTEXT.format("spark1")))
    result = cli("up", "qwen3-coder-30b-a3b-fp8")
    assert result.exit_code == 1
    assert "spark1: preflight: context 'spark1' does not answer" in result.stderr
    assert "create it with `recipegen contexts --create`" in result.stderr


RUNNING = json.dumps([{"Name": "/glm-4-5-air-sglang-engine-1", "RestartCount": 0,
                       "State": {"Status": "running", "StartedAt": "2026-01-01T00:00:00.000000000Z"}}])


@pytest.mark.parametrize("command", ["ps", "status"])
@pytest.mark.parametrize("answers, unreachable, summary", [
    ([], ["spark1", "spark2"], "every node unreachable: spark1, spark2"),
    ([("--context spark1 inspect", 0, RUNNING, "")], ["spark2"], "1 of 2 nodes unreachable: spark2"),
    ([("--context spark2 inspect", 0, RUNNING, "")], ["spark1"], "1 of 2 nodes unreachable: spark1"),
], ids=["none-answers", "spark2-down", "spark1-down"])
def test_ps_fails_naming_the_nodes_that_do_not_answer(fake_docker, command, answers, unreachable, summary):
    fake_docker(*answers, ("--context spark", 1, "", "error during connect: dial tcp 10.0.0.9:2376: i/o timeout\n"))
    result = cli(command, "glm-4-5-air-sglang")
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines()[-1].startswith(f"glm-4-5-air-sglang: {summary} ")
    for node in unreachable:
        assert f"{node} " in result.stdout


def test_ps_passes_when_every_node_answers(fake_docker, monkeypatch):
    # The shipped cluster's router is not running: its row says so, and nothing is asked over the network.
    from generator.deploy import router

    asked: list[str] = []
    monkeypatch.setattr(router, "backend_health", lambda r, target, timeout=5.0: asked.append(target.name) or {})
    calls = fake_docker(("recipegen-router-router-1", 1, "", "Error: No such object: recipegen-router-router-1\n"),
                        ("inspect", 0, RUNNING, ""))
    result = cli("ps", "glm-4-5-air-sglang")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("running") == 2
    router = result.stdout[result.stdout.index("router (spark-duo)"):]
    assert "missing" in router and "the router is missing there" in router, result.stdout
    assert "recipegen-router-router-1" in calls.read_text() and asked == []


@pytest.mark.parametrize("answers, want", [
    ([("image inspect", 1, "", "error during connect: Get http://x/v1.45/images: EOF\n")],
     "spark1: failed: error during connect: Get http://x/v1.45/images: EOF"),
    ([("image inspect", 1, "", "Error: No such image: nvcr.io/nvidia/vllm:25.10-py3\n")],
     "spark1: failed: nvcr.io/nvidia/vllm:25.10-py3 is on none of the recipe's nodes"),
], ids=["inspect-fails", "image-nowhere"])
def test_images_failures_say_why_without_a_placeholder_id(fake_docker, answers, want):
    fake_docker(COMPOSE_OK, LOCK_OK, *answers)
    result = cli("images", "qwen3-coder-30b-a3b-fp8")
    assert result.exit_code == 1
    assert "failed -" not in result.output
    assert result.stderr.startswith(want), result.stderr


# --- docker's messages reach the user whole -----------------------------------------------------------------

@pytest.mark.parametrize("stderr, detail", [
    ("docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].\n"
     "See 'docker run --help'.\n", "docker: Error response from daemon: could not select device driver"),
    ("unknown flag: --gpus\nSee 'docker run --help'.\n", "unknown flag: --gpus"),
    ("docker: unknown command: docker compose\n\nRun 'docker --help' for more information\n",
     "docker: unknown command: docker compose"),
    ("first\nsecond\n", "second"),
    ("", "no output"),
])
def test_docker_error_detail_skips_usage_hints(stderr: str, detail: str):
    assert DockerError(["docker", "run"], 125, "", stderr).detail.startswith(detail)


def test_doctor_keeps_the_start_and_the_end_of_a_long_docker_error():
    from generator.deploy.docker import reason as _reason

    head = "docker: Error response from daemon: failed to create task for container: OCI runtime create failed:"
    tail = "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open"
    long = head + " " + "x" * 600 + " " + tail
    said = _reason(DockerError(["docker", "run"], 125, "", long + "\nSee 'docker run --help'.\n"))
    assert said.startswith(head) and said.endswith(tail)
    assert _reason(DockerError(["docker", "run"], 125, "", head + " " + tail)) == head + " " + tail


def test_ps_names_a_stale_lock_with_the_unlock_command_for_the_cluster_given(fake_docker):
    """The unlock hint must reach the same cluster file: `recipegen unlock spark1` alone reads cluster.toml."""
    shutil.copy("cluster.toml", "other.toml")
    lock = json.dumps([{"Id": "0123abcd", "Config": {"Labels": {
        "dev.recipegen.lock.recipe": "glm-4-5-air-sglang", "dev.recipegen.lock.command": "recipegen up glm-4-5-air-sglang",
        "dev.recipegen.lock.host": "elsewhere", "dev.recipegen.lock.pid": "7",
        "dev.recipegen.lock.since": "2026-01-01T00:00:00+00:00", "dev.recipegen.lock.bound": "60"}}}])
    fake_docker(("inspect --type container recipegen-lock", 0, lock, ""), ("ps -a", 0, "", ""),
                ("inspect", 0, RUNNING, ""))
    result = cli("ps", "glm-4-5-air-sglang", "--cluster", "other.toml")
    assert result.exit_code == 0, result.output
    assert "looks stale: held " in result.stdout
    assert "`recipegen unlock spark1 --cluster other.toml`" in result.stdout
