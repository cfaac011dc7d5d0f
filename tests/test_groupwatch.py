"""The group watch (generator/runtime/groupwatch.py) on loopback, as real processes: a head's and a worker's watch,
each running a small "engine" of its own. The lab tests run it under Docker with the real vLLM
(test_real_engine_lab.py); these pin the protocol itself: the group meets before any engine starts, one rank's end
ends every rank with the cause recorded, a stopped node's watch exits 143, and the bound stops the group for good."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from generator.plan.types import watch_source
from generator.runtime import groupwatch

WATCH = Path(groupwatch.__file__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STARTED: list[subprocess.Popen] = []
SIDE_BY_SIDE = threading.local()  # a side-by-side scenario's thread: where its processes are registered


@pytest.fixture(autouse=True)
def _no_watch_outlives_its_test():
    """A failing test must not leave its watches (and their engines) running."""
    yield
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.terminate()  # the watch stops its engine on SIGTERM
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def start(tmp: Path, rank: int, port: int, engine: str, limit: int = 5, group: str = "r:1",
          shipped: bool = False, key: str | None = None, extra: tuple[str, ...] = (), ranks: int = 2
          ) -> subprocess.Popen:
    """A watch of rank `rank` (of 2) whose engine is `python3 -c engine`; its state in tmp/state-RANK.json. shipped:
    run the text the compiler ships, not the module."""
    shipped_file = tmp / "group-watch.py"  # as the compiler ships it: a config file in the container
    if shipped:
        shipped_file.write_text(watch_source())
    watch = [str(shipped_file if shipped else WATCH)]
    argv = [sys.executable, *watch, "--rank", str(rank), "--ranks", str(ranks), "--node", f"n{rank}",
            "--head", "127.0.0.1", "--port", str(port), "--limit", str(limit), "--window", "600", "--grace", "2",
            "--state", str(tmp / f"state-{rank}.json"), "--group", group, *extra,
            "--", sys.executable, "-c", engine]
    env = {k: v for k, v in os.environ.items() if k != "RECIPEGEN_GROUP_KEY"}
    if key is not None:
        env["RECIPEGEN_GROUP_KEY"] = key
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    getattr(SIDE_BY_SIDE, "started", STARTED).append(proc)
    return proc


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
    # Every rank told: the head exits by itself at once, instead of staying HALT_TELL (60 s) for ranks that will
    # not come (its port and container free sooner; the lab's crash loop ends 60 s earlier).
    h_status, h_out, _ = finish(head, timeout=15)
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


# --- who may talk to the group (issue 39: a stranger on the fabric restarted or halted groups) -------------------

def stranger_hello(port: int, group: str, rank: int = 1) -> None:
    """What a stranger who read out/ sends: a hello naming the committed group string, with no key."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall((json.dumps({"hello": rank, "node": "evil", "group": group, "nonce": "x", "mac": "0" * 64})
                      + "\n").encode())
        sock.settimeout(2)
        with contextlib.suppress(OSError):
            while sock.recv(4096):
                pass


def flood(port: int, payload: bytes) -> None:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(payload)
        time.sleep(0.5)


def test_strangers_change_nothing_while_the_group_meets_and_serves(tmp_path: Path):
    """The group key proves each rank: a stranger's hellos with the committed group string, a 1 MiB line, JSON
    nested 50,000 deep and 200 idle connections held open neither crash the head's watch nor hold up the meeting,
    nor restart the serving group."""
    port = free_port()
    head = start(tmp_path, 0, port, SERVE, key="k1")
    time.sleep(1)
    idle = []
    for _ in range(200):  # held open, silent, through the meeting and after it
        with contextlib.suppress(OSError):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=2))
    for _ in range(7):
        stranger_hello(port, "r:1")
    flood(port, b"[" * 50_000 + b"\n")
    flood(port, b"x" * (1 << 20))
    worker = start(tmp_path, 1, port, SERVE, key="k1")
    engine_up(head, worker)  # the group met in spite of them
    assert state(tmp_path, 1).get("running") and state(tmp_path, 0).get("running"), "the group never met"
    for _ in range(7):  # while it serves: a hello would have ended it as "rank 1 restarted"
        stranger_hello(port, "r:1")
    flood(port, b"[" * 50_000 + b"\n")
    flood(port, b"x" * (1 << 20))
    time.sleep(3)
    assert head.poll() is None and worker.poll() is None
    assert state(tmp_path, 0)["restarts"] == [] and state(tmp_path, 1)["restarts"] == []
    for sock in idle:
        sock.close()
    worker.send_signal(signal.SIGTERM)
    assert finish(worker)[0] == 143 and finish(head)[0] == 2  # the group still works as one


