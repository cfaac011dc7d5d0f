"""The group watch (generator/runtime/groupwatch.py) on loopback, as real processes: a head's and a worker's watch,
each running a small "engine" of its own. The lab tests run it under Docker with the real vLLM
(test_real_engine_lab.py); these pin the protocol itself: the group meets before any engine starts, one rank's end
ends every rank with the cause recorded, a stopped node's watch exits 143, and the bound stops the group for good."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from generator.plan.types import _watch_source
from generator.runtime import groupwatch

WATCH = Path(groupwatch.__file__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(tmp: Path, rank: int, port: int, engine: str, limit: int = 5, group: str = "r:1",
          shipped: bool = False) -> subprocess.Popen:
    """A watch of rank `rank` (of 2) whose engine is `python3 -c engine`; its state in tmp/state-RANK.json. shipped:
    run the text the compiler ships (`python3 -c`), not the file."""
    watch = ["-c", _watch_source()] if shipped else [str(WATCH)]
    argv = [sys.executable, *watch, "--rank", str(rank), "--ranks", "2", "--node", f"n{rank}",
            "--head", "127.0.0.1", "--port", str(port), "--limit", str(limit), "--window", "600", "--grace", "2",
            "--state", str(tmp / f"state-{rank}.json"), "--group", group, "--", sys.executable, "-c", engine]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def engine_up(*procs: subprocess.Popen, timeout: float = 30) -> None:
    """Wait until each rank's engine printed "engine up" (the group met and it runs), not a fixed while."""
    import threading

    def read(proc: subprocess.Popen) -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            if "engine up" in line:
                return

    readers = [threading.Thread(target=read, args=(p,), daemon=True) for p in procs]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + timeout
    for reader in readers:
        reader.join(max(0.0, deadline - time.monotonic()))
    assert not any(r.is_alive() for r in readers), f"no 'engine up' within {timeout}s"


def state(tmp: Path, rank: int) -> dict:
    return json.loads((tmp / f"state-{rank}.json").read_text())


SERVE = "import time, sys; print('engine up', flush=True); time.sleep(600)"
CRASH = "import sys, time; time.sleep(1); print('ValueError: out of KV cache', file=sys.stderr, flush=True); sys.exit(3)"


def finish(proc: subprocess.Popen, timeout: float = 30) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def test_no_engine_starts_until_the_group_met(tmp_path: Path):
    port = free_port()
    head = start(tmp_path, 0, port, SERVE)
    time.sleep(2)
    assert head.poll() is None
    head.send_signal(signal.SIGTERM)  # the worker never came: the head's engine never started
    status, out, err = finish(head)
    assert status == 143 and "engine up" not in out
    assert "stopped while its group met" in state(tmp_path, 0)["restarts"][-1]["reason"]


def test_one_ranks_crash_ends_every_rank_and_the_head_records_who_and_why(tmp_path: Path):
    port = free_port()
    head = start(tmp_path, 0, port, SERVE, shipped=True)  # the text as the compose files carry it
    worker = start(tmp_path, 1, port, CRASH, shipped=True)
    w_status, _, w_err = finish(worker)
    h_status, h_out, _ = finish(head)
    # Both exit non-zero, so Docker's on-failure restarts both; the head's 2 says it only followed (`up` names the
    # worker, whose own end it was).
    assert (w_status, h_status) == (1, 2)
    assert "engine up" in h_out  # the head's engine had started: the group met
    last = state(tmp_path, 0)["restarts"][-1]
    assert last["rank"] == 1 and last["node"] == "n1"
    assert "rank 1 (n1): the engine exited with status 3" in last["reason"]
    assert last["line"] == "ValueError: out of KV cache"
    assert "ValueError: out of KV cache" in w_err  # the engine's own output still reaches docker logs


