"""Swarm: one stack (out/<id>/stack.yaml, a service per node) deployed, read and removed through a manager's
context. Containers are still looked for on each node's own context: only the nodes can say none is left."""

from __future__ import annotations

from generator.deploy import findings as codes
from generator.deploy.backends.base import Before, Outcome, RankState, Removal, since, wait_gone
from generator.deploy.docker import Docker, DockerError, Failure, JSONObject, reason
from generator.deploy.findings import Finding, Severity
from generator.deploy.group import GroupRecord
from generator.deploy.groupkey import group_key_env
from generator.deploy.names import NODE_LABEL, RECIPE_LABEL, stack_service
from generator.deploy.swarm_setup import find_manager
from generator.deploy.targets import CompiledDeployment, Deployment, Target, each
from generator.plan.types import GROUP_FOLLOWED, duration_seconds
from generator.resolve.model import Cluster, Node

# A task's state (docker's TaskState) as `ps` shows a rank: a finished task is a rank that exited.
_SHOWN = {"running": "running", "failed": "exited", "rejected": "exited", "complete": "exited",
          "shutdown": "exited", "orphaned": "exited"}


def _dict(value: object) -> JSONObject:
    return value if isinstance(value, dict) else {}


def task_state(node: str, context: str, service: str, rows: list[JSONObject], tasks: list[JSONObject],
               on_node: JSONObject | None = None) -> RankState:
    """A rank's row from its service's tasks: `docker service ps --format json` rows (names, desired state) and
    their `docker inspect --type task` objects (state, error, exit code and the time of the last change); and,
    when the node answered, its `docker inspect` of the current task's container (running? healthy?)."""
    by_id = {str(t.get("ID")): t for t in tasks}
    current = [r for r in rows if r.get("DesiredState") == "Running"] or rows[:1]
    if not current:
        return RankState(node, context, service, "missing", "no task")
    row = current[0]
    status = _dict(by_id.get(str(row.get("ID")), {}).get("Status"))
    state = str(status.get("State") or str(row.get("CurrentState", "")).split(" ")[0]).lower()
    shown, health = _SHOWN.get(state, state), "-"
    container = _dict(status.get("ContainerStatus"))
    started = str(status.get("Timestamp", ""))
    live = _dict((on_node or {}).get("State"))
    if live.get("Status") == "running":
        # The node's own view: Swarm holds a task `starting` until its healthcheck first passes (a head loading
        # its model, for minutes), though the container runs. Shown as Compose shows it: running, health starting.
        shown, started = "running", str(live.get("StartedAt", started))
        health = str(_dict(live.get("Health")).get("Status", "-"))
    failures = sum(1 for t in tasks if _dict(t.get("Status")).get("State") in ("failed", "rejected"))
    exit_code = container.get("ExitCode")
    said = str(status.get("Err") or "") or (f"exit {exit_code}" if shown == "exited" and exit_code is not None
                                            else str(status.get("Message") or state))
    last = _last_failure(tasks)
    if last and last != said:  # a replacement task says nothing of why its rank died: the failed one does
        said = f"{said}; before: {last}"
    ended = [_dict(_dict(t.get("Status")).get("ContainerStatus")).get("ExitCode") for t in tasks
             if _dict(t.get("Status")).get("State") in ("failed", "complete", "shutdown")]
    return RankState(node, context, str(row.get("Name", service)), shown, said, failures, health,
                     since(started) if shown == "running" else "-",
                     followed=bool(ended) and all(code == GROUP_FOLLOWED for code in ended))


def _on_node(target: Target, rows: list[JSONObject], tasks: list[JSONObject]) -> JSONObject | None:
    """The current task's container as its node sees it; None when there is none yet or the node is silent
    (the manager's view stands)."""
    current = {str(r.get("ID")) for r in rows if r.get("DesiredState") == "Running"}
    ids = [str(_dict(_dict(t.get("Status")).get("ContainerStatus")).get("ContainerID") or "")
           for t in tasks if str(t.get("ID")) in current]
    if not ids or not ids[0]:
        return None
    try:
        return target.docker.inspect_container(ids[0])
    except DockerError:
        return None


def _last_failure(tasks: list[JSONObject]) -> str:
    failed = [_dict(t.get("Status")) for t in tasks if _dict(t.get("Status")).get("State") in ("failed", "rejected")]
    latest = max(failed, key=lambda s: str(s.get("Timestamp", "")), default=None)
    return str(latest.get("Err") or latest.get("State")) if latest else ""


