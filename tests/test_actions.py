"""The deploy logic offline: docker's recorded answers (tests/fixtures/docker, captured from the lab by capture.py
there) read into rank states, and the up/down/ps/logs actions driven through a fake backend built from them.
The lab's acceptance tests (test_deploy_lab.py, test_swarm_lab.py) run the same actions for real."""

from __future__ import annotations

import json
import shutil
import time
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from generator.deploy import actions
from generator.deploy import findings as codes
from generator.deploy.backends.base import Outcome, RankState, Removal
from generator.deploy.backends.compose import rank_state
from generator.deploy.backends.swarm import task_state
from generator.deploy.port import PortHolder
from generator.deploy.docker import DockerError, Failure
from generator.deploy.findings import Finding, Severity
from generator.deploy.targets import CompiledDeployment, Deployment, Target
from helpers.actions import FakeBackend, RECIPE, RECORDED, ROOT, answer, deployment, no_checks, recorded, running, up  # noqa: F401 - moved to tests/helpers/


def failure(name: str) -> DockerError:
    said = recorded(name)
    return DockerError([str(a) for a in said["argv"]], int(str(said["returncode"])), str(said["stdout"]),
                       str(said["stderr"]))


# --- docker's answers, as recorded, into what recipegen shows -------------------------------------------------


@pytest.mark.parametrize("name, kind", [
    ("compose-inspect-missing", Failure.NOT_FOUND),
    ("image-inspect-missing", Failure.NOT_FOUND),
    ("swarm-service-ps-missing", Failure.NOT_FOUND),
    ("unreachable", Failure.UNREACHABLE),  # stdout is "[]" here too: the daemon's silence is not "no such object"
])
def test_recorded_failures_are_classified_by_kind(name: str, kind: Failure):
    assert failure(name).failure is kind


def test_a_running_and_an_exited_compose_rank(deployment: CompiledDeployment):
    head, worker = deployment.targets
    running = rank_state(head, "pair-engine-1", answer("compose-inspect-running")[0])
    assert (running.state, running.container, running.failed) == ("running", "pair-engine-1", False)
    assert running.uptime != "-"  # from State.StartedAt
    exited = rank_state(worker, "pair-engine-1", answer("compose-inspect-exited")[0])
    assert exited.state == "exited" and exited.failed
    assert exited.status.startswith("exit 137 at ")
    assert rank_state(head, "pair-engine-1", None).state == "missing"


def test_swarm_tasks_of_a_running_and_a_restarted_rank():
    running = task_state("spark2", "ctx", "pair_spark2", answer("swarm-service-ps-running"),
                         answer("swarm-inspect-task-running"))
    assert (running.state, running.container, running.restarts) == ("running", "pair_spark2.1", 0)
    assert running.uptime != "-"  # from the task's Status.Timestamp, not "Running less than a second ago"
    restarted = task_state("spark2", "ctx", "pair_spark2", answer("swarm-service-ps-restarted"),
                           answer("swarm-inspect-task-restarted"))
    assert restarted.restarts == 1 and restarted.failed  # a rank that died once fails `up`, as with Compose
    assert task_state("spark2", "ctx", "pair_spark2", [], []).state == "missing"


def test_a_swarm_head_waiting_for_its_first_healthcheck_runs():
    # Swarm keeps the head's task `starting` until its healthcheck first passes (PID 0 in the task), though its
    # node runs the container: ps shows it as Compose does, running with its health starting.
    rows, tasks = answer("swarm-service-ps-head"), answer("swarm-inspect-task-head")
    assert [t["Status"]["State"] for t in tasks] == ["starting"]  # type: ignore[index]
    head = task_state("spark1", "ctx", "pair_spark1", rows, tasks, answer("swarm-head-container")[0])
    assert (head.state, head.health, head.failed) == ("running", "starting", False)
    assert head.uptime != "-"
    alone = task_state("spark1", "ctx", "pair_spark1", rows, tasks)  # the node did not answer: the manager's view
    assert (alone.state, alone.health) == ("starting", "-")


# --- the actions against a fake backend ---------------------------------------------------------------------


def exited(target: Target) -> RankState:
    return rank_state(target, "x", answer("compose-inspect-exited")[0])


