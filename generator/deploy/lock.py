"""Mutual exclusion per node, kept by the nodes themselves: whatever changes a node (`up`, `down`, `models`,
`images`, `swarm setup`) first creates the container `recipegen-lock` on that node's engine. A container name is
unique per engine and creating one is all-or-nothing, so two deploying machines (or terminals) reaching the same
node through nothing but their Docker contexts cannot both hold it: no shared file, no SSH. The holder's facts
(recipe, command, host and machine id, pid, since, its own bound) are the container's labels; it never runs.

Nodes are taken in one fixed order (their fabric address), and a command that finds a node busy lets go of the
nodes it took before it waits: nobody holds one node while waiting for another, so there is no deadlock even
between cluster files that order the nodes differently. The wait is bounded (`--lock-wait`); the lock is let go
on every way out (success, failure, Ctrl-C, SIGTERM, SIGHUP). A holder killed outright (SIGKILL, a lost laptop)
leaves its lock: it is named as stale (its process on this host is gone, or it outlived the holder's own bound)
with the command that breaks it (`recipegen unlock NODE`). Who holds a lock and whether they are gone:
generator/deploy/holder.py.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import tarfile
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Iterator, Sequence

from generator.deploy.docker import DockerError, Failure, reason
from generator.deploy.holder import (BOUND, COMMAND, HOST, INVOCATION, MACHINE, PID, PID_START, RECIPE, SINCE, Holder,
                                     holder_from, machine_id, process_start, stale)
from generator.deploy.names import LOCK_CONTAINER, LOCK_IMAGE, RECIPE_LABEL
from generator.deploy.targets import OnNode, each

POLL = 1.0  # seconds between looks while waiting for a busy node


@dataclass(frozen=True)
class Claim:
    """What this invocation writes on each node it holds."""

    recipe: str  # "" for a command acting on the cluster (swarm setup)
    command: str  # as a person would type it: "recipegen up vllm2"
    bound: float | None = None  # seconds this command may take at most (None: no bound it can promise)
    invocation: str = ""
    host: str = ""
    pid: int = 0
    machine: str = ""

    @staticmethod
    def of(recipe: str, command: str, bound: float | None = None) -> Claim:
        return Claim(recipe, command, bound, uuid.uuid4().hex, socket.gethostname(), os.getpid(), machine_id())


class NodesBusy(Exception):
    """A node stayed held by another command for the whole wait: nothing was taken."""

    def __init__(self, holders: list[Holder], waited: float):
        self.holders, self.waited = holders, waited
        super().__init__("; ".join(f"{h.node} is busy: {h.describe()}" for h in holders))


@dataclass
class Held:
    """The nodes this invocation holds; `skipped`: nodes that did not answer (nothing can change them either:
    the command itself reports them)."""

    claim: Claim
    nodes: list[tuple[OnNode, str]]  # (node, lock container id), in the order taken
    skipped: dict[str, str]
    unsure: list[OnNode] = field(default_factory=list)  # skipped, but the engine may have created the lock late

    def release(self) -> None:
        """Remove this invocation's lock containers, by id: never a lock someone else took since."""
        each(list(self.nodes), lambda item: _remove(item[0], item[1]), key=lambda item: item[0].name)
        if self.unsure:
            _release_mine(self.unsure, self.claim)
        self.nodes, self.unsure = [], []


def ordered(nodes: Sequence[OnNode]) -> list[OnNode]:
    """The one order every command takes nodes in: by fabric address (the same node has the same address in
    every cluster file of the cluster), then name."""
    unique: dict[str, OnNode] = {}
    for n in nodes:
        unique.setdefault(n.node.context, n)  # two names for one engine: one lock, taken once
    return sorted(unique.values(), key=lambda n: (n.node.address, n.name))


def acquire(nodes: Sequence[OnNode], claim: Claim, wait: float = 0.0) -> Held:
    """Take every node's lock, in order; a busy node: let go of what was taken, wait and start again, until
    `wait` seconds are up (then NodesBusy naming each holder)."""
    deadline = time.monotonic() + wait
    while True:
        held = Held(claim, [], {})
        busy: Holder | None = None
        try:
            for node in ordered(nodes):
                taken = _take(node, claim)
                if isinstance(taken, Holder):
                    busy = taken
                    break
                if isinstance(taken, Silent):
                    held.skipped[node.name] = taken.why
                    if taken.maybe_taken:
                        held.unsure.append(node)
                elif taken is not None:
                    held.nodes.append((node, taken))
        except BaseException:  # Ctrl-C, SIGTERM: maybe between a create the engine did and its id reaching us
            held.release()
            _release_mine(ordered(nodes), claim)
            raise
        if busy is None:
            return held
        held.release()
        if time.monotonic() >= deadline:
            others = [h for h in locks(ordered(nodes)).values()  # a node gone silent meanwhile: not named
                      if isinstance(h, Holder) and h.invocation != claim.invocation]
            raise NodesBusy(others or [busy], wait)
        time.sleep(min(POLL, max(0.0, deadline - time.monotonic())))


@contextlib.contextmanager
def holding(nodes: Sequence[OnNode], claim: Claim, wait: float = 0.0) -> Iterator[Held]:
    """`acquire`, then the command; released however it ends. SIGTERM and SIGHUP become KeyboardInterrupt
    meanwhile, so a killed terminal or a CI timeout unwinds (and cleans up) as Ctrl-C does."""
    with _signals_interrupt():
        held = acquire(nodes, claim, wait)
        try:
            yield held
        finally:
            held.release()