def test_a_rank_without_the_key_is_not_let_in(tmp_path: Path):
    port = free_port()
    head = start(tmp_path, 0, port, SERVE, key="k1")
    worker = start(tmp_path, 1, port, SERVE, key="another")
    time.sleep(5)
    head.send_signal(signal.SIGTERM)
    worker.send_signal(signal.SIGTERM)
    h_status, h_out, _ = finish(head)
    w_status, w_out, _ = finish(worker)
    assert "engine up" not in h_out and "engine up" not in w_out
    assert (h_status, w_status) == (143, 143)


def test_the_head_hears_only_the_ranks_addresses(tmp_path: Path):
    """--peers: the head takes rank 1 from its address (127.0.0.9, which the worker binds as its source) and no
    other; a hello from 127.0.0.1 is closed before a word."""
    port = free_port()
    peers = ("--peers", "127.0.0.1,127.0.0.9")
    head = start(tmp_path, 0, port, SERVE, extra=peers)
    time.sleep(1)
    stranger_hello(port, "r:1")  # from 127.0.0.1: not rank 1's address
    time.sleep(1)
    assert not state(tmp_path, 0).get("running")
    worker = start(tmp_path, 1, port, SERVE, extra=peers)
    deadline = time.time() + 20
    while time.time() < deadline and not state(tmp_path, 0).get("running"):
        time.sleep(0.2)
    assert state(tmp_path, 0).get("running")
    worker.send_signal(signal.SIGTERM)
    finish(worker), finish(head)


# --- timer-bound tests, side by side --------------------------------------------------------------------------

SCENARIOS: dict[str, Callable[[Path], None]] = {}


def side_by_side(scenario: Callable[[Path], None]) -> Callable[..., None]:
    """A test that waits on the watch's real clocks (looks, probe deadlines, the busy window): the module's tests
    of this kind run side by side, each in a thread of its own from the first one's start, so the module waits for
    the slowest of them rather than their sum. Each still passes or fails as its own test."""
    SCENARIOS[scenario.__name__] = scenario

    def test(side_by_side_runs: "Runs") -> None:
        side_by_side_runs.outcome(scenario.__name__)

    test.__name__, test.__doc__ = scenario.__name__, scenario.__doc__
    # One worker runs them all (every worker's session lists every scenario: split, each would start them all)
    return pytest.mark.xdist_group("groupwatch-side-by-side")(test)


class Runs:
    """The selected side-by-side scenarios, started at once, each with its own folder and its own processes."""

    def __init__(self, names: list[str], root: Path) -> None:
        self.errors: dict[str, BaseException] = {}
        self.started: list[subprocess.Popen] = []
        self.threads = {name: threading.Thread(target=self._run, args=(name, root / name), daemon=True)
                        for name in names}
        for thread in self.threads.values():
            thread.start()

    def _run(self, name: str, folder: Path) -> None:
        SIDE_BY_SIDE.started = self.started
        folder.mkdir()
        try:
            SCENARIOS[name](folder)
        except BaseException as err:  # an assertion, a timeout: its own test reports it
            self.errors[name] = err

    def outcome(self, name: str) -> None:
        self.threads[name].join(300)
        assert not self.threads[name].is_alive(), f"{name} still runs after 300 s"
        if name in self.errors:
            raise self.errors[name]

    def stop(self) -> None:
        """Watches still running (a failed scenario): SIGTERM first, so that each stops its engine (a watch killed
        -9 leaves its engine running, orphaned, for ever), then -9."""
        for proc in self.started:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def side_by_side_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    selected = [item.name for item in request.session.items if item.name in SCENARIOS]
    runs = Runs(selected, tmp_path_factory.mktemp("side-by-side"))
    yield runs
    runs.stop()


# --- a wedged engine: alive, answering /health, producing nothing -----------------------------------------------

