"""Issue 22 acceptance, through the real lab: deploy commands run at once never destroy each other's work. Every
command that changes a node holds that node's lock (a container named recipegen-lock on its own engine), cleanup
removes only what its own `up` started, and readiness is sure the answer comes from this recipe's head.

"Repeated" is ROUNDS rounds of two `up` started together (the last with --lock-wait: the loser joins): the race
of the issue lost 1 round in 3 without the lock, and each round costs a real `up` and `down` on the shared CI
machine."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable

import pytest

from generator.deploy.names import container_name
from lab import IMAGE, Lab
from helpers.deploylab import SERVED, containers, models, project, run, vllm_recipe  # noqa: F401 - project: fixture

pytestmark = pytest.mark.lab

ROUNDS = 3
LOCK = "recipegen-lock"


def start(lab: Lab, cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(["recipegen", *args], cwd=cwd, env=lab.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    out, err = proc.communicate(timeout=timeout)
    assert "Traceback" not in err, err
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def while_running(proc: subprocess.Popen[str], ready: Callable[[], bool], what: str, bound: float = 90) -> None:
    """Wait until `ready()` while the command still runs (generous bound: the CI machine is shared and slow)."""
    deadline = time.monotonic() + bound
    while not ready():
        assert proc.poll() is None, f"{what}: it exited: {finish(proc).stderr}"
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def running_ids(lab: Lab, nodes, recipe: str) -> list[set[str]]:
    return [{c["ID"] for c in containers(lab, n, recipe) if c["State"] == "running"} for n in nodes]


def ranks(lab: Lab, node, recipe: str) -> list[dict]:
    """The recipe's rank containers (not preflight's trial, which carries the recipe's labels too)."""
    return [c for c in containers(lab, node, recipe) if c["Names"] == container_name(recipe)]


def lock_of(lab: Lab, node) -> dict | None:
    found = lab.docker(node, "inspect", "--type", "container", LOCK, check=False)
    return json.loads(found.stdout)[0] if found.returncode == 0 else None


def test_two_ups_of_one_recipe_at_once_never_tear_each_other_down(project, clean_lab: Lab):
    lab = clean_lab
    root = project({"twin": vllm_recipe(2)}, nodes=2)
    head, nodes = lab.nodes[0], lab.nodes[:2]
    for round_ in range(ROUNDS):
        wait = ["--lock-wait", "180"] if round_ == ROUNDS - 1 else []  # the last round: the loser waits, then joins
        results = [finish(p) for p in [start(lab, root, "up", "twin", "--timeout", "90", *wait) for _ in range(2)]]
        said = [r for r in results if r.returncode == 0]
        # one serves and the other is refused (or, started late, finds it running and joins); waiting, both serve
        assert len(said) == 2 if wait else said, f"round {round_}: {[r.stderr for r in results]}"
        for r in results:
            if r.returncode != 0:  # the loser names the winner's `up`, and removed nothing
                assert "busy" in r.stderr and "held by `recipegen up twin`" in r.stderr, r.stderr
                assert "removed" not in r.stderr and "nothing was done" in r.stderr, r.stderr
        ids = running_ids(lab, nodes, "twin")
        assert [len(i) for i in ids] == [1, 1], f"round {round_}: {ids}"
        assert SERVED in models(f"http://{head.address}:8000")  # whoever said it serves, it serves
        assert all(lock_of(lab, n) is None for n in nodes)  # both let go
        assert run(lab, root, "down", "twin").returncode == 0


def test_two_recipes_wanting_the_same_nodes_exactly_one_serves(project, clean_lab: Lab):
    lab = clean_lab
    root = project({"alpha": vllm_recipe(2), "beta": vllm_recipe(2)}, nodes=2)
    procs = {rid: start(lab, root, "up", rid, "--timeout", "90") for rid in ("alpha", "beta")}
    results = {rid: finish(p) for rid, p in procs.items()}
    winners = [rid for rid, r in results.items() if r.returncode == 0]
    assert len(winners) == 1, {rid: r.stderr for rid, r in results.items()}
    winner, loser = winners[0], ({"alpha", "beta"} - set(winners)).pop()
    refused = results[loser].stderr
    # refused at the lock (the winner still working) or by preflight (the winner already running there)
    assert f"held by `recipegen up {winner}`" in refused or f"recipe '{winner}' runs here" in refused, refused
    assert all(containers(lab, n, loser) == [] for n in lab.nodes)
    assert [len(i) for i in running_ids(lab, lab.nodes[:2], winner)] == [1, 1]
    assert SERVED in models(f"http://{lab.nodes[0].address}:8000")


