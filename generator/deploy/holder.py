"""A node lock's holder (generator/deploy/lock.py): the facts the lock container's labels carry, how they are
read back, and whether the holder is gone (`stale`): its process on this machine has ended, or it has outlived
the bound it wrote.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timezone

from generator.plan.types import LABEL_PREFIX

_L = f"{LABEL_PREFIX}.lock"
RECIPE, COMMAND, HOST, MACHINE, PID, PID_START, SINCE, BOUND, INVOCATION = (
    f"{_L}.{k}" for k in ("recipe", "command", "host", "machine", "pid", "pid-start", "since", "bound", "invocation"))

@dataclass(frozen=True)
class Holder:
    """A lock found on a node: who holds it, and whether that holder is likely gone (`stale`: why, or None)."""

    node: str
    container_id: str
    recipe: str
    command: str
    host: str
    pid: int
    since: datetime | None
    bound: float | None
    invocation: str
    pid_start: str = ""  # the process's start time on its host: a pid reused by another process has another
    machine: str = ""  # /etc/machine-id of its host: two machines may share a host name, not this
    stale: str | None = None
    running: int = 0  # containers of the holder's recipe running on the node

    def age(self, now: datetime | None = None) -> float:
        if self.since is None:
            return 0.0
        return max(0.0, ((now or datetime.now(timezone.utc)) - self.since).total_seconds())

    def describe(self) -> str:
        """'`recipegen up x` from host h (pid 12), since 18:40:01 UTC (3m 2s ago)'."""
        when = f"since {self.since:%Y-%m-%d %H:%M:%S} UTC ({span(self.age())} ago)" if self.since else "since ?"
        return f"`{self.command}` from host {self.host} (pid {self.pid}), {when}"


def holder_from(node: str, container_id: str, labels: dict[str, str]) -> Holder:
    try:
        since: datetime | None = datetime.fromisoformat(labels.get(SINCE, ""))
    except ValueError:
        since = None
    bound = labels.get(BOUND, "")
    pid = labels.get(PID, "0")
    return Holder(node, container_id, labels.get(RECIPE, ""), labels.get(COMMAND, "?"), labels.get(HOST, "?"),
                  int(pid) if pid.isdigit() else 0, since, float(bound) if bound.isdigit() else None,
                  labels.get(INVOCATION, ""), labels.get(PID_START, ""), labels.get(MACHINE, ""))


def machine_id() -> str:
    try:
        with open("/etc/machine-id", encoding="ascii", errors="replace") as found:
            return found.read().strip()
    except OSError:
        return ""


def stale(holder: Holder, now: datetime | None = None) -> str | None:
    """Why the holder is gone, or None when it may still work. Certain on its own host (its process is gone, or
    the pid is another process now); elsewhere, by age: it outlived the bound it wrote."""
    here = machine_id()
    # Pids are judged only on the holder's own machine. Where either side has a machine id, the ids decide: a
    # host-network container shares its host's name but not its pids, and has no /etc/machine-id of its own.
    same = holder.machine == here if holder.machine or here else holder.host == socket.gethostname()
    if same and holder.pid:
        if not _alive(holder.pid) or process_start(holder.pid) not in (holder.pid_start, ""):
            return f"its process {holder.pid} on {holder.host} is gone"
    if holder.bound is not None and holder.age(now) > holder.bound:
        return f"held {span(holder.age(now))}, longer than its own bound of {span(holder.bound)}"
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_start(pid: int) -> str:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22): a pid reused by another
    process has another. "" where /proc does not say."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat:
            return stat.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return ""


def span(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes}m" if hours else f"{minutes}m {secs}s" if minutes else f"{secs}s"