@dataclass(frozen=True)
class Silent:
    """A node that did not answer the lock: why. `maybe_taken`: the create itself timed out; killing the CLI does
    not stop the daemon, so the lock may still appear: it is looked for (by this invocation's label) on release."""

    why: str
    maybe_taken: bool = False


def _take(node: OnNode, claim: Claim) -> str | Holder | Silent | None:
    """The lock container's id once created; the Holder when another command has it; Silent when the node does
    not answer; None when this invocation holds it already."""
    labels = {RECIPE: claim.recipe, COMMAND: claim.command, HOST: claim.host, MACHINE: claim.machine,
              PID: str(claim.pid),
              PID_START: process_start(claim.pid), SINCE: datetime.now(timezone.utc).isoformat(timespec="seconds"),
              BOUND: "" if claim.bound is None else f"{claim.bound:.0f}", INVOCATION: claim.invocation}
    args = ["create", "--name", LOCK_CONTAINER, "--pull", "never", "--network", "none",
            *[a for k, v in labels.items() for a in ("--label", f"{k}={v}")], LOCK_IMAGE]
    for _ in range(3):  # a holder may go between our create and our look at it: then try again
        try:  # the node may stop answering at any of these calls: Silent, as when it never answered
            try:
                return node.docker.run(*args, timeout=20).strip()
            except DockerError as exc:
                if exc.failure is Failure.NOT_FOUND:
                    _make_image(node)
                    continue
                if exc.failure is Failure.TIMEOUT:
                    return Silent(reason(exc), maybe_taken=True)
                if exc.failure is not Failure.CONFLICT:
                    raise
            holder = read(node)
        except DockerError as exc:
            if exc.failure in (Failure.UNREACHABLE, Failure.TIMEOUT, Failure.NO_CONTEXT):
                return Silent(reason(exc))
            raise
        if holder is not None:
            return None if holder.invocation == claim.invocation else holder
    return Silent("the lock container kept appearing and vanishing")


def _release_mine(nodes: Sequence[OnNode], claim: Claim) -> None:
    """Remove every lock of this invocation, found by its label: the ones whose creation was cut short too."""
    def mine(node: OnNode) -> None:
        holder = read(node)
        if holder is not None and holder.invocation == claim.invocation:
            _remove(node, holder.container_id)

    each(list(nodes), mine)


def _make_image(node: OnNode) -> None:
    """The lock's empty image, from an empty tar: nothing to pull, nothing that could run."""
    empty = io.BytesIO()
    tarfile.open(fileobj=empty, mode="w").close()
    node.docker.run("import", "--change", 'CMD ["hold"]', "-", LOCK_IMAGE, input=empty.getvalue(), timeout=60)


def _remove(node: OnNode, container_id: str) -> None:
    try:
        node.docker.run("rm", "-f", container_id, timeout=30)
    except DockerError:
        pass  # the node went away: its lock is reported stale later (this host's pid is gone)


def read(node: OnNode) -> Holder | None:
    """The node's lock, judged: None when nobody holds it."""
    info = node.docker.inspect_container(LOCK_CONTAINER)
    if info is None:
        return None
    config = info.get("Config")
    labels = config.get("Labels") if isinstance(config, dict) else None
    labels = labels if isinstance(labels, dict) else {}
    holder = holder_from(node.name, str(info.get("Id", "")), {str(k): str(v) for k, v in labels.items()})
    running = _running(node, holder.recipe) if holder.recipe else 0
    return replace(holder, stale=stale(holder), running=running)


def _running(node: OnNode, recipe: str) -> int:
    try:
        rows = node.docker.containers(f"{RECIPE_LABEL}={recipe}", timeout=15)
    except DockerError:
        return 0
    return sum(1 for row in rows if row.get("State") == "running")


def break_lock(node: OnNode, holder: Holder) -> None:
    """Remove the lock that `holder` describes (by its container id: a lock taken since stays)."""
    node.docker.run("rm", "-f", holder.container_id, timeout=30)


def unlock_hint(nodes: Sequence[str], cluster_option: str = "") -> str:
    return f"recipegen unlock {' '.join(nodes)}{cluster_option}"


def busy_lines(exc: NodesBusy, cluster_option: str = "") -> list[str]:
    """What a refused command says: each holder, and for a stale one, why and how to break it."""
    lines = []
    for h in exc.holders:
        waited = f" (waited {exc.waited:.0f}s)" if exc.waited else ""
        line = f"{h.node}: busy{waited}: held by {h.describe()}"
        if h.recipe:
            line += f"; {h.running} container(s) of '{h.recipe}' running there"
        if h.stale:
            line += f"; the lock looks stale: {h.stale}; break it with `{unlock_hint([h.node], cluster_option)}`"
        else:
            line += " (wait for it, or give --lock-wait SECONDS)"
        lines.append(line)
    return lines


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def locks(nodes: Sequence[OnNode]) -> dict[str, Holder | None | Exception]:
    """Every node's lock at once (ps, unlock): the holder, None when free, or why the node did not answer."""
    return each(list(nodes), read)


__all__ = ["Claim", "Held", "LOCK_CONTAINER", "NodesBusy", "acquire", "break_lock", "busy_lines", "holding", "locks",
           "ordered", "read", "unlock_hint"]