def test_up_stops_before_anything_when_the_backend_cannot_act(deployment: CompiledDeployment):
    backend = FakeBackend(refuse=[Finding("", Severity.ERROR, codes.COMPOSE_MISSING, "no compose")])
    result = up(deployment, backend)
    assert not result.started and backend.calls == ["ready"]


def test_up_starts_nothing_when_a_node_fails_preflight(deployment: CompiledDeployment):
    backend = FakeBackend()
    busy = Finding("spark2", Severity.ERROR, codes.NODE_BUSY, "busy")
    result = up(deployment, backend, checks=lambda dep: [busy])
    assert not result.started and result.findings == [busy]
    assert "start" not in backend.calls and "stop" not in backend.calls


def test_up_that_a_rank_dies_in_shows_every_ranks_logs_and_cleans_up(deployment: CompiledDeployment,
                                                                     monkeypatch: pytest.MonkeyPatch):
    # The last lines come from each node's container (the same for both backends): here, from a fake docker.
    commands = {t.name: [sys.executable, "-c", f"print('last words of {t.name}')"] for t in deployment.targets}
    monkeypatch.setattr(actions, "container_logs", lambda dep, nodes, follow, tail: commands)
    backend = FakeBackend(ranks={"spark2": exited})
    result = up(deployment, backend)
    assert result.started and not result.ok
    assert result.failure is not None and result.failure.startswith("rank on spark2 is exited: exit 137")
    assert result.last_logs == {"spark1": "last words of spark1", "spark2": "last words of spark2"}
    assert result.cleanup == [Removal("spark1", ("new-spark1",)), Removal("spark2", ("new-spark2",))]
    assert backend.calls[-1] == "remove_new" and "stop" not in backend.calls
    assert backend.there == {"spark1": set(), "spark2": set()}


def test_a_failed_up_leaves_an_earlier_deployment_it_did_not_start(deployment: CompiledDeployment,
                                                                    monkeypatch: pytest.MonkeyPatch):
    """Issue 22: the cleanup of a failed `up` removes only what it started, never what ran before it."""
    monkeypatch.setattr(actions, "last_logs", lambda dep: {})
    backend = FakeBackend(ranks={"spark2": exited}, there={"spark1": {"earlier-head"}})
    result = up(deployment, backend)
    assert not result.ok
    assert result.cleanup == [Removal("spark1", (), ("earlier-head",)), Removal("spark2", ("new-spark2",))]
    assert backend.there == {"spark1": {"earlier-head"}, "spark2": set()}


def test_up_with_keep_leaves_the_failed_ranks(deployment: CompiledDeployment):
    backend = FakeBackend(start_errors={"spark1": "refused"})
    result = up(deployment, backend, keep=True)
    assert result.failure == "spark1: start failed: refused" and result.cleanup is None
    assert "stop" not in backend.calls and "remove_new" not in backend.calls


