"""The deploy actions: `up`, `down`, `ps` and `logs` of a deployment through a backend. Each returns data (a result
with every node's outcome); the CLI only formats it. No action knows which backend it drives."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator

from generator.deploy.backends.base import NOT_STARTED, UNREACHABLE, Backend, Outcome, RankState, Removal, container_logs
from generator.deploy.docker import merged_lines, output_of
from generator.deploy.findings import Finding, errors
from generator.deploy.group import GroupRecord
from generator.deploy.holder import Holder
from generator.deploy.lock import locks
from generator.deploy.preflight import nothing_built, preflight
from generator.deploy.probe import PROBE_TIMEOUT, ProbeResult, first_request
from generator.deploy.readiness import DeployFailed, wait_until_serving
from generator.deploy.targets import CompiledDeployment, Deployment, Target, each
from generator.plan.types import duration_seconds

if TYPE_CHECKING:
    from generator.deploy.router import RouterUp

LAST_LINES = 30  # of each rank's log, shown when `up` fails
LOG_PATIENCE = 3.0  # seconds a rank's empty log is asked again before it is shown empty
GONE_MARGIN = 60.0  # seconds `down` waits for the last container beyond the stop grace period


@dataclass(frozen=True)
class DownResult:
    project: str
    stopped: list[Outcome]  # each node's answer to the stop request
    left: dict[str, list[str]]  # node -> the recipe's containers still there after the bounded wait
    waited: float  # the bound, seconds

    @property
    def failed(self) -> list[str]:
        """Nodes where the recipe may still run: they refused to stop, or kept a container past the wait."""
        return [o.node for o in self.stopped if not o.ok or o.node in self.left]

    @property
    def ok(self) -> bool:
        return not self.failed


@dataclass(frozen=True)
class UpResult:
    project: str
    findings: list[Finding]  # the backend's and the nodes' preflight: errors mean nothing was started
    url: str | None = None  # where the model is served, when up succeeded
    failure: str | None = None  # why up failed after starting
    last_logs: dict[str, str] = field(default_factory=dict)  # node -> its rank's last log lines
    cleanup: list[Removal] | None = None  # what this up started, removed after a failure (None: --keep)
    probe: ProbeResult | None = None  # the first request's answer (None: --no-probe, or up failed)
    router: RouterUp | None = None  # the router step, after the recipe serves (None: no router routes it)

    @property
    def started(self) -> bool:
        return not errors(self.findings)

    @property
    def routed(self) -> bool:
        """The cluster's router (when one routes this recipe) routes to it: the one endpoint reaches it."""
        return self.router is None or self.router.ok

    @property
    def ok(self) -> bool:
        return self.started and self.failure is None


def check(dep: CompiledDeployment, backend: Backend,
          node_checks: Callable[[CompiledDeployment], list[Finding]] = preflight) -> list[Finding]:
    """Everything `up` checks before it starts anything: the backend can act from here, then every node at once
    (and what only the backend knows, e.g. another stack's claim on a node). Any error: nothing may start."""
    found = backend.ready(dep, change=True)
    if errors(found):
        return found
    nodes = node_checks(dep)
    return found + (nothing_built(nodes) if backend.name == "swarm" else nodes) + backend.preflight(dep)


def launch(dep: CompiledDeployment, backend: Backend, timeout: float, keep: bool,
           on_change: Callable[[str, str], None], checked: list[Finding],
           probe_timeout: float | None = PROBE_TIMEOUT,
           router: Callable[[CompiledDeployment], RouterUp | None] | None = None) -> UpResult:
    """Start every rank (at once), wait until the head serves, then send it one real request (unless
    probe_timeout is None), then `router` (the router step: generator/deploy/router.py's join). On failure: every rank's last log lines, then what this `up` started removed (unless
    keep): never an earlier deployment's containers. `checked`: what `check` found, without an error."""
    answer = None
    before = backend.existing(dep)
    try:
        refused = [o for o in backend.start(dep) if not o.ok]
        if refused:
            raise DeployFailed("; ".join(f"{o.node}: start failed: {o.error}" for o in refused))
        wait_until_serving(dep, backend, timeout, on_change)
        if probe_timeout is not None:
            answer = first_request(dep, probe_timeout, on_change)
    except (DeployFailed, KeyboardInterrupt) as exc:
        failure = str(exc) or "interrupted"
    except Exception as exc:  # noqa: BLE001 - a docker error mid-way: reported like the rest, then cleaned up
        failure = str(exc) or type(exc).__name__
    else:
        return UpResult(dep.project, checked, url=dep.url, probe=answer,
                        router=router(dep) if router is not None else None)
    logs = last_logs(dep)
    return UpResult(dep.project, checked, failure=failure, last_logs=logs,
                    cleanup=None if keep else backend.remove_new(dep, before))


