"""The plan's types: one typed object per node saying exactly what runs there. Renderer, `explain`, the deployer
and the tests all read these objects; nothing downstream re-derives a rank, an address or a variable. The names the
plan gives the deployer (labels, the service, the Swarm resource) are here too.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from generator.read.units import duration_ns, size_bytes
from generator.resolve.model import COMPILER, Arg, Cluster, ContainerOptions, Node, Origin, Recipe, Ulimits
from generator.resolve.model import LAUNCHER_PATH as LAUNCHER_PATH, MODS_DIR as MODS_DIR  # the plan's vocabulary too

LABEL_PREFIX = "dev.recipegen"
ENGINE_SERVICE = "engine"  # the one service of every per-node compose file (templates/compose.yaml.j2)
SWARM_NODE_LABEL = "recipegen.node"  # the Swarm node label `placement` pins a rank with
GPU_RESOURCE_KIND = "NVIDIA_GPU"  # the Swarm generic resource a rank reserves (templates/stack.yaml.j2)
# The healthcheck probe: python3 is in every vLLM, NGC and SGLang image (curl and wget often are not).
HEALTH_PROBE = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)"
# Over TLS (`--ssl-certfile`) the probe does not verify the certificate: it asks its own container's loopback,
# which no certificate names (the cert names the node's real host, and may be signed by a private CA the image does
# not trust). What it checks is that the engine answers; who it is needs no proof from inside its own container.
HEALTH_PROBE_TLS = ("import ssl, sys, urllib.request; context = ssl.create_default_context(); "
                    "context.check_hostname = False; context.verify_mode = ssl.CERT_NONE; "
                    "urllib.request.urlopen(sys.argv[1], timeout=10, context=context)")
HEALTH_INTERVAL = "15s"
GROUP_FOLLOWED = 2  # the group watch's exit status when another rank's end stopped this one (runtime/groupwatch.py)
GROUP_STATE = "/tmp/.recipegen-group.json"  # where each rank's group watch keeps its record; `ps` reads the head's
# Where the group watch's program lies in every rank's container: a config (Compose's inline content, Swarm's file
# beside the stack), in the launcher's folder, which mount-target already keeps free (engines/written.py).
WATCH_PATH = f"{posixpath.dirname(LAUNCHER_PATH)}/group-watch.py"
# The group's key, passed from the deploying shell (`recipegen up` sets it; never written into a generated file):
# the ranks' watches prove to each other that they hold it (runtime/groupwatch.py).
GROUP_KEY_ENV = "RECIPEGEN_GROUP_KEY"
WATCH_FILE = "group-watch.py"  # the program's name: a Compose config's, and the Swarm stack's file beside it
HEALTH_TIMEOUT = "15s"
HEALTH_RETRIES = 4  # a minute of failures marks a serving head unhealthy; a busy one answers /health in time


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str
    origin: Origin
    overrides: tuple[Origin, ...] = ()  # earlier layers this value replaced


@dataclass(frozen=True)
class Volume:
    source: str  # host path on the node, `~` already expanded for the node's user
    target: str
    read_only: bool
    origin: Origin


@dataclass(frozen=True)
class ContainerFile:
    """A file recipegen puts into the engine container (a mod's file, vLLM's Ray settings), carried inside the
    generated compose file: nothing has to exist on the node beforehand."""

    name: str  # its key among the compose file's configs
    path: str  # absolute, in the container
    text: str
    executable: bool
    about: str  # shown in the comment above it


@dataclass(frozen=True)
class ModsImage:
    """The image a recipe's mods travel in (`mods_transport`): `FROM` the recipe's image, one `COPY` of each mod
    folder; Compose builds it from `context` (relative to the compose file's folder), `recipegen images` builds it
    once and sends it to every node. The tag is a hash of the base image's name and every mod file, so a changed mod
    is a new tag and out/ says so."""

    tag: str
    base: str  # the recipe's docker_image
    context: str
    dockerfile: str  # Compose's dockerfile_inline
    layers_added: int  # layers the Dockerfile puts on top of the base (one a COPY): what is left is the base

    def base_part(self, layers: tuple[str, ...]) -> tuple[str, ...]:
        """Of a built image's layers, those of the base image it was built from."""
        return layers[: max(len(layers) - self.layers_added, 0)]


@dataclass(frozen=True)
class ModRun:
    name: str
    directory: str  # in the container
    origin: Origin


@dataclass(frozen=True)
class RayHead:
    """The head of a Ray cluster: `ray start --head`, then wait until every worker joined, then the engine."""

    start: tuple[str, ...]
    join_timeout_s: int
    workers: tuple[tuple[str, str], ...]  # (node name, fabric address) of every worker it waits for


@dataclass(frozen=True)
class RayWorker:
    """A Ray worker's join: wait until the head's Ray port accepts connections, then run the command (`ray start
    --block --address ...`), again after a failure, until `join_timeout_s` is used up."""

    head_host: str
    head_port: int
    join_timeout_s: int


@dataclass(frozen=True)
class Launch:
    """What runs in the container before the engine: setup commands, then mods, then a Ray head's start; on a
    Ray worker the command itself runs under the launcher's join loop."""

    mods: tuple[ModRun, ...]
    setup: tuple[Arg, ...]  # each word is one shell command
    ray_head: RayHead | None
    ray_worker: RayWorker | None = None


@dataclass(frozen=True)
class GroupWatch:
    """The group watch a rank runs under (runtime/groupwatch.py, `restart = "group"`): it meets the other ranks'
    watches on the head's `port` before the engine starts, and stops its engine, so that Docker restarts every rank,
    when any rank ends; after `limit` restarts within `window_s` seconds, or `limit` in a row with the group never
    serving in between, it stops for good."""

    head: str  # the head's fabric address
    port: int
    ranks: int
    limit: int
    window_s: int
    grace_s: int  # how long the engine gets to stop before it is killed
    health: str  # the head's /health URL (the head only): a serving engine that stops answering ends the group
    group: str  # `<recipe id>:<input hash>`: a rank of another shape of the recipe (a leftover) is turned away
    peers: tuple[str, ...] = ()  # every rank's fabric address, in rank order: the head hears only these
    model: str = ""  # the served name the head's wedge probe asks for
    wedge_s: int = 0  # the wedge probe's deadline (the head only); 0: no probe
    boot_s: int = 0  # /health must first answer within this (the head only; health_start_period); 0: no bound

    @property
    def source(self) -> str:
        """The watch's program, shipped as a config (WATCH_PATH in the container)."""
        return watch_source()

    def words(self, rank: int, node: str) -> tuple[Arg, ...]:
        """`python3 WATCH_PATH --rank ... --`: what goes before the rank's own entrypoint."""
        words = ["python3", WATCH_PATH, "--rank", str(rank), "--ranks", str(self.ranks), "--node", node,
                 "--head", self.head, "--port", str(self.port), "--limit", str(self.limit),
                 "--window", str(self.window_s), "--grace", str(self.grace_s), "--state", GROUP_STATE,
                 "--group", self.group, "--peers", ",".join(self.peers),
                 *(("--health", self.health) if self.health else ()),
                 *(("--boot", str(self.boot_s)) if self.health and self.boot_s else ()),
                 *(("--model", self.model, "--wedge", str(self.wedge_s)) if self.health and self.wedge_s else ()),
                 "--"]
        return tuple(Arg(w, COMPILER) for w in words)


@lru_cache(maxsize=1)
def watch_source() -> str:
    """runtime/groupwatch.py as the compiler ships it: its docstring, which explains the design to a reader of
    recipegen, replaced by one line saying where to read it."""
    # Read, not imported: the compiler has no use for its sockets and threads (nor their import time).
    text = (Path(__file__).resolve().parent.parent / "runtime" / "groupwatch.py").read_text("utf-8")
    start = text.index('"""')
    end = text.index('"""', start + 3) + 3
    return ("# recipegen's group watch (generator/runtime/groupwatch.py; docs/self-healing.md): PID 1 of each rank.\n"
            + text[:start] + text[end:].lstrip("\n"))


@dataclass(frozen=True)
class HealthCheck:
    url: str
    start_period: str
    probe: str = HEALTH_PROBE  # python3 -c PROBE URL

    @property
    def tls(self) -> bool:
        return self.url.startswith("https:")


@dataclass(frozen=True)
class NodePlan:
    recipe_id: str
    node: Node
    rank: int
    model: str  # what the rank serves: a Hugging Face id or a path in the container
    models: tuple[str, ...]  # every model it loads: `model`, then draft models (preflight looks for each)
    image: str
    build_context: str | None  # path relative to the compose file's folder
    command: tuple[Arg, ...]  # the argv, each word with where it came from
    entrypoint_words: int  # how many leading words of `command` form the container's entrypoint
    env: tuple[EnvVar, ...]
    pass_env: tuple[str, ...]  # passed through from the deploying environment (Compose resolves them at `up`)
    volumes: tuple[Volume, ...]
    shm_size: str
    ulimits: Ulimits
    gpu: str
    gpus: int  # GPUs per node: all of them serve this rank
    rdma: bool
    labels: tuple[tuple[str, str], ...]
    stop_grace_period: str
    container: ContainerOptions
    build_args: tuple[tuple[str, str], ...] = ()
    dockerfile: str | None = None
    launch: Launch | None = None  # None: the engine command runs as the entrypoint itself
    files: tuple[ContainerFile, ...] = ()
    health: HealthCheck | None = None
    group: GroupWatch | None = None  # None: `restart = "never"`
    mods_image: ModsImage | None = None  # then `image` is its tag

    @property
    def local_image(self) -> bool:
        """The image is made on the nodes (a build context, the mods' image), never fetched: Swarm must not ask a
        registry for it (`stack deploy --resolve-image never`), or a same-named image there could run instead."""
        return self.mods_image is not None or self.build_context is not None

    @property
    def base_image(self) -> str:
        """The image the recipe names: `image` itself, or the one its mods image is built from."""
        return self.mods_image.base if self.mods_image is not None else self.image

    @property
    def is_head(self) -> bool:
        return self.rank == 0

    @property
    def file_owner(self) -> tuple[str, str | None] | None:
        """(uid, gid) the shipped files belong to, for a non-root `UID[:GID]` user: Compose makes a config's file
        root's unless the service's reference names uid/gid (a user name's uid is unknown here: lint says so)."""
        return None if self.container.as_root else self.container.numeric_user

    @property
    def restart_policy(self) -> str:
        """on-failure with no count of Docker's: the group watch bounds the restarts (and exits 0 at its bound)."""
        return "on-failure" if self.group is not None else "no"

    @property
    def placement(self) -> str:
        """The Swarm placement constraint pinning this rank to its node (`recipegen swarm setup` sets the label)."""
        return f"node.labels.{SWARM_NODE_LABEL} == {self.node.name}"

    @property
    def entrypoint(self) -> tuple[Arg, ...]:
        watch = self.group.words(self.rank, self.node.name) if self.group is not None else ()
        if self.launch is not None:  # the launcher runs the steps, then execs the command it is given
            return (*watch, Arg("/bin/sh", COMPILER), Arg(LAUNCHER_PATH, COMPILER))
        return (*watch, *self.command[: self.entrypoint_words])

    @property
    def arguments(self) -> tuple[Arg, ...]:
        return self.command if self.launch is not None else self.command[self.entrypoint_words:]


@dataclass(frozen=True)
class RecipePlan:
    recipe: Recipe
    cluster: Cluster
    nodes: tuple[NodePlan, ...]
    input_hash: str
    serve_port: int
    served_model_name: str
    source: str  # the recipe file as named in headers, relative to the project
    cluster_source: str

    @property
    def head(self) -> NodePlan:
        return self.nodes[0]


def shm_bytes(size: str) -> int:
    """Docker's size syntax (`32gb`, `64g`, `32GiB`): binary multiples, as go-units reads it."""
    value = size_bytes(size)
    if value is None:  # the schema's docker-size format refused it already
        raise ValueError(size)
    return value


def duration_seconds(text: str, least: int = 1) -> int:
    """A compose duration (`10m`, `1h30m`) in whole seconds, at least `least` (the schema checked it parses)."""
    return max(least, (duration_ns(text) or 0) // 10**9)