def test_up_is_refused_in_preflight_when_the_heads_port_is_taken(project, clean_lab: Lab):
    lab = clean_lab
    root = project({"squat": vllm_recipe(2)}, nodes=2)
    head = lab.nodes[0]
    lab.docker(head, "run", "-d", "--name", "squatter", "--network", "host", "--entrypoint", "python3", IMAGE,
               "-m", "http.server", "8000")
    deadline = time.monotonic() + 30
    while True:  # listening before `up` asks
        try:
            socket.create_connection((head.address, 8000), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "the squatter never listened"
            time.sleep(0.2)
    up = run(lab, root, "up", "squat", "--timeout", "30")
    assert up.returncode == 1, up.stdout + up.stderr
    assert "spark1: preflight: port 8000 (the head's --port) is already in use on this node by container " \
           "'squatter'" in up.stderr, up.stderr
    assert "nothing was started" in up.stderr
    assert all(containers(lab, n, "squat") == [] for n in lab.nodes)
    assert lab.docker(head, "inspect", "-f", "{{.State.Running}}", "squatter").stdout.strip() == "true"


def test_a_lock_left_by_a_killed_up_is_stale_and_can_be_broken(project, clean_lab: Lab):
    lab = clean_lab
    root = project({"killed": vllm_recipe(2)}, nodes=2)
    nodes = lab.nodes[:2]
    proc = start(lab, root, "up", "killed", "--timeout", "90")
    while_running(proc, lambda: all(lock_of(lab, n) for n in nodes), "up never held both nodes")
    proc.send_signal(signal.SIGSTOP)  # alive, holding, and not finishing while we look
    held = run(lab, root, "ps", "killed").stdout  # a node held by a running command
    assert f"spark1: held by `recipegen up killed` from host {socket.gethostname()} (pid {proc.pid})" in held, held
    assert "stale" not in held
    kept = run(lab, root, "unlock", "spark1")  # a live holder's lock stays
    assert kept.returncode == 1 and "may still be working; left" in kept.stderr, kept.stderr
    assert lock_of(lab, nodes[0]) is not None
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert all(lock_of(lab, n) for n in nodes)  # nothing let go: the holder died

    again = run(lab, root, "up", "killed", "--timeout", "30")
    assert again.returncode == 1
    for node in nodes:
        assert f"{node.name}: busy: held by `recipegen up killed`" in again.stderr, again.stderr
        assert f"the lock looks stale: its process {proc.pid} on {socket.gethostname()} is gone; break it with " \
               f"`recipegen unlock {node.name}`" in again.stderr, again.stderr
    assert "looks stale: its process" in run(lab, root, "ps", "killed").stdout

    broke = run(lab, root, "unlock", "spark1", "spark2")
    assert broke.returncode == 0, broke.stderr
    assert broke.stdout.count("broke the lock of `recipegen up killed`") == 2, broke.stdout
    assert all(lock_of(lab, n) is None for n in nodes)
    up = run(lab, root, "up", "killed", "--timeout", "90")
    assert up.returncode == 0, up.stderr
    assert SERVED in models(f"http://{nodes[0].address}:8000")


def test_sigterm_lets_go_and_removes_only_what_that_up_started(project, clean_lab: Lab):
    lab = clean_lab
    root = project({"term": vllm_recipe(2)}, nodes=2)
    nodes = lab.nodes[:2]
    fresh = start(lab, root, "up", "term", "--timeout", "90")
    # its ranks exist: it is in its launch
    while_running(fresh, lambda: all(ranks(lab, n, "term") for n in nodes), "up never started its ranks")
    fresh.send_signal(signal.SIGTERM)
    stopped = finish(fresh)
    assert stopped.returncode == 1 and "up failed: signal 15" in stopped.stderr, stopped.stderr
    assert "spark1: removed term-engine-1" in stopped.stderr and "spark2: removed term-engine-1" in stopped.stderr
    assert "term: nothing of it runs on any node" in stopped.stderr
    assert all(containers(lab, n, "term") == [] for n in nodes)  # what it started, removed
    assert all(lock_of(lab, n) is None for n in nodes)

    assert run(lab, root, "up", "term", "--timeout", "90").returncode == 0
    earlier = running_ids(lab, nodes, "term")
    again = start(lab, root, "up", "term", "--timeout", "90")
    while_running(again, lambda: lock_of(lab, nodes[0]) is not None, "up never held spark1")
    again.send_signal(signal.SIGTERM)
    assert finish(again).returncode != 0
    assert running_ids(lab, nodes, "term") == earlier  # the earlier deployment was not this up's to remove
    assert SERVED in models(f"http://{nodes[0].address}:8000")
    assert all(lock_of(lab, n) is None for n in nodes)
