"""Compose: one project per node (the recipe id), started and stopped through each node's own context."""

from __future__ import annotations

import tempfile

from generator.deploy import findings as codes
from generator.deploy.backends.base import (Before, Outcome, RankState, Removal, container_logs, since, wait_gone)
from generator.deploy.docker import DockerError, JSONObject, compose_missing, reason
from generator.deploy.findings import Finding, Severity
from generator.deploy.group import GroupRecord, read_group
from generator.deploy.groupkey import group_key_env
from generator.deploy.names import container_name
from generator.deploy.requirements import check_compose
from generator.deploy.targets import CompiledDeployment, Deployment, OnNode, Target, each
from generator.plan.types import GROUP_FOLLOWED, duration_seconds


def rank_state(target: OnNode, name: str, info: JSONObject | None) -> RankState:
    """A rank's row from its container's `docker inspect` (None: no such container)."""
    ctx = target.node.context
    if info is None:
        return RankState(target.name, ctx, "-", "missing", "no container")
    st = info.get("State")
    st = st if isinstance(st, dict) else {}
    status = str(st.get("Status", "?"))
    detail = f"exit {st.get('ExitCode')} at {str(st.get('FinishedAt', '?'))[:19]}" if status == "exited" else ""
    restarts = int(str(info.get("RestartCount", 0)))
    health = st.get("Health")
    return RankState(target.name, ctx, str(info.get("Name", name)).lstrip("/"), status,
                     detail + (f" after {restarts} restart(s)" if restarts else ""), restarts,
                     str(health.get("Status", "-")) if isinstance(health, dict) else "-",
                     since(str(st.get("StartedAt", ""))) if status == "running" else "-",
                     followed=st.get("ExitCode") == GROUP_FOLLOWED)


class ComposeBackend:
    name = "compose"

    def ready(self, dep: Deployment, change: bool) -> list[Finding]:
        """Changing (up, down) needs the Compose plugin, as new as the files' headers say; reading needs plain
        docker only."""
        if not change:
            return []
        missing = compose_missing()
        if missing:
            return [Finding("", Severity.ERROR, codes.COMPOSE_MISSING, missing)]
        old = check_compose([t.compose_file for t in dep.targets])
        return [old] if old else []

    def preflight(self, dep: CompiledDeployment) -> list[Finding]:
        return []  # a node running another recipe is caught by the nodes' own preflight

    def start(self, dep: CompiledDeployment) -> list[Outcome]:
        """`compose up -d` on every node at once. A second `up` of the same files leaves the running containers
        alone (same project, same configuration)."""
        env = group_key_env(dep.project)  # the group's key: from this shell, never from a file (deploy/groupkey.py)

        def up(target: Target) -> None:
            target.docker.compose(str(target.compose_file), "up", "-d", "--remove-orphans", timeout=1800, env=env)

        return _outcomes(dep.targets, each(dep.targets, up))

    def states(self, dep: Deployment) -> list[RankState]:
        """Each rank's container, one `docker inspect` per node."""
        name = container_name(dep.project)

        def state(target: Target) -> RankState:
            try:
                return rank_state(target, name, target.docker.inspect_container(name))
            except DockerError as exc:
                return RankState(target.name, target.node.context, "-", "unreachable", exc.short)

        results = each(dep.targets, state)
        return [r if isinstance(r, RankState) else RankState(t.name, t.node.context, "-", "unreachable", reason(r))
                for t, r in zip(dep.targets, results.values())]

    def log_commands(self, dep: Deployment, nodes: tuple[Target, ...], follow: bool, tail: int | None
                     ) -> dict[str, list[str] | str]:
        return container_logs(dep, nodes, follow, tail)

    def group(self, dep: Deployment) -> GroupRecord | None:
        """The head's container keeps its watch's record across its restarts (a reboot's too)."""
        return read_group(dep.targets[0], container_name(dep.project))

    def stop(self, dep: Deployment) -> list[Outcome]:
        """`compose down` on every node at once; a node that does not answer is reported, the others cleaned."""
        grace = _grace(dep)

        def down(target: Target) -> None:
            target.docker.server_version()
            if target.compose_file.is_file():
                target.docker.compose(str(target.compose_file), "down", "--remove-orphans", "--timeout", str(grace),
                                      project=dep.project, timeout=grace + 120)
                return
            with tempfile.TemporaryDirectory() as empty:  # by project name only: no compose.yaml of the cwd
                target.docker.compose("", "--project-directory", empty, "down", "--remove-orphans", "--timeout",
                                      str(grace), project=dep.project, timeout=grace + 120)

        return _outcomes(dep.targets, each(dep.targets, down))

    def wait_gone(self, dep: Deployment, nodes: tuple[Target, ...], timeout: float) -> dict[str, list[str]]:
        """A task of the recipe's Swarm stack carries its label too and does not go with `compose down`: it is
        named at once, with the command that stops it, rather than waited for until the bound."""
        return wait_gone(dep, nodes, timeout, lambda row: _swarm_task(row, dep.project))

    def existing(self, dep: Deployment) -> Before:
        found = each(dep.targets, lambda t: frozenset(str(r.get("ID")) for r in t.docker.containers(dep.label)))
        return {name: None if isinstance(ids, Exception) else ids for name, ids in found.items()}

    def remove_new(self, dep: Deployment, before: Before) -> list[Removal]:
        """Stop (with the grace period) and remove the containers that were not there before: a container
        Compose recreated is this `up`'s; one it left alone is the earlier deployment's."""
        grace = _grace(dep)

        def remove(target: Target) -> Removal:
            rows = target.docker.containers(dep.label)
            earlier = before.get(target.name)
            if earlier is None:
                return Removal(target.name, kept=_names(rows), error="could not tell what ran before: left as is")
            new = [r for r in rows if str(r.get("ID")) not in earlier]
            if new:
                ids = [str(r.get("ID")) for r in new]
                target.docker.run("stop", "--time", str(grace), *ids, timeout=grace + 60)
                target.docker.run("rm", "-f", *ids, timeout=60)
            return Removal(target.name, _names(new), _names([r for r in rows if r not in new]))

        results = each(dep.targets, remove)
        return [r if isinstance(r := results[t.name], Removal) else Removal(t.name, error=reason(r))
                for t in dep.targets]


def _swarm_task(row: JSONObject, project: str) -> str:
    """Why a container stays after `compose down`: it is a Swarm task (`docker ps` lists labels as k=v,...)."""
    labels = str(row.get("Labels", ""))
    return f"a Swarm task: `recipegen down --swarm {project}` stops it" if "com.docker.swarm.task.id=" in labels else ""


def _names(rows: list[JSONObject]) -> tuple[str, ...]:
    return tuple(str(r.get("Names", r.get("ID", "?"))) for r in rows)


def _grace(dep: Deployment) -> int:
    return duration_seconds(dep.cluster.stop_grace_period)


def _outcomes(targets: tuple[Target, ...], results: dict[str, None | Exception]) -> list[Outcome]:
    return [Outcome(t.name, reason(r) if isinstance(r := results[t.name], Exception) else None) for t in targets]
