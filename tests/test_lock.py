"""generator/deploy/lock.py offline: the order nodes are taken in, letting go while waiting, a holder's facts and
when its lock is stale. The engines are fakes keeping one container name each, all-or-nothing like dockerd's
(tests/test_lock_lab.py runs the same against real dockerds)."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import pytest

from generator.cluster.probe.read import image_candidates
from generator.deploy import holder as holders
from generator.deploy import lock
from generator.deploy.docker import DockerError
from generator.deploy.holder import Holder, holder_from, stale
from generator.deploy.lock import Claim, NodesBusy, acquire, busy_lines, ordered
from generator.deploy.names import LOCK_CONTAINER, LOCK_IMAGE
from generator.deploy.targets import OnNode
from generator.resolve.model import Node
from generator.transfer.image_chain import candidates


@dataclass
class Engine:
    """One fake dockerd: a container name is unique, `create` of a taken one is docker's conflict."""

    name: str
    up: bool = True
    locks: dict[str, dict[str, str]] = field(default_factory=dict)  # container id -> labels
    calls: list[str] = field(default_factory=list)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def run(self, *args: str, timeout: float = 30, input: bytes | None = None) -> str:
        cmd = ["docker", "--context", self.name, *args]
        self.calls.append(args[0])
        if not self.up:
            raise DockerError(cmd, 1, "", "Cannot connect to the Docker daemon at unix:///x.sock")
        with self._guard:
            if args[0] == "create":
                if self.locks:
                    raise DockerError(cmd, 125, "", f'Error response from daemon: Conflict. The container name '
                                                    f'"/{LOCK_CONTAINER}" is already in use by container "abc"')
                labels = dict(a.split("=", 1) for a in args[args.index("--name"):] if "=" in a)
                cid = f"{self.name}-{len(self.calls)}"
                self.locks[cid] = labels
                return cid + "\n"
            if args[:2] == ("rm", "-f"):
                self.locks.pop(args[2], None)
                return ""
        raise AssertionError(f"unexpected call {args}")

    def inspect_container(self, name: str) -> dict[str, object] | None:
        if not self.up:  # as Docker.inspect: only "no such object" is None
            raise DockerError(["docker", "--context", self.name, "inspect"], 1, "[]",
                              "Cannot connect to the Docker daemon at unix:///x.sock")
        with self._guard:
            for cid, labels in self.locks.items():
                return {"Id": cid, "Config": {"Labels": labels}}
        return None

    def containers(self, label: str, timeout: float = 30) -> list[dict[str, object]]:
        return [{"State": "running"}]


@pytest.fixture
def engines(monkeypatch: pytest.MonkeyPatch) -> dict[str, Engine]:
    found: dict[str, Engine] = {}
    monkeypatch.setattr(OnNode, "docker", property(lambda self: found.setdefault(self.node.context,
                                                                                  Engine(self.node.context))))
    monkeypatch.setattr(lock, "POLL", 0.05)
    return found


def on(name: str, address: str, context: str | None = None) -> OnNode:
    return OnNode(Node(0, name, address, context or f"ctx-{name}", address, "u", "/home/u", {}))


def test_nodes_are_taken_in_one_order_whatever_the_cluster_file_says(engines: dict[str, Engine]):
    a, b, c = on("b-node", "10.0.0.2"), on("a-node", "10.0.0.3"), on("c-node", "10.0.0.1")
    assert [n.name for n in ordered([a, b, c])] == ["c-node", "b-node", "a-node"]
    assert [n.name for n in ordered([b, c, a])] == ["c-node", "b-node", "a-node"]
    assert [n.name for n in ordered([a, on("alias", "10.0.0.9", "ctx-b-node")])] == ["b-node"]  # one engine
    held = acquire([a, b, c], Claim.of("r", "recipegen up r"))
    assert [n.name for n, _ in held.nodes] == ["c-node", "b-node", "a-node"]
    assert all(len(e.locks) == 1 for e in engines.values())
    held.release()
    assert all(not e.locks for e in engines.values())


def test_a_busy_node_lets_go_of_the_others_and_names_its_holder(engines: dict[str, Engine]):
    first, second = on("spark1", "10.0.0.1"), on("spark2", "10.0.0.2")
    other = acquire([second], Claim.of("alpha", "recipegen up alpha", 600))
    with pytest.raises(NodesBusy) as busy:
        acquire([second, first], Claim.of("beta", "recipegen up beta"))
    assert not engines["ctx-spark1"].locks  # taken first, let go before the refusal
    [holder] = busy.value.holders
    assert (holder.node, holder.recipe, holder.command, holder.pid) == ("spark2", "alpha", "recipegen up alpha",
                                                                        os.getpid())
    assert holder.stale is None and holder.running == 1
    line = busy_lines(busy.value)[0]
    assert line.startswith(f"spark2: busy: held by `recipegen up alpha` from host {socket.gethostname()} "
                           f"(pid {os.getpid()}), since ")
    assert "1 container(s) of 'alpha' running there" in line and "--lock-wait" in line
    other.release()


