"""A deployment's group restarts as its head's group watch recorded them (runtime/groupwatch.py, `restart =
"group"`): read from the head's container with `docker cp` (it works on a stopped container too), for `ps`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from generator.deploy.docker import DockerError
from generator.deploy.targets import Target
from generator.plan.types import GROUP_STATE


@dataclass(frozen=True)
class GroupRecord:
    restarts: int  # every group restart the head's container saw
    recent: int  # those within the bound's window
    limit: int | None
    window_s: float | None
    last_time: float | None
    last_reason: str
    last_line: str  # the failing engine's last error line
    last_node: str  # the node whose rank caused the last restart
    by_rank: tuple[tuple[str, int], ...]  # ("rank 1 (spark2)", restarts it caused), most first
    halted: str | None  # why the group stopped for good, when it did
    last_cause: str = ""  # the last restart's kind: wedged, exited, health-lost, node-stopped, lost-peer, killed ...
    by_cause: tuple[tuple[str, int], ...] = ()  # (kind, restarts of that kind), most first
    memory_wait: str = ""  # the last wait for the node's memory before the group met again, said in a line

    @classmethod
    def from_state(cls, data: dict[str, Any], now: float | None = None) -> "GroupRecord":
        restarts = [r for r in data.get("restarts") or [] if isinstance(r, dict)]
        bound = data.get("bound") or [None, None]
        window = bound[1]
        now = time.time() if now is None else now
        counts: dict[str, int] = {}
        causes: dict[str, int] = {}
        for r in restarts:
            who = f"rank {r.get('rank')} ({r.get('node')})"
            counts[who] = counts.get(who, 0) + 1
            causes[str(r.get("cause", "exited"))] = causes.get(str(r.get("cause", "exited")), 0) + 1
        last = restarts[-1] if restarts else {}
        halted = data.get("halted")
        return cls(len(restarts), sum(1 for r in restarts if window is None or r.get("time", 0) >= now - window),
                   bound[0], window, last.get("time"), str(last.get("reason", "")), str(last.get("line", "")),
                   str(last.get("node", "")),
                   tuple(sorted(counts.items(), key=lambda kv: -kv[1])),
                   str(halted.get("reason")) if isinstance(halted, dict) else None,
                   str(last.get("cause", "exited")) if last else "",
                   tuple(sorted(causes.items(), key=lambda kv: -kv[1])), _memory_wait(data.get("memory_wait")))


def _memory_wait(wait: Any) -> str:
    """The head's last wait for memory before its group met again, as ps says it ("" when it did not wait)."""
    if not isinstance(wait, dict) or not isinstance(wait.get("waited"), (int, float)) or wait["waited"] < 2:
        return ""
    def gib(value: Any) -> str:
        return f"{value / 2**30:.1f} GiB" if isinstance(value, (int, float)) else "?"

    verdict = "came back" if wait.get("back") else "was still short"
    return (f"memory {verdict} after {wait['waited']:.0f}s before the group met again ({gib(wait.get('available'))} "
            f"available, {gib(wait.get('before'))} before the first boot)")


def read_group(target: Target, container: str) -> GroupRecord | None:
    """The record in `container` on target's node; None when there is none (no restart yet, no watch, no
    container)."""
    try:
        text = target.docker.copy_out(container, GROUP_STATE, timeout=20)
    except DockerError:
        return None
    try:
        data = json.loads(text) if text is not None else None
    except ValueError:
        return None
    return GroupRecord.from_state(data) if isinstance(data, dict) else None