def up(dep: CompiledDeployment, backend: Backend, timeout: float, keep: bool,
       on_change: Callable[[str, str], None],
       node_checks: Callable[[CompiledDeployment], list[Finding]] = preflight,
       probe_timeout: float | None = PROBE_TIMEOUT) -> UpResult:
    """`check`, then `launch` when nothing stands in the way."""
    found = check(dep, backend, node_checks)
    if errors(found):
        return UpResult(dep.project, found)
    return launch(dep, backend, timeout, keep, on_change, found, probe_timeout)


def down(dep: Deployment, backend: Backend) -> DownResult:
    """Stop the recipe on every node at once, then wait (bounded) until none of its containers is left on the
    nodes that answered: `down` returning means nothing of the recipe runs, or it says where something does."""
    bound = duration_seconds(dep.cluster.stop_grace_period) + GONE_MARGIN
    stopped = backend.stop(dep)
    answered = dep.only({o.node for o in stopped if o.ok})
    return DownResult(dep.project, stopped, backend.wait_gone(dep, answered, bound), bound)


@dataclass(frozen=True)
class PsResult:
    project: str
    ranks: list[RankState]
    held: dict[str, Holder] = field(default_factory=dict)  # node -> the recipegen command changing it now
    group: GroupRecord | None = None  # its group restarts, as the head's watch recorded them

    @property
    def unreachable(self) -> list[str]:
        return [r.node for r in self.ranks if r.state == "unreachable"]


def ps(dep: Deployment, backend: Backend) -> PsResult:
    held = {name: h for name, h in locks(dep.targets).items() if isinstance(h, Holder)}
    return PsResult(dep.project, backend.states(dep), held, backend.group(dep))


def up_bound(dep: CompiledDeployment, timeout: float) -> float:
    """The longest `up` can take (its lock's bound): preflight's trials, Compose's start (builds included), the
    wait, the cleanup."""
    return 180 + 1800 + timeout + down_bound(dep)


def down_bound(dep: Deployment) -> float:
    return duration_seconds(dep.cluster.stop_grace_period) + GONE_MARGIN + 120


@dataclass(frozen=True)
class LogStreams:
    commands: dict[str, list[str] | str]  # node -> the command streaming its log, or why there is none

    @property
    def failed(self) -> list[str]:
        return [n for n, c in self.commands.items() if isinstance(c, str) and c != NOT_STARTED]

    def lines(self) -> Iterator[tuple[str, str]]:
        """(node, line) as they arrive; a node without a log says why, once."""
        for name, command in self.commands.items():
            if isinstance(command, str):  # "unreachable: why" (the node did not answer), else why no container
                yield name, f"({command})" if command.startswith(UNREACHABLE) else f"(no container: {command})"
        yield from merged_lines({n: c for n, c in self.commands.items() if isinstance(c, list)})


def logs(dep: Deployment, backend: Backend, nodes: tuple[Target, ...], follow: bool, tail: int | None) -> LogStreams:
    return LogStreams(backend.log_commands(dep, nodes, follow, tail))


def last_logs(dep: Deployment, lines: int = LAST_LINES) -> dict[str, str]:
    """Every rank's last log lines, from its container on its node: a failed `up` shows them the same way
    whichever backend started the ranks (Compose and Swarm containers both carry the recipe's label). A log still
    empty is asked again for a moment: a rank that just started may not have said anything yet."""
    commands = container_logs(dep, dep.targets, follow=False, tail=lines)

    def read(target: Target) -> str:
        command = commands[target.name]
        if isinstance(command, str):
            return f"({command})"
        deadline = time.monotonic() + LOG_PATIENCE
        while not (text := output_of(command)) and time.monotonic() < deadline:
            time.sleep(0.5)
        return text

    texts = each(dep.targets, read)
    return {name: text if isinstance(text, str) else f"(logs unavailable: {text})" for name, text in texts.items()}