ENGINE_HTTP = """
import http.server, json, os, sys, time
FLAG = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def answer(self, body, kind="text/plain"):
        self.send_response(200); self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        if self.path == "/health": return self.answer(b"")
        if self.path == "/metrics":  # frozen gauges, as a frozen engine core leaves them
            return self.answer(b"vllm:generation_tokens_total 7.0\\nvllm:num_requests_running 0.0\\n")
        self.send_error(404)
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        while os.path.exists(FLAG): time.sleep(0.2)  # the core is frozen: no token, ever
        self.answer(json.dumps({"choices": [{"text": "x"}]}).encode(), "application/json")
http.server.ThreadingHTTPServer.daemon_threads = True
print("engine up", flush=True)
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), H).serve_forever()
"""


@side_by_side
def test_a_wedged_engine_ends_the_group_with_its_own_cause(tmp_path: Path) -> None:
    """/health stays 200 and /metrics stays flat: the one-token probe finds the wedge, twice, and the head's watch
    ends the group with the cause `wedged` (it waits while the engine answers)."""
    port, http_port = free_port(), free_port()
    flag = tmp_path / "frozen"
    engine = f"import sys; sys.argv = ['e', {str(flag)!r}, '{http_port}']; exec({ENGINE_HTTP!r})"
    extra = ("--health", f"http://127.0.0.1:{http_port}/health", "--model", "tiny", "--wedge", "2")
    head = start(tmp_path, 0, port, engine, ranks=1, extra=extra)
    time.sleep(12)  # served, and probed a few times: an answering engine is left alone
    assert head.poll() is None, head.stderr.read() if head.stderr else ""
    flag.write_text("")
    started = time.time()
    status, out, err = finish(head, timeout=60)
    took = time.time() - started
    assert status == 1, err
    last = state(tmp_path, 0)["restarts"][-1]
    assert last["cause"] == "wedged" and "one-token completion within 2s" in last["reason"], last
    assert took < 2 + 2 * 2 + 6, took  # a look every 2 s, two probes of 2 s, and the engine's stop


@side_by_side
def test_a_loopback_that_answers_nothing_does_not_leave_the_engine_unwatched(tmp_path: Path) -> None:
    """An engine whose loopback port takes connections and never answers, while it serves on the node's fabric
    address: the watch asks the fabric address too until /health first answers, says so, and watches the engine
    there: its freeze is still found."""
    port, http_port = free_port(), free_port()
    holder = socket.socket()  # 127.0.0.1:http_port takes connections (a backlog) and never answers
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", http_port))
    holder.listen(16)
    flag = tmp_path / "frozen"
    served = ENGINE_HTTP.replace('(("127.0.0.1", int(sys.argv[2])), H)', '(("127.0.0.2", int(sys.argv[2])), H)')
    engine = f"import sys; sys.argv = ['e', {str(flag)!r}, '{http_port}']; exec({served!r})"
    extra = ("--health", f"http://127.0.0.1:{http_port}/health", "--model", "tiny", "--wedge", "2",
             "--peers", "127.0.0.2")
    with holder:
        head = start(tmp_path, 0, port, engine, ranks=1, extra=extra)
        time.sleep(groupwatch.HEALTH_TIMEOUT + 4)  # one loopback miss, then the fabric address answers
        assert head.poll() is None, head.stderr.read() if head.stderr else ""
        flag.write_text("")
        status, _, err = finish(head, timeout=60)
    assert status == 1, err
    assert f"the engine answers http://127.0.0.2:{http_port}/health and not http://127.0.0.1:{http_port}" in err, err
    assert state(tmp_path, 0)["restarts"][-1]["cause"] == "wedged"


def test_an_engine_that_never_answers_health_ends_the_group_at_the_boot_bound(tmp_path: Path) -> None:
    """A boot hung before /health ever answers (NCCL's init on a bad link; an engine frozen before the watch saw its
    first answer) is a failed boot at the recipe's health_start_period (`--boot`), which the bound then counts:
    without it the group waited for ever."""
    port, http_port = free_port(), free_port()
    holder = socket.socket()  # the engine's port: takes connections, never answers
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", http_port))
    holder.listen(64)
    extra = ("--health", f"http://127.0.0.1:{http_port}/health", "--model", "tiny", "--wedge", "2", "--boot", "4")
    with holder:
        head = start(tmp_path, 0, port, SERVE, ranks=1, extra=extra)
        status, _, err = finish(head, timeout=30)
    assert status == 1, err
    assert "the engine has not answered /health within 4s of its start (health_start_period)" in err, err
    record = state(tmp_path, 0)["restarts"][-1]
    assert record["cause"] == "health-lost" and record["served"] is False