def test_a_stopped_worker_exits_143_and_the_head_restarts_the_group(tmp_path: Path):
    port = free_port()
    head = start(tmp_path, 0, port, SERVE)
    worker = start(tmp_path, 1, port, SERVE)
    engine_up(head, worker)  # the group met, both engines run
    worker.send_signal(signal.SIGTERM)  # its node shuts down
    assert finish(worker)[0] == 143  # on-failure restarts it when its dockerd starts again
    assert finish(head)[0] == 2  # it followed
    assert "rank 1 (n1) stopped (SIGTERM" in state(tmp_path, 0)["restarts"][-1]["reason"]


def test_at_its_bound_the_group_stops_for_good_and_says_why(tmp_path: Path):
    port = free_port()
    now = time.time()
    recent = [{"time": now - 10 * i, "reason": "rank 1 (n1): the engine exited with status 3", "rank": 1,
               "node": "n1", "line": "ValueError: out of KV cache"} for i in range(2)]
    (tmp_path / "state-0.json").write_text(json.dumps({"restarts": recent, "halted": None}))
    head = start(tmp_path, 0, port, SERVE, limit=2)
    worker = start(tmp_path, 1, port, SERVE, limit=2)
    w_status, w_out, w_err = finish(worker, timeout=90)
    assert w_status == 0 and "engine up" not in w_out  # exit 0: on-failure does not restart it
    assert "the head says: 2 restarts within 600s" in w_err, w_err
    head.send_signal(signal.SIGTERM)  # it stays a while to tell late ranks; a stop ends that too
    h_status, h_out, _ = finish(head, timeout=30)
    assert h_status == 0 and "engine up" not in h_out
    assert state(tmp_path, 0)["halted"]["reason"].startswith("2 restarts within 600s")
    assert state(tmp_path, 1)["halted"]  # the worker recorded it too: after a reboot it stays stopped


def test_a_group_of_one_takes_no_port(tmp_path: Path):
    with socket.socket() as taken:  # the group port busy: a watch that asked for it would fail before its engine
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        argv = [sys.executable, str(WATCH), "--rank", "0", "--ranks", "1", "--node", "n0", "--head", "127.0.0.1",
                "--port", str(taken.getsockname()[1]), "--limit", "5", "--window", "600", "--grace", "2",
                "--state", str(tmp_path / "s.json"), "--group", "r:1", "--", sys.executable, "-c", CRASH]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert json.loads((tmp_path / "s.json").read_text())["restarts"][-1]["line"] == "ValueError: out of KV cache"


def test_ps_reads_the_record_as_the_watch_wrote_it(tmp_path: Path):
    """`recipegen ps` reads the head's state file: who failed, how often, the last line, whether it stopped."""
    from generator.cli.deploy import group_lines
    from generator.deploy.group import GroupRecord

    port = free_port()
    head = start(tmp_path, 0, port, SERVE)
    worker = start(tmp_path, 1, port, CRASH)
    finish(worker), finish(head)
    record = GroupRecord.from_state(state(tmp_path, 0))
    assert (record.restarts, record.recent, record.limit) == (1, 1, 5)
    assert record.by_rank == (("rank 1 (n1)", 1),) and record.last_line == "ValueError: out of KV cache"
    lines = group_lines("r", record)
    assert "1 group restart(s) (1 within the window; bound 5 in 10m)" in lines[0]
    assert lines[0].endswith("the engine exited with status 3: ValueError: out of KV cache")
    assert record.halted is None and not any("STOPPED" in li for li in lines)


def test_restarts_in_a_row_that_never_served_stop_the_group_however_slow_each_was(tmp_path: Path):
    """A node that never comes back, or a boot that always fails after a long load: each attempt may take longer
    than window / limit, so the window alone would never trip; restarts in a row without serving do."""
    port = free_port()
    old = time.time() - 3600  # all outside the 600 s window
    streak = [{"time": old + i, "reason": "rank(s) [1] did not join within 600s", "rank": 0, "node": "n0",
               "line": "", "served": False} for i in range(2)]
    (tmp_path / "state-0.json").write_text(json.dumps({"restarts": streak, "halted": None}))
    head = start(tmp_path, 0, port, SERVE, limit=2)
    time.sleep(3)
    head.send_signal(signal.SIGTERM)  # it would stay HALT_TELL seconds to tell late ranks; a stop ends that
    status, out, err = finish(head, timeout=30)
    assert status == 0 and "engine up" not in out
    assert "2 restarts in a row without serving" in state(tmp_path, 0)["halted"]["reason"]


