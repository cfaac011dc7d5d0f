"""The one interface `up`, `down`, `ps` and `logs` drive: Compose (a project per node, through each node's
context) and Swarm (one stack, through a manager) both implement it, so the actions never ask which one runs."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Protocol

from generator.deploy.docker import JSONObject, node_reason, reason
from generator.deploy.findings import Finding
from generator.deploy.group import GroupRecord
from generator.deploy.targets import CompiledDeployment, Deployment, Target, each

GONE_POLL = 0.5  # seconds between looks while waiting for a recipe's containers to be removed


@dataclass(frozen=True)
class RankState:
    node: str
    context: str
    container: str
    state: str  # running, exited, restarting, created, missing, unreachable
    status: str  # what else there is to say: "exit 1 at 17:02:03", docker's error, a task's state
    restarts: int = 0
    health: str = "-"  # the image's healthcheck, when it has one
    uptime: str = "-"
    followed: bool = False  # it stopped because another rank of its group ended (the group watch said so)

    @property
    def failed(self) -> bool:
        return self.state in ("exited", "dead", "restarting", "missing") or self.restarts > 0


@dataclass(frozen=True)
class Outcome:
    """What one node made of a step: done (error None) or why not."""

    node: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Removal:
    """What a failed `up`'s cleanup did on one node: removed what this `up` started, left what was there before
    (an earlier deployment of the recipe), or failed."""

    node: str
    removed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    error: str | None = None


Before = dict[str, "frozenset[str] | None"]  # node -> ids of the recipe's objects there (None: the node did not say)


class Backend(Protocol):
    name: str

    def ready(self, dep: Deployment, change: bool) -> list[Finding]:
        """Can this backend read (change=False) or change (True) the deployment from here: errors say why not."""
        ...

    def preflight(self, dep: CompiledDeployment) -> list[Finding]:
        """What only this backend checks before `up` (the nodes' own checks are generator.deploy.preflight)."""
        ...

    def start(self, dep: CompiledDeployment) -> list[Outcome]:
        ...

    def states(self, dep: Deployment) -> list[RankState]:
        """One row per rank, head first."""
        ...

    def log_commands(self, dep: Deployment, nodes: tuple[Target, ...], follow: bool, tail: int | None
                     ) -> dict[str, list[str] | str]:
        """The docker command printing each node's rank log, or why there is none ("not started": nothing ran)."""
        ...

    def group(self, dep: Deployment) -> GroupRecord | None:
        """The group restarts the head's group watch recorded; None when there is no record to read."""
        ...

    def stop(self, dep: Deployment) -> list[Outcome]:
        """Ask every node to stop and remove the recipe's ranks; it may return before they are gone."""
        ...

    def wait_gone(self, dep: Deployment, nodes: tuple[Target, ...], timeout: float) -> dict[str, list[str]]:
        """Wait until no container of the recipe is left on those nodes; what is still there after timeout."""
        ...

    def existing(self, dep: Deployment) -> Before:
        """What of the recipe is on each node now (container ids; a stack's services): `up` reads it before it
        starts anything, so that its cleanup removes only what it started."""
        ...

    def remove_new(self, dep: Deployment, before: Before) -> list[Removal]:
        """Remove what is there now and was not `before`; leave the rest (and all of a node that did not say)."""
        ...


NOT_STARTED = "not started"
UNREACHABLE = "unreachable"  # a log command's stand-in: the node's context gave no answer
_FINISHED = ("exited", "dead")


def container_logs(dep: Deployment, nodes: tuple[Target, ...], follow: bool, tail: int | None
                   ) -> dict[str, list[str] | str]:
    """`docker logs` of each node's rank container, asked of the node itself (Compose and Swarm containers both
    carry the recipe label). Where a rank died and was replaced (Swarm keeps the dead task's container), the dead
    one's log says why: it is chosen over the newer one; otherwise the newest."""
    def pick(target: Target) -> str | None:
        rows = target.docker.containers(dep.label)  # newest first
        chosen = next((r for r in rows if r.get("State") in _FINISHED), rows[0] if rows else None)
        return str(chosen["ID"]) if chosen else None

    ids = each(nodes, pick)
    commands: dict[str, list[str] | str] = {}
    for target in nodes:
        cid = ids[target.name]
        if isinstance(cid, Exception):
            commands[target.name] = f"{UNREACHABLE}: {node_reason(target.node.context, cid)}"
        elif not cid:
            commands[target.name] = NOT_STARTED
        else:
            commands[target.name] = target.docker.command(
                "logs", *(["-f"] if follow else []), *(["--tail", str(tail)] if tail is not None else []), cid)
    return commands


def leftovers(target: Target, label: str, lasting: Callable[[JSONObject], str] | None = None
              ) -> tuple[list[str], bool]:
    """Names of the recipe's containers on one node, running or not, and whether waiting may see them go: a
    container `lasting` names (with why it stays) will not, and is named with its reason."""
    names, waitable = [], False
    for row in target.docker.containers(label, timeout=15):
        name, why = str(row.get("Names", row.get("ID", "?"))), lasting(row) if lasting is not None else ""
        names.append(f"{name} ({why})" if why else name)
        waitable = waitable or not why
    return names, waitable


def wait_gone(dep: Deployment, nodes: tuple[Target, ...], timeout: float,
              lasting: Callable[[JSONObject], str] | None = None) -> dict[str, list[str]]:
    """Poll every node (at once) until none has a container of the recipe, at most `timeout` seconds. A node that
    stops answering is reported at once: nobody can say its containers are gone, and waiting will not tell. Nor is
    a node waited for whose every container left is one this stop cannot remove (`lasting` says why)."""
    deadline = time.monotonic() + timeout
    left: dict[str, list[str]] = {}
    pending = list(nodes)
    while pending:
        found = each(pending, lambda t: leftovers(t, dep.label, lasting))
        for target in pending:
            result = found[target.name]
            left[target.name] = [f"(no answer: {reason(result)})"] if isinstance(result, Exception) else result[0]
        pending = [t for t in pending if not isinstance(result := found[t.name], Exception) and result[1]]
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(GONE_POLL)
    return {name: names for name, names in left.items() if names}


def since(started: str | None) -> str:
    """Docker's timestamps (RFC 3339, nanoseconds: a container's StartedAt, a task's Status.Timestamp) as an
    uptime: 3d 4h, 2h 5m, 7m 12s, 40s."""
    try:
        moment = datetime.fromisoformat((started or "")[:19]).replace(tzinfo=timezone.utc)
    except ValueError:
        return "-"
    if moment.year < 2000:  # docker's zero time: never started
        return "-"
    seconds = max(0, int((datetime.now(timezone.utc) - moment).total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (seconds, "s")]
    shown = [f"{n}{unit}" for n, unit in parts if n]
    return " ".join(shown[:2]) or "0s"