class SwarmBackend:
    name = "swarm"

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self._manager: Node | None = None

    @property
    def manager(self) -> Docker:
        if self._manager is None:
            self._manager = find_manager(self.cluster)[0]
        return Docker(self._manager.context)

    def ready(self, dep: Deployment, change: bool) -> list[Finding]:
        try:
            self._manager = find_manager(self.cluster)[0]
        except LookupError as exc:
            return [Finding("", Severity.ERROR, codes.NO_MANAGER, str(exc), "recipegen swarm setup --init")]
        return []

    def preflight(self, dep: CompiledDeployment) -> list[Finding]:
        """Two recipes never share a node: another stack's service placed on one of ours stops `up`."""
        mine = {t.name for t in dep.targets}
        return [Finding(node, Severity.ERROR, codes.NODE_CLAIMED, f"node is claimed by the stack of recipe '{other}'",
                        f"recipegen down --swarm {other}")
                for other, nodes in sorted(self._other_stacks(dep).items()) for node in sorted(nodes & mine)]

    def _other_stacks(self, dep: Deployment) -> dict[str, set[str]]:
        boss = self.manager
        claims: dict[str, set[str]] = {}
        services = boss.json_lines("service", "ls", "--filter", f"label={RECIPE_LABEL}", "--format", "{{json .}}")
        if not services:
            return claims
        for spec in boss.inspect("service", *[str(s["ID"]) for s in services]):
            labels = _dict(_dict(spec.get("Spec")).get("Labels"))
            recipe, node = labels.get(RECIPE_LABEL), labels.get(NODE_LABEL)
            if recipe and recipe != dep.project and node:
                claims.setdefault(str(recipe), set()).add(str(node))
        return claims

    def start(self, dep: CompiledDeployment) -> list[Outcome]:
        # An image made on the nodes is taken as they have it: a registry is never asked for its name.
        local = ("--resolve-image", "never") if dep.plan.head.local_image else ()
        return self._all(dep, "stack", "deploy", "--detach=true", *local, "-c", str(dep.stack_file), dep.project,
                         timeout=300, env=group_key_env(dep.project))  # the group's key (deploy/groupkey.py)

    def stop(self, dep: Deployment) -> list[Outcome]:
        return self._all(dep, "stack", "rm", dep.project, timeout=120)

    def _all(self, dep: Deployment, *args: str, timeout: float, env: dict[str, str] | None = None) -> list[Outcome]:
        """One manager call acts for every node: its outcome is theirs."""
        try:
            self.manager.run(*args, timeout=timeout, env=env)
        except (DockerError, LookupError) as exc:
            return [Outcome(t.name, reason(exc)) for t in dep.targets]
        return [Outcome(t.name) for t in dep.targets]

    def states(self, dep: Deployment) -> list[RankState]:
        boss = self.manager

        def state(target: Target) -> RankState:
            service = stack_service(dep.project, target.name)
            try:
                rows = boss.json_lines("service", "ps", service, "--no-trunc", "--format", "{{json .}}")
                tasks = boss.inspect("task", *[str(r["ID"]) for r in rows]) if rows else []
            except DockerError as exc:
                shown = "missing" if exc.failure is Failure.NOT_FOUND else "unreachable"
                return RankState(target.name, boss.context, service, shown, exc.short)
            return task_state(target.name, boss.context, service, rows, tasks, _on_node(target, rows, tasks))

        results = each(dep.targets, state)
        return [r if isinstance(r, RankState) else RankState(t.name, boss.context, "-", "unreachable", reason(r))
                for t, r in zip(dep.targets, results.values())]

    def log_commands(self, dep: Deployment, nodes: tuple[Target, ...], follow: bool, tail: int | None
                     ) -> dict[str, list[str] | str]:
        """The service's log through the manager: every task's, across replacements. (It omits a task still
        `starting`, its healthcheck pending: a failed `up` reads the nodes' containers instead, see actions.)"""
        options = [*(["-f"] if follow else []), *(["--tail", str(tail)] if tail is not None else [])]
        return {t.name: self.manager.command("service", "logs", "--raw", *options, stack_service(dep.project, t.name))
                for t in nodes}

    def group(self, dep: Deployment) -> GroupRecord | None:
        """None: each Swarm restart is a new task, a new container, so no watch keeps a record across them; Swarm
        keeps the tasks' history instead, which `ps --swarm` shows (restarts, each task's error)."""
        return None

    def wait_gone(self, dep: Deployment, nodes: tuple[Target, ...], timeout: float) -> dict[str, list[str]]:
        return wait_gone(dep, nodes, timeout)

    def existing(self, dep: Deployment) -> Before:
        """Each node's service of the stack, when there is one (its id). One service asked at a time: `docker
        service inspect a b` with b missing exits "no such service", which would read as none of them there."""
        try:
            boss = self.manager
        except LookupError:
            return {t.name: None for t in dep.targets}

        def service(target: Target) -> frozenset[str]:
            name = stack_service(dep.project, target.name)
            return frozenset(str(s.get("ID")) for s in boss.inspect("service", name)
                             if _dict(s.get("Spec")).get("Name") == name)

        found = each(dep.targets, service)
        return {name: None if isinstance(ids, Exception) else ids for name, ids in found.items()}

    def remove_new(self, dep: Deployment, before: Before) -> list[Removal]:
        """`docker service rm` of the services this `up` created; a service that was there before (updated by
        this `up`) stays: it was the earlier deployment's."""
        now = self.existing(dep)
        new = {n: ids - (before.get(n) or frozenset()) for n, ids in now.items()
               if ids is not None and before.get(n) is not None}
        gone = [i for ids in new.values() for i in ids]
        try:
            if gone:
                self.manager.run("service", "rm", *gone, timeout=120)
        except DockerError as exc:
            return [Removal(t.name, error=reason(exc)) for t in dep.targets]
        removed = dep.only({n for n, ids in new.items() if ids})
        left = wait_gone(dep, removed, 60 + duration_seconds(dep.cluster.stop_grace_period)) if removed else {}

        def outcome(target: Target) -> Removal:
            service = stack_service(dep.project, target.name)
            there = (service,) if now.get(target.name) else ()
            if before.get(target.name) is None:
                return Removal(target.name, kept=there, error="could not tell what ran before: left as is")
            if not new.get(target.name):
                return Removal(target.name, kept=there)
            still = left.get(target.name)
            return Removal(target.name, (service,), error=f"still there: {', '.join(still)}" if still else None)

        return [outcome(t) for t in dep.targets]