def head_serves(deployment: CompiledDeployment, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """The head answers as its own engine, and the first request too; returns the (node, port) asked for who
    holds the head's port."""
    from generator.deploy import probe, readiness

    served = deployment.plan.served_model_name
    answers = {f"{deployment.url}/health": b"", f"{deployment.url}/v1/models": json.dumps(
        {"data": [{"id": served}]}).encode()}
    monkeypatch.setattr(readiness, "_get", lambda url: answers.get(url))
    asked = []

    def own_head(node, image, port):  # the fixture's head has no verdict of its healthcheck yet: the node is asked
        asked.append((node.name, port))
        return PortHolder(42, "vllm", "f" * 64, f"{deployment.project}-engine-1", deployment.project, "0")

    monkeypatch.setattr(readiness, "holder_or_reason", own_head)
    # The first request (tests/test_first_request.py) answers.
    monkeypatch.setattr(probe, "probe", lambda url, model, timeout: probe.ProbeResult(url, model, text="hi"))
    return asked


def test_up_succeeds_when_the_head_serves(deployment: CompiledDeployment, monkeypatch: pytest.MonkeyPatch):
    asked = head_serves(deployment, monkeypatch)
    result = up(deployment, FakeBackend())
    assert result.ok and result.url == deployment.url
    assert asked == [("spark1", deployment.plan.serve_port)]


def test_up_ends_with_the_router_step_and_its_outcome_is_in_the_result(deployment: CompiledDeployment,
                                                                        monkeypatch: pytest.MonkeyPatch):
    """Issue 41: the router step is an action of `up`, its outcome part of UpResult (the CLI only formats it)."""
    from generator.deploy.backends.router import Applied
    from generator.deploy.router import RouterUp

    head_serves(deployment, monkeypatch)
    asked: list[str] = []
    step = RouterUp([Applied("spark1", "reloaded")], {"spark1": "no backend for it (is out/_router current?)"})
    result = actions.launch(deployment, FakeBackend(), 5, False, lambda node, state: None, [], 5,
                            router=lambda dep: asked.append(dep.project) or step)
    assert asked == [deployment.project] and result.router is step
    assert result.ok and not result.routed


def test_up_fails_when_another_process_answers_on_the_heads_port(deployment: CompiledDeployment,
                                                                 monkeypatch: pytest.MonkeyPatch):
    """Issue 22: another recipe's engine answering with the same served name is not this recipe serving."""
    from generator.deploy import readiness

    served = deployment.plan.served_model_name
    answers = {f"{deployment.url}/health": b"", f"{deployment.url}/v1/models": json.dumps(
        {"data": [{"id": served}]}).encode()}
    monkeypatch.setattr(readiness, "_get", lambda url: answers.get(url))
    monkeypatch.setattr(readiness, "holder_or_reason",
                        lambda node, image, port: PortHolder(7, "vllm", "e" * 64, "other-engine-1", "other", "0"))
    monkeypatch.setattr(actions, "last_logs", lambda dep: {})
    backend = FakeBackend()
    result = up(deployment, backend)
    assert not result.ok and result.failure is not None
    assert result.failure.startswith(f"port {deployment.plan.serve_port} on spark1 answers from container "
                                     "'other-engine-1' of recipe 'other'")
    assert backend.calls[-1] == "remove_new"


def test_down_names_the_nodes_where_something_is_left(deployment: CompiledDeployment):
    backend = FakeBackend(stop_errors={"spark2": "error during connect"})
    result = actions.down(deployment, backend)
    assert result.failed == ["spark2"] and backend.calls == ["stop", "wait_gone:spark1"]  # no waiting on a dead node
    slow = actions.down(deployment, FakeBackend(left={"spark1": ["pair_spark1.1.x"]}))
    assert slow.failed == ["spark1"] and slow.left == {"spark1": ["pair_spark1.1.x"]}
    assert actions.down(deployment, FakeBackend()).ok


def test_ps_names_the_unreachable_nodes(deployment: CompiledDeployment):
    def unreachable(target: Target) -> RankState:
        return RankState(target.name, target.node.context, "-", "unreachable", failure("unreachable").short)

    result = actions.ps(deployment, FakeBackend(ranks={"spark2": unreachable}))
    assert result.unreachable == ["spark2"]
    assert "Cannot connect to the Docker daemon" in result.ranks[1].status


def test_logs_say_which_nodes_gave_none(deployment: CompiledDeployment, monkeypatch):
    """A node that did not answer is unreachable, not a node without a container (issue 43)."""
    from generator.deploy.backends import base
    from generator.deploy.docker import Docker

    def containers(self, label, timeout=30.0):
        if self.context == "spark2":
            raise failure("unreachable")
        return [{"ID": "c1", "State": "running"}]

    monkeypatch.setattr(Docker, "containers", containers)
    commands = base.container_logs(deployment, tuple(deployment.targets), follow=False, tail=None)
    assert commands["spark2"].startswith("unreachable: context 'spark2' does not answer: Cannot connect"), commands
    commands["spark1"] = [sys.executable, "-c", "print('a'); print('b')"]
    commands["spark3"] = "not started"  # a node that answered with no container of the recipe
    streams = actions.LogStreams(commands)
    assert sorted(streams.lines()) == [("spark1", "a"), ("spark1", "b"), ("spark2", f"({commands['spark2']})"),
                                       ("spark3", "(no container: not started)")]
    assert streams.failed == ["spark2"]


def test_wait_gone_waits_for_the_last_container_but_not_for_a_dead_node(deployment: CompiledDeployment,
                                                                        monkeypatch: pytest.MonkeyPatch):
    from generator.deploy.backends import base

    looks = {"spark1": 0, "spark2": 0}

    def leftovers(target: Target, label: str, lasting: object = None) -> tuple[list[str], bool]:
        looks[target.name] += 1
        if target.name == "spark2":
            raise failure("unreachable")
        return (["pair_spark1.1.abc"], True) if looks["spark1"] < 3 else ([], False)  # gone on the third look

    monkeypatch.setattr(base, "leftovers", leftovers)
    monkeypatch.setattr(base, "GONE_POLL", 0.01)
    started = time.monotonic()
    left = base.wait_gone(deployment, deployment.targets, timeout=30)
    assert time.monotonic() - started < 5
    assert looks == {"spark1": 3, "spark2": 1}
    assert list(left) == ["spark2"] and left["spark2"][0].startswith("(no answer: Cannot connect to the Docker daemon")
    monkeypatch.setattr(base, "leftovers", lambda target, label, lasting=None: (["stuck"], True))
    assert base.wait_gone(deployment, deployment.targets[:1], timeout=0.05) == {"spark1": ["stuck"]}


def test_compose_down_names_a_swarm_task_at_once_instead_of_waiting_for_it(deployment: CompiledDeployment,
                                                                          monkeypatch: pytest.MonkeyPatch):
    """The recipe deployed with --swarm too: its task carries the recipe's label, and `compose down` cannot remove
    it. Compose's wait names it with the command that stops it, at once (it waited the whole bound, 66 s in the
    lab), and still waits for a Compose container that is going."""
    from generator.deploy.backends import base
    from generator.deploy.backends.compose import ComposeBackend
    from generator.deploy.docker import Docker

    looks = {"n": 0}
    task = {"Names": "pair_spark1.1.x", "Labels": "com.docker.swarm.task.id=x,recipegen.recipe=pair"}

    def containers(self: Docker, label: str, timeout: float = 0) -> list[dict]:
        looks["n"] += 1
        going = [{"Names": "pair-engine-1", "Labels": "com.docker.compose.project=pair"}] if looks["n"] < 4 else []
        return [task, *going]

    monkeypatch.setattr(Docker, "containers", containers)
    monkeypatch.setattr(base, "GONE_POLL", 0.01)
    started = time.monotonic()
    left = ComposeBackend().wait_gone(deployment, deployment.targets[:1], timeout=60)
    assert time.monotonic() - started < 5 and looks["n"] == 4  # the Compose container was waited for, not the task
    assert left == {"spark1": [f"pair_spark1.1.x (a Swarm task: `recipegen down --swarm {deployment.project}` "
                               "stops it)"]}


def test_swarm_cleanup_knows_each_service_that_ran_before(deployment: CompiledDeployment,
                                                          monkeypatch: pytest.MonkeyPatch):
    """`docker service inspect a b` with b missing prints a and exits 1 ("no such service: b"): read as nothing
    there at all, a failed `up` after a partial earlier stack removed that stack's remaining services too."""
    from generator.deploy import docker
    from generator.deploy.backends.swarm import SwarmBackend

    services = {f"{RECIPE}_spark1": "earlier-id"}  # the earlier stack kept spark1's service only
    removed: list[str] = []

    def cli(cmd: list[str], timeout: float = 0, input: bytes | None = None, env: object = None) -> str:
        args = cmd[3:]  # after `docker --context CTX`
        if args[:2] == ["service", "inspect"]:
            found = [{"ID": services[n], "Spec": {"Name": n}} for n in args[2:] if n in services]
            missing = [n for n in args[2:] if n not in services]
            if missing:
                raise DockerError(cmd, 1, json.dumps(found), f"Error: no such service: {missing[0]}")
            return json.dumps(found)
        if args[:2] == ["service", "rm"]:
            removed.extend(args[2:])
            return ""
        return ""  # `ps`: no container left

    monkeypatch.setattr(docker, "run_command", cli)
    backend = SwarmBackend(deployment.cluster)
    backend._manager = deployment.cluster.nodes[0]
    before = backend.existing(deployment)
    assert before == {"spark1": frozenset({"earlier-id"}), "spark2": frozenset()}
    services[f"{RECIPE}_spark2"] = "new-id"  # what this `up` created
    result = backend.remove_new(deployment, before)
    assert removed == ["new-id"]
    assert result == [Removal("spark1", kept=(f"{RECIPE}_spark1",)), Removal("spark2", (f"{RECIPE}_spark2",))]