def test_a_bounded_wait_takes_the_nodes_once_the_holder_lets_go(engines: dict[str, Engine]):
    node = on("spark1", "10.0.0.1")
    other = acquire([node], Claim.of("alpha", "recipegen down alpha"))
    threading.Timer(0.3, other.release).start()
    held = acquire([node], Claim.of("beta", "recipegen up beta"), wait=10)
    assert [n.name for n, _ in held.nodes] == ["spark1"]
    assert list(engines["ctx-spark1"].locks.values())[0][lock.RECIPE] == "beta"
    held.release()
    other = acquire([node], Claim.of("alpha", "recipegen down alpha"))
    with pytest.raises(NodesBusy) as busy:
        acquire([node], Claim.of("beta", "recipegen up beta"), wait=0.2)
    assert busy.value.waited == 0.2 and "(waited 0s)" in busy_lines(busy.value)[0]
    other.release()


def test_a_node_that_does_not_answer_is_left_to_the_command_to_report(engines: dict[str, Engine]):
    dead, live = on("spark1", "10.0.0.1"), on("spark2", "10.0.0.2")
    engines["ctx-spark1"] = Engine("ctx-spark1", up=False)
    held = acquire([dead, live], Claim.of("r", "recipegen down r"))
    assert [n.name for n, _ in held.nodes] == ["spark2"] and "Cannot connect" in held.skipped["spark1"]
    held.release()


def test_a_refusal_names_the_holder_though_another_node_stopped_answering(engines: dict[str, Engine]):
    """The holders are read once more for the refusal: a node gone silent meanwhile must not turn it into a
    docker error about that node."""
    busy, silent = on("spark1", "10.0.0.1"), on("spark2", "10.0.0.2")
    other = acquire([busy], Claim.of("alpha", "recipegen up alpha", 600))
    engines["ctx-spark2"] = Engine("ctx-spark2", up=False)
    with pytest.raises(NodesBusy) as refused:
        acquire([busy, silent], Claim.of("beta", "recipegen up beta"))
    assert [(h.node, h.recipe) for h in refused.value.holders] == [("spark1", "alpha")]
    other.release()


@dataclass
class SilentOnLook(Engine):
    """An engine that refuses the create as taken, then stops answering before the lock can be read."""

    def run(self, *args: str, timeout: float = 30, input: bytes | None = None) -> str:
        if args[0] == "create":
            raise DockerError(["docker", *args], 125, "", 'Error response from daemon: Conflict. The container name '
                                                           f'"/{LOCK_CONTAINER}" is already in use by container "x"')
        return super().run(*args, timeout=timeout, input=input)

    def inspect_container(self, name: str) -> dict[str, object] | None:
        raise DockerError(["docker", "inspect"], None, "", "no answer within 30s")


def test_a_node_that_stops_answering_while_its_lock_is_read_is_left_to_the_command(engines: dict[str, Engine]):
    flaky, live = on("spark1", "10.0.0.1"), on("spark2", "10.0.0.2")
    engines["ctx-spark1"] = SilentOnLook("ctx-spark1")
    held = acquire([flaky, live], Claim.of("r", "recipegen down r"))
    assert [n.name for n, _ in held.nodes] == ["spark2"] and "no answer" in held.skipped["spark1"]
    held.release()


@dataclass
class SlowCreate(Engine):
    """An engine that creates the lock after the CLI has given up waiting (the client's timeout kills `docker`,
    not the daemon's work)."""

    def run(self, *args: str, timeout: float = 30, input: bytes | None = None) -> str:
        said = super().run(*args, timeout=timeout, input=input)
        if args[0] == "create":
            raise DockerError(["docker", *args], None, "", f"no answer within {timeout:.0f}s")
        return said


def test_a_lock_whose_create_timed_out_is_let_go_too(engines: dict[str, Engine]):
    slow, live = on("spark1", "10.0.0.1"), on("spark2", "10.0.0.2")
    engines["ctx-spark1"] = SlowCreate("ctx-spark1")
    with lock.holding([slow, live], Claim.of("r", "recipegen down r")) as held:
        assert [n.name for n, _ in held.nodes] == ["spark2"] and "no answer" in held.skipped["spark1"]
        assert engines["ctx-spark1"].locks  # it landed after all
    assert not engines["ctx-spark1"].locks and not engines["ctx-spark2"].locks


def test_the_lock_is_let_go_when_the_command_is_interrupted(engines: dict[str, Engine]):
    node = on("spark1", "10.0.0.1")
    with pytest.raises(KeyboardInterrupt):
        with lock.holding([node], Claim.of("r", "recipegen up r")):
            assert engines["ctx-spark1"].locks
            raise KeyboardInterrupt
    assert not engines["ctx-spark1"].locks