LATE_ENGINE = """
import http.server, sys, time
LOG = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        with open(LOG, "a") as f: f.write("%f\\n" % time.time())
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
time.sleep(3)  # loading: the port refuses
server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), H)
with open(LOG, "a") as f: f.write("ready %f\\n" % time.time())
server.serve_forever()
"""


def test_a_ready_engine_is_seen_within_a_second(tmp_path: Path) -> None:
    """Until /health first answers it is asked every second: the watch sees a ready engine at once, so one that
    freezes a moment after it served (the lab froze one a second after it answered a client) is still watched.
    Asked every 5 s, the first answer came up to 5 s after the engine was ready."""
    port, http_port = free_port(), free_port()
    log = tmp_path / "asked"
    engine = f"import sys; sys.argv = ['e', {str(log)!r}, '{http_port}']; exec({LATE_ENGINE!r})"
    head = start(tmp_path, 0, port, engine, ranks=1, extra=("--health", f"http://127.0.0.1:{http_port}/health"))
    deadline = time.monotonic() + 30
    while len(log.read_text().split() if log.exists() else []) < 3:  # "ready", its time, a first ask
        assert time.monotonic() < deadline and head.poll() is None, "the watch never asked /health"
        time.sleep(0.1)
    words = log.read_text().split()
    ready, first = float(words[1]), float(words[2])
    assert first - ready <= 1.5, f"first /health asked {first - ready:.1f}s after the engine was ready"


def test_fabric_url_swaps_only_a_loopback_host():
    assert groupwatch.fabric_url("http://127.0.0.1:8000/health", "10.0.0.1") == "http://10.0.0.1:8000/health"
    assert groupwatch.fabric_url("https://[::1]:8443/health", "fd00::1") == "https://[fd00::1]:8443/health"
    assert groupwatch.fabric_url("http://10.0.0.9:8000/health", "10.0.0.1") == ""  # the engine's own --host
    assert groupwatch.fabric_url("http://127.0.0.1:8000/health", "") == ""  # a group of one without peers


@side_by_side
def test_an_engine_that_refuses_the_probe_is_not_judged(tmp_path: Path) -> None:
    """A 4xx to the probe (a wrong served name, a key it does not have) says nothing of a wedge: no restart loop
    of a healthy engine; the watch says wedge detection is off."""
    port, http_port = free_port(), free_port()
    engine = (f"import sys; sys.argv = ['e', '/nonexistent', '{http_port}']; "
              f"exec({ENGINE_HTTP.replace('def do_POST(self):', 'def do_POST(self):' + chr(10) + '        return self.send_error(404)')!r})")
    extra = ("--health", f"http://127.0.0.1:{http_port}/health", "--model", "nope", "--wedge", "1")
    head = start(tmp_path, 0, port, engine, ranks=1, extra=extra)
    time.sleep(8)
    assert head.poll() is None
    head.send_signal(signal.SIGTERM)
    status, _, err = finish(head)
    assert status == 143 and "wedge detection is off" in err, err


# --- PID 1 reaps orphans ------------------------------------------------------------------------------------------

ORPHANS = ("import subprocess, sys, time; "
           "[subprocess.Popen([sys.executable, '-c', 'import os, sys; os.fork() or sys.exit(0); time = 0']) "
           "for _ in range(5)]; print('engine up', flush=True); time.sleep(600)")


def zombies_under(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] == "Z" and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace of its own needs root (unshare --pid)")
def test_as_pid_1_the_watch_reaps_orphaned_zombies(tmp_path: Path):
    """In a PID namespace of its own (as in a container) the watch is PID 1: the engine's helpers whose parent
    ended are reparented to it, and it waits for them, so no zombie piles up; the engine itself runs on."""
    argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(WATCH), "--rank", "0", "--ranks", "1",
            "--node", "n0", "--head", "127.0.0.1", "--port", "1", "--limit", "5", "--window", "600", "--grace", "2",
            "--state", str(tmp_path / "s.json"), "--group", "r:1", "--", sys.executable, "-c", ORPHANS]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    STARTED.append(proc)
    assert proc.stdout is not None and "engine up" in proc.stdout.readline()
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    watch = int(children[0])  # unshare's child: PID 1 inside
    time.sleep(1)
    deadline = time.time() + 15
    while time.time() < deadline and zombies_under(watch):
        time.sleep(0.5)
    assert zombies_under(watch) == [], "orphaned zombies were not reaped"
    os.killpg(proc.pid, signal.SIGTERM)


