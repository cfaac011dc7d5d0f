"""The router's backends: one protocol, Compose (a project per router node) and Swarm (the router's stack).

Compose updates a running router in place where it can: when only haproxy.cfg changed (a recipe added, renamed,
moved), the new config is checked by the container's own haproxy, copied in, and the master process reloaded
(SIGUSR2): the new worker takes new connections while the old one finishes its streams (`hard-stop-after` bounds
it). Anything else (the image, the port, no container) is Compose's `up -d`. Swarm configs never change, so a new
config is a new config name and Swarm replaces the task: streams through it are cut.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from generator.deploy.backends.base import RankState
from generator.deploy.container_files import read_file
from generator.deploy.container_files import read_file
from generator.deploy.docker import DockerError, reason
from generator.deploy.targets import OnNode, each
from generator.plan.router import CONFIG_PATH, ROUTER_PROJECT, ROUTER_SERVICE
from generator.resolve.model import Cluster

RELOAD_SIGNAL = "USR2"  # HAProxy's master-worker reload
STAGED = "/tmp/recipegen-haproxy.cfg"
COMPOSE_HASH = "com.docker.compose.config-hash"  # where a new config is checked before it replaces the running one


@dataclass(frozen=True)
class RouterTarget(OnNode):
    compose_file: Path

    @property
    def container(self) -> str:
        return f"{ROUTER_PROJECT}-{ROUTER_SERVICE}-1"  # Compose's <project>-<service>-<replica>


@dataclass(frozen=True)
class RouterDeployment:
    """The router as out/_router/ has it: its nodes' compose files, the stack, the config, where clients go."""

    cluster: Cluster
    folder: Path  # out/_router
    targets: tuple[RouterTarget, ...]
    image: str
    port: int
    api_key_env: str
    backends: dict[str, str] = field(default_factory=dict)  # recipe id -> its head endpoint's backend

    @property
    def config_file(self) -> Path:
        return self.folder / "haproxy.cfg"

    @property
    def stack_file(self) -> Path:
        return self.folder / "stack.yaml"

    def url(self, target: RouterTarget) -> str:
        return f"http://{target.node.ssh_host}:{self.port}"


@dataclass(frozen=True)
class Applied:
    """What bringing the router up did on one node."""

    node: str
    action: str  # "started" (Compose up), "reloaded" (new config, same container), "unchanged", "deployed" (Swarm)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class RouterBackend(Protocol):
    name: str

    def apply(self, router: RouterDeployment) -> list[Applied]:
        """Bring the router up on every router node, or bring it to out/_router's config."""
        ...

    def states(self, router: RouterDeployment) -> list[RankState]:
        """The router's container (or task) on each router node."""
        ...


def _running_config(target: RouterTarget) -> bytes | None:
    """The config the running container reads (`docker cp` gives a tar: no tool needed inside the image)."""
    return read_file(target, target.container, CONFIG_PATH)


class ComposeRouter:
    name = "compose"

    def apply(self, router: RouterDeployment) -> list[Applied]:
        wanted = router.config_file.read_bytes()

        def bring(target: RouterTarget) -> Applied:
            info = target.docker.inspect_container(target.container)
            state = info.get("State") if info else None
            running = isinstance(state, dict) and state.get("Running") is True
            config = info.get("Config") if info else None
            labels = config.get("Labels") if isinstance(config, dict) else None
            have = labels.get(COMPOSE_HASH) if isinstance(labels, dict) else None
            # Compose's own hash of the service (image, port, environment ...; not the config's text, in Compose
            # 2.40): equal means `up -d` would leave the container as it is.
            want = target.docker.compose(str(target.compose_file), "config", "--hash", ROUTER_SERVICE).split()
            if not (running and have and want[-1:] == [have]):
                target.docker.compose(str(target.compose_file), "up", "-d", "--remove-orphans", timeout=600)
                action = "started"
            else:
                action = "unchanged"
            if _running_config(target) != wanted:  # Compose left a container with an older config: reload it
                target.docker.run("cp", str(router.config_file), f"{target.container}:{STAGED}")
                target.docker.run("exec", target.container, "haproxy", "-c", "-q", "-f", STAGED, timeout=60)
                target.docker.run("cp", str(router.config_file), f"{target.container}:{CONFIG_PATH}")
                target.docker.run("kill", "--signal", RELOAD_SIGNAL, target.container)
                action = "reloaded" if action == "unchanged" else action
            return Applied(target.name, action)

        results = each(router.targets, bring)
        return [r if isinstance(r := results[t.name], Applied) else Applied(t.name, "failed", reason(r))
                for t in router.targets]

    def states(self, router: RouterDeployment) -> list[RankState]:
        from generator.deploy.backends.compose import rank_state

        def state(target: RouterTarget) -> RankState:
            try:
                info = target.docker.inspect_container(target.container)
            except DockerError as exc:
                return RankState(target.name, target.node.context, "-", "unreachable", exc.short)
            if info is None:
                return RankState(target.name, target.node.context, "-", "missing", "no container")
            return rank_state(target, target.container, info)

        results = each(router.targets, state)
        return [r if isinstance(r := results[t.name], RankState) else
                RankState(t.name, t.node.context, "-", "unreachable", reason(r)) for t in router.targets]


class SwarmRouter:
    name = "swarm"

    def __init__(self, cluster: Cluster):
        from generator.deploy.backends.swarm import SwarmBackend

        self.swarm = SwarmBackend(cluster)

    def apply(self, router: RouterDeployment) -> list[Applied]:
        try:
            self.swarm.manager.run("stack", "deploy", "--prune", "-c", str(router.stack_file), ROUTER_PROJECT,
                                   timeout=600)
        except DockerError as exc:
            return [Applied(t.name, "failed", exc.short) for t in router.targets]
        return [Applied(t.name, "deployed") for t in router.targets]

    def states(self, router: RouterDeployment) -> list[RankState]:
        rows = []
        for target in router.targets:
            service = f"{ROUTER_PROJECT}_{ROUTER_SERVICE}-{target.name}"
            try:
                tasks = self.swarm.manager.json_lines("service", "ps", service, "--format", "{{json .}}")
            except DockerError as exc:
                rows.append(RankState(target.name, target.node.context, service, "missing", exc.short))
                continue
            current = next((t for t in tasks if str(t.get("DesiredState")) == "Running"), None)
            state = str(current.get("CurrentState", "?")) if current else "no task"
            rows.append(RankState(target.name, target.node.context, service,
                                  "running" if state.startswith("Running") else state.split(" ")[0].lower(), state))
        return rows


def choose_router(swarm: bool, cluster: Cluster) -> RouterBackend:
    return SwarmRouter(cluster) if swarm else ComposeRouter()
