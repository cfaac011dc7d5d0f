"""up / down / ps / logs of a compiled recipe across its nodes. Every step runs on all nodes at once and
returns data; the CLI prints it."""

from __future__ import annotations

import json
import queue
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Iterator

from generator.deploy.docker import DockerError, reason
from generator.deploy.targets import Deployment, Target, each

READY_POLL_FIRST, READY_POLL_MAX = 0.2, 2.0  # seconds: quick at first, then gentle on the nodes


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

    @property
    def failed(self) -> bool:
        return self.state in ("exited", "dead", "restarting", "missing") or self.restarts > 0


class DeployFailed(Exception):
    """`up` cannot finish: a rank died, the head never served, a node refused to start."""


def rank_states(dep: Deployment) -> list[RankState]:
    """Each rank's container, one `docker inspect` per node (Compose names it <project>-engine-1)."""
    name = f"{dep.project}-engine-1"

    def state(target: Target) -> RankState:
        ctx = target.node.context
        try:
            info = target.docker.inspect_container(name)
        except DockerError as exc:
            return RankState(target.name, ctx, "-", "unreachable", exc.detail)
        if info is None:
            return RankState(target.name, ctx, "-", "missing", "no container")
        st = info.get("State", {})
        status = st.get("Status", "?")
        detail = f"exit {st.get('ExitCode')} at {st.get('FinishedAt', '?')[:19]}" if status == "exited" else ""
        restarts = int(info.get("RestartCount", 0))
        return RankState(target.name, ctx, info.get("Name", name).lstrip("/"), status,
                         detail + (f" after {restarts} restart(s)" if restarts else ""), restarts,
                         (st.get("Health") or {}).get("Status", "-"),
                         _since(st.get("StartedAt")) if status == "running" else "-")

    results = each(dep.targets, state)
    return [r if isinstance(r, RankState) else RankState(t.name, t.node.context, "-", "unreachable", str(r))
            for t, r in zip(dep.targets, results.values())]


def start(dep: Deployment) -> dict[str, str | None]:
    """`compose up -d` on every node at once; returns each node's error or None. A second `up` of the same
    files leaves the running containers alone (same project, same configuration)."""
    def up(target: Target) -> None:
        target.docker.compose(str(target.compose_file), "up", "-d", "--remove-orphans", timeout=1800)

    return {name: (None if r is None else reason(r)) for name, r in each(dep.targets, up).items()}


def stop(dep: Deployment) -> dict[str, str | None]:
    """`compose down` on every node at once; a node that does not answer is reported, the others cleaned."""
    grace = _seconds(dep.cluster.stop_grace_period)

    def down(target: Target) -> None:
        target.docker.server_version()
        if target.compose_file.is_file():
            target.docker.compose(str(target.compose_file), "down", "--remove-orphans", "--timeout", str(grace),
                                  project=dep.project, timeout=grace + 120)
            return
        with tempfile.TemporaryDirectory() as empty:  # by project name only: no compose.yaml of the cwd
            target.docker.compose("", "--project-directory", empty, "down", "--remove-orphans", "--timeout",
                                  str(grace), project=dep.project, timeout=grace + 120)

    return {name: (None if r is None else reason(r)) for name, r in each(dep.targets, down).items()}


def last_logs(dep: Deployment, lines: int = 30) -> dict[str, str]:
    def tail(target: Target) -> str:
        rows = target.docker.containers(dep.label)
        return target.docker.logs_tail(rows[0]["ID"], lines) if rows else "(no container)"

    return {name: (r if isinstance(r, str) else f"(logs unavailable: {reason(r)})")
            for name, r in each(dep.targets, tail).items()}