def test_a_rank_deployed_without_the_key_says_so_and_never_loops(tmp_path: Path):
    """The head holds no key (a plain `docker compose up`), the worker one (`recipegen up`): the worker says why it
    cannot join, at most once a minute, waits between attempts, and no engine starts (no restart loop)."""
    port = free_port()
    head = start(tmp_path, 0, port, SERVE)
    worker = start(tmp_path, 1, port, SERVE, key="k1")
    time.sleep(6)
    head.send_signal(signal.SIGTERM)
    worker.send_signal(signal.SIGTERM)
    _, h_out, _ = finish(head)
    _, w_out, w_err = finish(worker)
    assert "engine up" not in h_out and "engine up" not in w_out
    assert w_err.count("the head holds no group key and this rank holds one") == 1, w_err
    assert state(tmp_path, 0)["restarts"][-1]["cause"] == "node-stopped"  # stopped while meeting: no other restart


def test_an_unproven_go_starts_no_engine(tmp_path: Path):
    """A stranger who takes the head's place (a port it could bind) and says go without the key: the worker
    starts nothing."""
    port = free_port()
    with socket.socket() as fake:
        fake.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        fake.bind(("127.0.0.1", port))
        fake.listen()
        worker = start(tmp_path, 1, port, SERVE, key="k1")
        fake.settimeout(10)
        conn, _ = fake.accept()
        conn.sendall(b'{"nonce": "n", "keyed": true}\n')
        time.sleep(1)
        conn.sendall(b'{"go": true, "mac": "00"}\n{"halt": "bye", "mac": "00"}\n')
        time.sleep(3)
        conn.close()
        worker.send_signal(signal.SIGTERM)
        status, out, err = finish(worker)
    assert status == 143 and "engine up" not in out, err
    assert "not proven" in err and not state(tmp_path, 1).get("halted")


BUSY_ENGINE = ENGINE_HTTP.replace(
    'b"vllm:generation_tokens_total 7.0', '("vllm:generation_tokens_total %f" % time.time()).encode() + b"').replace(
    "while os.path.exists(FLAG)", "while True")


@side_by_side
def test_a_busy_engine_gets_no_probe_and_no_restart(tmp_path: Path) -> None:
    """Tokens counted between two looks: the engine works, whatever a new request would wait (here forever)."""
    assert BUSY_ENGINE != ENGINE_HTTP and "time.time()" in BUSY_ENGINE
    port, http_port = free_port(), free_port()
    engine = f"import sys; sys.argv = ['e', '/nonexistent', '{http_port}']; exec({BUSY_ENGINE!r})"
    extra = ("--health", f"http://127.0.0.1:{http_port}/health", "--model", "tiny", "--wedge", "1")
    head = start(tmp_path, 0, port, engine, ranks=1, extra=extra)
    time.sleep(12)
    assert head.poll() is None
    head.send_signal(signal.SIGTERM)
    assert finish(head)[0] == 143


@side_by_side
def test_requests_in_hand_give_the_engine_the_busy_window(tmp_path: Path) -> None:
    """Counters standing still while a request runs (a long prefill counts only when it ends): no probe within
    the busy window, so a slow healthy engine is not restarted."""
    port, http_port = free_port(), free_port()
    flag = tmp_path / "frozen"
    flag.write_text("")
    busy = ENGINE_HTTP.replace("vllm:num_requests_running 0.0", "vllm:num_requests_running 1.0")
    assert busy != ENGINE_HTTP
    engine = f"import sys; sys.argv = ['e', {str(flag)!r}, '{http_port}']; exec({busy!r})"
    extra = ("--health", f"http://127.0.0.1:{http_port}/health", "--model", "tiny", "--wedge", "1")
    head = start(tmp_path, 0, port, engine, ranks=1, extra=extra)
    time.sleep(12)  # an idle engine would have been judged wedged in about 3 s (the test above)
    assert head.poll() is None
    head.send_signal(signal.SIGTERM)
    assert finish(head)[0] == 143


def test_the_boot_bound_is_the_start_period_never_under_ten_minutes():
    """health_start_period is the watch's boot bound; a period meant for Docker's healthcheck alone (`1s`, `2m`)
    must not end every real boot, and `0` is no bound."""
    from generator.plan.nodes import boot_bound

    assert boot_bound("30m") == 1800 and boot_bound("1h30m") == 5400
    assert boot_bound("1s") == boot_bound("2m") == boot_bound("1ms") == 600
    assert boot_bound("0") == boot_bound("0s") == 0
