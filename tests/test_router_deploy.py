"""The router, deploy side, offline: reading it back from out/, its backends' health from a real HAProxy (Debian's,
on loopback, running the generated config), `smoke --via-router`, the probe's key. What needs Docker (Compose's
up, the in-place reload) is in tests/test_router_lab.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from generator.deploy.backends.base import RankState
from generator.deploy.backends.router import Applied, RouterDeployment
from generator.deploy.probe import probe
from generator.deploy.router import router_from_out, status, wait_backend
from generator.resolve.load import load_cluster
from helpers.golden import recipegen, write_project
from helpers.routerproject import CLUSTER, recipe, serving


class FakeRouterBackend:
    """The containers' side scripted: what `docker inspect` would say of each router node."""

    name = "fake"

    def apply(self, router: RouterDeployment) -> list[Applied]:
        return [Applied(t.name, "unchanged") for t in router.targets]

    def states(self, router: RouterDeployment) -> list[RankState]:
        return [RankState(t.name, t.node.context, t.container, "running", "", uptime="1m") for t in router.targets]


@pytest.fixture
def running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Two recipes built with a router, their stand-in heads and the router running; yields (project, router,
    heads)."""
    monkeypatch.setenv("LAB_TTFT_BASE_MS", "5")
    monkeypatch.setenv("LAB_DECODE_TPS", "500")
    with serving(tmp_path / "p", {"alpha": "127.0.0.1", "beta": "127.0.0.2"}) as (project, _, heads):
        yield project, router_from_out(load_cluster(project / "cluster.toml"), project / "out"), heads


def test_router_read_back_from_out(running):
    project, router, _ = running
    assert router is not None
    assert [t.name for t in router.targets] == ["a"] and router.image == "haproxy:2.6"
    assert router.url(router.targets[0]) == f"http://127.0.0.1:{router.port}"
    assert router.config_file == project / "out" / "_router" / "haproxy.cfg"


def test_no_router_without_the_table(tmp_path: Path):
    project = write_project(tmp_path / "p", CLUSTER, {"x": recipe("org/x", "a")})
    assert recipegen(project, "build").exit_code == 0
    assert router_from_out(load_cluster(project / "cluster.toml"), project / "out") is None


def test_status_and_waits_follow_each_backend(running):
    _, router, heads = running
    said = wait_backend(router, "beta", up=True, timeout=5)
    assert said["a"].up and said["a"].check.startswith("L7OK"), said
    heads["beta"].stop()
    start = time.monotonic()
    said = wait_backend(router, "beta", up=False, timeout=5)
    assert not said["a"].up and said["a"].status == "DOWN" and time.monotonic() - start < 3, said
    (node,) = status(router, FakeRouterBackend())
    assert node.container.state == "running" and node.error is None
    assert router.backends["alpha"].startswith("head_127.0.0.1_") and router.backends["beta"].startswith(
        "head_127.0.0.2_")  # one backend per head endpoint, read back from the config
    assert node.backends[router.backends["alpha"]].up and not node.backends[router.backends["beta"]].up


def test_smoke_via_router(running):
    project, router, _ = running
    wait_backend(router, "alpha", up=True, timeout=5)
    result = recipegen(project, "smoke", "alpha", "--via-router")
    assert result.exit_code == 0 and "alpha: TTFT" in result.output, result.output


def test_smoke_via_router_without_a_router_says_so(tmp_path: Path):
    project = write_project(tmp_path / "p", CLUSTER, {"x": recipe("org/x", "a")})
    assert recipegen(project, "build").exit_code == 0
    result = recipegen(project, "smoke", "x", "--via-router")
    assert result.exit_code == 1 and "has no [router]" in result.output


def test_probe_sends_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LAB_TTFT_BASE_MS", "5")
    with serving(tmp_path / "p", {"alpha": "127.0.0.1"}, key="k-1") as (_, port, _heads):
        base = f"http://127.0.0.1:{port}"
        assert "401" in (probe(base, "alpha", 10).error or "")
        assert probe(base, "alpha", 10, api_key="k-1").ok


# --- the router step of `up`, `ps`'s holder (issue 41) ---------------------------------------------------------------

class _Docker:
    def __init__(self, lines: str = "", error: Exception | None = None):
        self.lines, self.error, self.asked = lines, error, []

    def run(self, *args: str, timeout: float = 0) -> str:
        self.asked.append(args)
        if self.error is not None:
            raise self.error
        return self.lines


class _Dep:
    def __init__(self, docker: _Docker):
        self.head = type("Head", (), {"docker": docker})()


def test_the_head_is_held_by_the_recipes_its_running_containers_are_labelled_with():
    from generator.deploy.docker_errors import DockerError
    from generator.deploy.router import holders

    docker = _Docker('"big-agent"\n"big-agent"\n')
    assert holders(_Dep(docker)) == ["big-agent"]  # type: ignore[arg-type]
    assert docker.asked[0][:3] == ("ps", "--filter", "label=dev.recipegen.recipe")  # running ones only: no -a
    assert holders(_Dep(_Docker(""))) == []  # type: ignore[arg-type]
    said = holders(_Dep(_Docker(error=DockerError(["docker", "ps"], 1, "", "Cannot connect to the Docker "
                                                                           "daemon"))))  # type: ignore[arg-type]
    assert isinstance(said, str) and "Cannot connect" in said


def test_ps_says_which_recipe_holds_the_head(capsys: pytest.CaptureFixture[str]):
    from generator.cli.router import show_ps
    from generator.deploy.router import BackendHealth, RouterNode, RouterPs

    node = RouterNode(RankState("a", "a", "recipegen-router-router-1", "running", "", uptime="1m"),
                      "http://a:4000", {"head_127.0.0.1_8000": BackendHealth("head_127.0.0.1_8000", "UP", "L7OK")})
    show_ps("big", "loop", RouterPs("head_127.0.0.1_8000", [node], ["big-agent"]))
    out = capsys.readouterr().out
    assert "UP (L7OK)" in out and "big-agent" in out and "held by" in out, out


def test_up_result_says_whether_the_router_routes_to_the_recipe():
    from generator.deploy.actions import UpResult
    from generator.deploy.router import BackendHealth, RouterUp

    routes = RouterUp([Applied("a", "reloaded")], {"a": BackendHealth("head_x_1", "UP", "L7OK")}, {"a": "http://a:4"})
    assert UpResult("big", [], url="http://h:8000", router=routes).routed
    stale = RouterUp([Applied("a", "unchanged")], {"a": "no backend for big (is out/_router current?)"})
    result = UpResult("big", [], url="http://h:8000", router=stale)
    assert result.ok and not result.routed  # the recipe serves; the one endpoint does not reach it
    failed = RouterUp([Applied("a", "failed", "no such image")])
    assert not UpResult("big", [], url="http://h:8000", router=failed).routed
    assert UpResult("big", [], url="http://h:8000").routed  # no router routes it: nothing to say