def test_a_served_restart_breaks_the_streak(tmp_path: Path):
    port = free_port()
    old = time.time() - 3600
    history = [{"time": old + i, "reason": "x", "rank": 1, "node": "n1", "line": "", "served": i == 1}
               for i in range(2)]
    (tmp_path / "state-0.json").write_text(json.dumps({"restarts": history, "halted": None}))
    head = start(tmp_path, 0, port, SERVE, limit=2)
    worker = start(tmp_path, 1, port, SERVE, limit=2)
    engine_up(head, worker)
    assert head.poll() is None and worker.poll() is None  # one unserved restart since the last served one: runs
    worker.send_signal(signal.SIGTERM)
    finish(worker), finish(head)


def test_a_rank_of_another_group_is_turned_away_and_a_damaged_record_starts_afresh(tmp_path: Path):
    port = free_port()
    (tmp_path / "state-0.json").write_text("[1, 2, 3]")  # JSON, but not a record
    head = start(tmp_path, 0, port, SERVE, group="r:new")
    stranger = start(tmp_path, 1, port, SERVE, group="r:old")  # a leftover container of an earlier shape
    time.sleep(4)
    head.send_signal(signal.SIGTERM)
    stranger.send_signal(signal.SIGTERM)
    status, out, err = finish(head)
    assert status == 143 and "engine up" not in out, err  # it never met the stranger, and did not crash
    assert "stopped while its group met" in state(tmp_path, 0)["restarts"][-1]["reason"]
    assert "engine up" not in finish(stranger)[1]


def test_up_names_the_rank_whose_end_it_was_not_the_one_that_followed():
    """Both ranks of a group are down at once; `up` names the one whose watch did not merely follow (exit 2)."""
    from types import SimpleNamespace

    from generator.deploy.backends.base import RankState
    from generator.deploy.readiness import DeployFailed, wait_until_serving

    head = RankState("spark1", "c1", "r-engine-1", "restarting", "exit 2", 1, followed=True)
    worker = RankState("spark2", "c2", "r-engine-1", "restarting", "exit 1", 1)
    dep = SimpleNamespace(plan=SimpleNamespace(served_model_name="tiny"), head=SimpleNamespace(name="spark1"),
                          url="http://127.0.0.1:9")
    backend = SimpleNamespace(states=lambda d: [head, worker])
    try:
        wait_until_serving(dep, backend, 5, lambda node, what: None)  # type: ignore[arg-type]
    except DeployFailed as err:
        assert str(err).startswith("rank on spark2 is restarting: exit 1")
    else:
        raise AssertionError("up did not fail")


def test_up_names_the_cause_from_the_heads_record_once_both_ranks_run_again():
    """Restarted and running again, neither rank's exit status is left to read: the head's record names the cause."""
    from types import SimpleNamespace

    from generator.deploy.backends.base import RankState
    from generator.deploy.group import GroupRecord
    from generator.deploy.readiness import DeployFailed, wait_until_serving

    head = RankState("spark1", "c1", "r-engine-1", "running", "after 1 restart(s)", 1)
    worker = RankState("spark2", "c2", "r-engine-1", "running", "after 1 restart(s)", 1)
    record = GroupRecord.from_state({"restarts": [{"time": 1.0, "reason": "rank 1 (spark2): the engine exited",
                                                   "rank": 1, "node": "spark2", "line": "boom"}]})
    dep = SimpleNamespace(plan=SimpleNamespace(served_model_name="tiny"), head=SimpleNamespace(name="spark1"),
                          url="http://127.0.0.1:9")
    backend = SimpleNamespace(states=lambda d: [head, worker], group=lambda d: record)
    try:
        wait_until_serving(dep, backend, 5, lambda node, what: None)  # type: ignore[arg-type]
    except DeployFailed as err:
        assert str(err).startswith("rank on spark2 is running"), str(err)
    else:
        raise AssertionError("up did not fail")