def wait_until_serving(dep: Deployment, timeout: float, on_change: Callable[[str, str], None],
                       states: Callable[[Deployment], list[RankState]] | None = None) -> None:
    """Poll until the head answers /health and /v1/models lists the served model; fail as soon as a rank dies.
    `states` reads the ranks (per-node containers by default, a Swarm stack's tasks with --swarm)."""
    states = states or rank_states
    deadline = time.monotonic() + timeout
    pause = READY_POLL_FIRST
    seen: dict[str, str] = {}
    phase = "starting"
    while True:
        for rank in states(dep):
            shown = rank.state + (f" ({rank.restarts} restarts)" if rank.restarts else "")
            if seen.get(rank.node) != shown:
                seen[rank.node] = shown
                on_change(rank.node, shown)
            if rank.failed:
                raise DeployFailed(f"rank on {rank.node} is {rank.state}: {rank.status}")
        health = _get(f"{dep.url}/health")
        if health is not None and phase == "starting":
            phase = "healthy"
            on_change(dep.head.name, "/health answers")
        if health is not None:
            models = _get(f"{dep.url}/v1/models")
            if models and dep.plan.served_model_name in _model_ids(models):
                on_change(dep.head.name, f"serving {dep.plan.served_model_name} at {dep.url}")
                return
        if time.monotonic() > deadline:
            raise DeployFailed(f"the head did not serve {dep.plan.served_model_name} at {dep.url} "
                               f"within {timeout:.0f}s")
        time.sleep(pause)
        pause = min(pause * 1.5, READY_POLL_MAX)


def log_commands(dep: Deployment, follow: bool, tail: int | None, nodes: set[str] | None) -> dict[str, list[str] | str]:
    """The `docker logs` command of each chosen node's container (or why there is none)."""
    targets = [t for t in dep.targets if nodes is None or t.name in nodes]
    ids = each(targets, lambda t: (t.docker.containers(dep.label) or [{}])[0].get("ID"))
    commands: dict[str, list[str] | str] = {}
    for target in targets:
        cid = ids[target.name]
        if not isinstance(cid, str):
            commands[target.name] = reason(cid) if isinstance(cid, BaseException) else "not started"
            continue
        commands[target.name] = target.docker.command(
            "logs", *(["-f"] if follow else []), *(["--tail", str(tail)] if tail is not None else []), cid)
    return commands


def follow_logs(commands: dict[str, list[str] | str]) -> Iterator[tuple[str, str]]:
    """Merged output lines of one log command per node, as (node, line), in the order they arrive."""
    lines: queue.Queue = queue.Queue()
    procs: list[subprocess.Popen] = []

    def pump(name: str, proc: subprocess.Popen) -> None:
        for raw in iter(proc.stdout.readline, b""):
            lines.put((name, raw.decode("utf-8", errors="replace").rstrip("\n")))
        proc.wait()
        lines.put((name, None))

    for name, command in commands.items():
        if isinstance(command, str):
            yield name, f"(no container: {command})"
            continue
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs.append(proc)
        threading.Thread(target=pump, args=(name, proc), daemon=True).start()
    open_streams = len(procs)
    try:
        while open_streams:
            name, line = lines.get()
            if line is None:
                open_streams -= 1
            else:
                yield name, line
    finally:
        for proc in procs:
            proc.kill() if proc.poll() is None else None


# The head is asked directly: an http_proxy in the environment must not answer for it.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str) -> bytes | None:
    try:
        with _DIRECT.open(url, timeout=3) as response:
            return response.read() if response.status == 200 else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _since(started: str | None) -> str:
    """Docker's StartedAt (RFC 3339, nanoseconds) as an uptime: 3d 4h, 2h 5m, 7m 12s, 40s."""
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


def _model_ids(body: bytes) -> set[str]:
    try:
        return {m.get("id") for m in json.loads(body).get("data", [])}
    except (ValueError, AttributeError, TypeError):
        return set()


def _seconds(duration: str) -> int:
    import re

    total = 0.0
    for number, unit in re.findall(r"([0-9.]+)(us|ms|s|m|h)", duration):
        total += float(number) * {"us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}[unit]
    return max(1, int(total))