def holder(**labels: str) -> Holder:
    facts = {lock.RECIPE: "r", lock.COMMAND: "recipegen up r", lock.HOST: "h", lock.PID: "1",
             lock.SINCE: "2026-01-02T03:04:05+00:00", lock.BOUND: "", lock.INVOCATION: "i", **labels}
    return holder_from("spark1", "c0ffee", facts)


def test_a_holder_is_stale_when_its_process_is_gone_or_it_outlived_its_bound(monkeypatch: pytest.MonkeyPatch):
    me = socket.gethostname()
    here = {lock.HOST: me, lock.MACHINE: holders.machine_id()}  # what a lock taken on this machine says
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = holder(**here, **{lock.PID: str(dead.pid)})
    assert stale(gone) == f"its process {dead.pid} on {me} is gone"
    alive = holder(**here, **{lock.PID: str(os.getpid()), lock.PID_START: holders.process_start(os.getpid())})
    assert stale(alive) is None
    reused = holder(**here, **{lock.PID: str(os.getpid()), lock.PID_START: "1"})  # the pid is another's now
    assert stale(reused) == f"its process {os.getpid()} on {me} is gone"
    since = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    elsewhere = holder(**{lock.HOST: "laptop", lock.PID: "1", lock.BOUND: "600"})
    assert stale(elsewhere, now=since + timedelta(seconds=599)) is None  # another host's pid says nothing here
    assert stale(elsewhere, now=since + timedelta(seconds=601)) == \
        "held 10m 1s, longer than its own bound of 10m 0s"
    assert stale(holder(**{lock.HOST: "laptop"}), now=since + timedelta(days=3)) is None  # no bound: only --force
    # another machine that happens to share this host's name: its pid says nothing here either
    monkeypatch.setattr(holders, "machine_id", lambda: "this-machine")
    namesake = holder(**{lock.HOST: me, lock.PID: str(dead.pid), lock.MACHINE: "another-machine"})
    assert stale(namesake, now=since) is None
    assert stale(holder(**{lock.HOST: "renamed", lock.PID: str(dead.pid), lock.MACHINE: "this-machine"}), now=since)
    # a host-network container (the host's name, its own pids, no /etc/machine-id) judges no pid of the host's
    monkeypatch.setattr(holders, "machine_id", lambda: "")
    assert stale(holder(**{lock.HOST: me, lock.PID: str(dead.pid), lock.MACHINE: "the-host"}), now=since) is None
    # and a holder that wrote no machine id is not judged by pid from a machine that has one
    monkeypatch.setattr(holders, "machine_id", lambda: "this-machine")
    assert stale(holder(**{lock.HOST: me, lock.PID: str(dead.pid)}), now=since) is None
    # two machines without ids: the host name is all there is
    monkeypatch.setattr(holders, "machine_id", lambda: "")
    assert stale(holder(**{lock.HOST: me, lock.PID: str(dead.pid)}), now=since)


def test_a_stale_lock_says_how_to_break_it():
    busy = NodesBusy([Holder(**{**holder().__dict__, "stale": "its process 1 on h is gone"})], 0)
    [line] = busy_lines(busy, " --cluster lab.toml")
    assert line.endswith("the lock looks stale: its process 1 on h is gone; break it with "
                         "`recipegen unlock spark1 --cluster lab.toml`")


def test_no_helper_runs_in_the_locks_empty_image():
    rows = [{"Repository": "recipegen-lock", "Tag": "1", "Size": "0B"},
            {"Repository": "busybox", "Tag": "latest", "Size": "4MB"}]
    assert image_candidates(rows) == ["busybox:latest"]
    assert candidates("vllm:1", [(LOCK_IMAGE, "sha256:1"), ("other:2", "sha256:2")], []) == ["other:2"]


def test_a_lock_created_as_the_command_was_interrupted_is_removed_too(engines: dict[str, Engine],
                                                                        monkeypatch: pytest.MonkeyPatch):
    """SIGTERM between the engine creating the lock and its id reaching recipegen: found again by its label."""
    first, second = on("spark1", "10.0.0.1"), on("spark2", "10.0.0.2")
    real = Engine.run

    def cut_short(self: Engine, *args: str, timeout: float = 30, input: bytes | None = None) -> str:
        said = real(self, *args, timeout=timeout, input=input)
        if args[0] == "create" and self.name == "ctx-spark2":
            raise KeyboardInterrupt("signal 15")
        return said

    monkeypatch.setattr(Engine, "run", cut_short)
    with pytest.raises(KeyboardInterrupt):
        acquire([first, second], Claim.of("r", "recipegen up r"))
    assert not engines["ctx-spark1"].locks and not engines["ctx-spark2"].locks
