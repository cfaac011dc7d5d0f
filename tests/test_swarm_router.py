"""The router on Swarm (generator/deploy/backends/router.py: SwarmRouter), offline: what it asks the manager and
how it reads the answers, from recorded `docker service ps` answers (tests/fixtures/docker). The lab's router
tests run the Compose side for real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from generator.deploy.backends.router import SwarmRouter
from generator.deploy.docker import DockerError
from generator.deploy.router import router_from_out
from generator.plan.router import ROUTER_PROJECT, ROUTER_SERVICE
from generator.resolve.load import load_cluster
from helpers.actions import recorded
from helpers.golden import recipegen, write_project
from helpers.routerproject import CLUSTER, recipe, router_table


class Manager:
    """A manager's Docker: each call recorded; `service ps` answers from the recorded answer named per service."""

    def __init__(self, answers: dict[str, str], deploy: str | None = None):
        self.calls: list[tuple[str, ...]] = []
        self.answers, self.deploy = answers, deploy

    def _replay(self, args: tuple[str, ...], name: str) -> str:
        answer: dict[str, Any] = recorded(name)
        if answer["returncode"] != 0:
            raise DockerError(["docker", *args], answer["returncode"], answer["stdout"], answer["stderr"])
        return str(answer["stdout"])

    def run(self, *args: str, timeout: float = 0) -> str:
        self.calls.append(args)
        return self._replay(args, self.deploy) if self.deploy else ""

    def json_lines(self, *args: str, timeout: float = 0) -> list[dict[str, Any]]:
        import json

        self.calls.append(args)
        text = self._replay(args, self.answers[args[2]])
        return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory):
    """A project built with a router on both nodes, read back from out/ as `up` reads it."""
    project = write_project(tmp_path_factory.mktemp("swarm-router") / "p", CLUSTER + router_table(nodes=["a", "b"]),
                            {"x": recipe("org/x", "a")})
    assert recipegen(project, "build").exit_code == 0
    found = router_from_out(load_cluster(project / "cluster.toml"), project / "out")
    assert found is not None and [t.name for t in found.targets] == ["a", "b"]
    return found


def _backend(router, manager: Manager) -> SwarmRouter:
    backend = SwarmRouter(router.cluster)
    backend.swarm = type("Swarm", (), {"manager": manager})()  # type: ignore[assignment]
    return backend


def test_apply_deploys_the_routers_stack_through_the_manager(router):
    manager = Manager({})
    applied = _backend(router, manager).apply(router)
    assert manager.calls == [("stack", "deploy", "--prune", "-c", str(router.stack_file), ROUTER_PROJECT)]
    assert router.stack_file.is_file()
    assert [(a.node, a.action, a.ok) for a in applied] == [("a", "deployed", True), ("b", "deployed", True)]


def test_a_failed_deploy_is_each_nodes_failure_with_dockers_reason(router):
    applied = _backend(router, Manager({}, deploy="unreachable")).apply(router)
    assert [(a.node, a.action) for a in applied] == [("a", "failed"), ("b", "failed")]
    assert all("Cannot connect to the Docker daemon" in (a.error or "") for a in applied), applied


def test_states_read_each_nodes_service(router):
    services = [f"{ROUTER_PROJECT}_{ROUTER_SERVICE}-{name}" for name in ("a", "b")]
    manager = Manager({services[0]: "swarm-service-ps-running", services[1]: "swarm-service-ps-missing"})
    rows = _backend(router, manager).states(router)
    assert [call[:3] for call in manager.calls] == [("service", "ps", s) for s in services]
    running, missing = rows
    assert (running.node, running.state) == ("a", "running")
    assert running.status.startswith("Running") and running.container == services[0]
    assert (missing.node, missing.state) == ("b", "missing") and "no such service" in missing.status
