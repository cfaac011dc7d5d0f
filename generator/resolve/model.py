"""Typed inputs of the compiler: a resolved recipe and a cluster, each value with where it came from.

Shared by every stage (kompose's habit: constants and data objects live with the data, not in a stage).
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

# Re-exported: modules after resolve that use Origin and its two constants take them from here, with the types.
from generator.read.origin import COMPILER as COMPILER, DEFAULT as DEFAULT, Origin as Origin
from generator.read.tomldoc import TomlDocument
from generator.resolve.benchtable import BenchTable

# The recipe id is the Compose project name (`name:`) and the Swarm stack name: Compose's rule, no dots.
RECIPE_ID = re.compile(r"[a-z0-9][a-z0-9_-]*")  # fullmatch only: `$` would let "id\n" through

ENGINE_DEFAULT_ENTRYPOINT = {"vllm": ("vllm", "serve"), "sglang": ("python3", "-m", "sglang.launch_server")}
ENGINE_DEFAULT_PORT = {"vllm": 8000, "sglang": 30000}
HF_CACHE_IN_CONTAINER = "/root/.cache/huggingface"
# Where recipegen's own files land in the engine container: the launcher and the mods (the planner writes them
# there, the lint rule mount-target keeps mounts off the launcher's folder).
LAUNCHER_PATH = "/opt/recipegen/launch.sh"
MODS_DIR = "/workspace/mods"  # where eugr and sparkrun put them: mods may rely on it


def container_target(path: str) -> str:
    """A mount target as the container sees it: `//dev/shm`, `/m/`, `/a/./b` and `/x/../m` name the folders
    /dev/shm, /m, /a/b and /m (POSIX keeps a leading `//` apart; Linux does not)."""
    normal = posixpath.normpath(path)
    return "/" + normal.lstrip("/") if normal.startswith("//") else normal
# The recipe keys holding one value each (a child's value replaces its parent's), in the order explain shows them.
RECIPE_SCALARS = ("engine", "name", "docker_image", "docker_image_dir", "dockerfile", "model", "required_nodes", "nodes",
                  "tensor_parallel_size", "pipeline_parallel_size", "distributed_backend", "shm_size", "entrypoint")
# Container options a cluster sets as defaults and a recipe overrides, key by key (schema: both files).
CONTAINER_KEYS = ("ipc", "memory_limit", "pids_limit", "container_user", "log_max_size", "log_max_files",
                  "health_start_period", "restart", "restart_limit", "restart_window", "wedge_timeout")


@dataclass(frozen=True)
class Mount:
    host: str
    container: str
    read_only: bool
    origin: Origin


@dataclass(frozen=True)
class ModFile:
    """One file of a mod folder: shipped inside the generated files (then it must be text: it travels in YAML), or
    copied into a derived image (`mods_transport`). A mod's first MiB is read when it is loaded; a file past that
    (the mod cannot travel inline then) stays on disk and is hashed and copied as a stream: mods of any size."""

    path: str  # relative to the mod folder, POSIX separators
    content: bytes | None  # None: the file at `source`, read in chunks when its bytes are needed
    executable: bool
    source: Path | None = None
    size_on_disk: int = 0

    @property
    def size(self) -> int:
        return len(self.content) if self.content is not None else self.size_on_disk

    def chunks(self, size: int = 1 << 20) -> Iterator[bytes]:
        if self.content is not None or self.source is None:
            yield self.content or b""
            return
        with self.source.open("rb") as f:
            while chunk := f.read(size):
                yield chunk

    def sha256(self) -> str:
        digest = hashlib.sha256()
        for chunk in self.chunks():
            digest.update(chunk)
        return digest.hexdigest()

    @property
    def data(self) -> bytes:
        """The whole file: only for what travels inline (at most 1 MiB a mod) or small checks."""
        return self.content if self.content is not None else b"".join(self.chunks())

    @property
    def text(self) -> str:
        """The file as it travels inline; only asked for mods that inline_refusal let through (UTF-8, no NUL)."""
        return self.data.decode("utf-8")


@dataclass(frozen=True)
class Mod:
    """A mod: a folder with `run.sh` and the files it uses, run in the container before the engine."""

    name: str  # the folder's name: where it lands in the container
    source: str  # the folder as the recipe names it
    files: tuple[ModFile, ...]
    origin: Origin
    folder: Path | None = None  # where it was found (the lint rule outside-project checks it)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


_DECIMAL = re.compile("[0-9]+")


@dataclass(frozen=True)
class ContainerOptions:
    """Container settings a cluster defaults and a recipe overrides; None means Docker's own default."""

    ipc: str | None = None
    memory_limit: str | None = None
    pids_limit: int | None = None
    container_user: str | None = None
    log_max_size: str = "100m"  # "" leaves logging to the daemon's settings
    log_max_files: int = 3
    health_start_period: str = "30m"
    restart: str = "group"  # "group": any rank's end restarts every rank (runtime/groupwatch.py); "never"
    restart_limit: int = 5  # group restarts within restart_window before the recipe stops for good
    restart_window: str = "30m"
    wedge_timeout: str = "20s"  # the head's one-token probe's deadline (runtime/groupwatch.py); "0s": no probe

    @property
    def as_root(self) -> bool:
        """Docker's default user in engine images is root; `0`, `root`, `0:0`, `root:...` are root too."""
        return self.container_user is None or self.container_user.split(":", 1)[0] in ("", "0", "root")

    @property
    def numeric_user(self) -> tuple[str, str | None] | None:
        """(uid, gid or None) of a `UID[:GID]` user: what a Compose config reference can own its file as.
        A user name has no uid until the image's /etc/passwd is read, which compiling cannot do."""
        user, _, group = (self.container_user or "").partition(":")
        if _DECIMAL.fullmatch(user) and (not group or _DECIMAL.fullmatch(group)):
            return user, group or None
        return None


@dataclass(frozen=True)
class Arg:
    """One shell word of `args`, with the array element it starts in."""

    word: str
    origin: Origin
    # What sh would have done to the word beyond removing quotes (generator.read.shellwords); () for most words.
    # Kept on the word so it follows the word through `extends` merges to the `shell-literal` lint rule.
    shell: tuple[str, ...] = ()
    # The element (as written) whose trailing backslash escaped the space that joins it to the next element, so
    # sh made the two one word (`"4096\\", "--enforce-eager"` is the word `4096 --enforce-eager`); None for most.
    glued: str | None = None


@dataclass(frozen=True)
class FlagGroup:
    """A flag and the values after it, or (flag None) words before the first flag."""

    flag: str | None
    args: tuple[Arg, ...]

    @property
    def values(self) -> list[str]:
        head = self.args[0].word if self.args else ""
        inline = [head.split("=", 1)[1]] if self.flag and "=" in head else []
        return inline + [a.word for a in self.args[1:]]


@dataclass
class Recipe:
    """A recipe after `extends` is resolved and defaults are applied."""

    id: str
    path: Path
    engine: str
    name: str
    docker_image: str
    docker_image_dir: str | None
    image_dir_base: Path  # the folder of the recipe file that set docker_image_dir (a parent's, when inherited)
    model: str
    required_nodes: int
    nodes: tuple[str, ...] | None  # node names chosen by the recipe, or None for the cluster's first N
    tensor_parallel_size: int
    pipeline_parallel_size: int
    distributed_backend: str
    shm_size: str
    entrypoint: tuple[str, ...]
    args: tuple[Arg, ...]
    mounts: tuple[Mount, ...]
    env: dict[str, str]
    dockerfile: str | None = None
    build_args: dict[str, str] = field(default_factory=dict)
    mods: tuple[Mod, ...] = ()
    mods_transport: str = "auto"  # as the recipe says it: "auto", "inline" or "image"
    mods_in_image: bool = False  # resolved: the mods travel in a derived image (generator/resolve/mods.py)
    setup: tuple[Arg, ...] = ()  # each word is one shell command
    ray_args: tuple[Arg, ...] = ()  # the recipe's own; the cluster's defaults are merged in at plan time
    container: dict[str, object] = field(default_factory=dict)  # CONTAINER_KEYS the recipe (or a parent) sets
    pass_env: tuple[str, ...] = ()  # names taken from the deploying environment, never written out
    unused_removals: tuple[tuple[Origin, str, str], ...] = ()  # (where, "remove_args"/"remove_env", what)
    origins: dict[str, Origin] = field(default_factory=dict)  # top-level key -> where it was set
    env_origins: dict[str, Origin] = field(default_factory=dict)
    build_arg_origins: dict[str, Origin] = field(default_factory=dict)
    documents: tuple[TomlDocument, ...] = ()  # this recipe first, then its parents
    flag_groups: tuple[FlagGroup, ...] = ()  # `args` grouped into flags and their values, by the loader
    bench: BenchTable = field(default_factory=BenchTable)  # `[bench]`: what `recipegen bench` runs by default

    @property
    def document(self) -> TomlDocument:
        return self.documents[0]



@dataclass(frozen=True)
class Ulimits:
    memlock: int = -1
    stack: int = 64 * 1024 * 1024  # 67108864, as NVIDIA's `docker run --ulimit stack=67108864`


@dataclass(frozen=True)
class Node:
    index: int
    name: str
    address: str
    context: str
    ssh_host: str
    user: str
    home: str
    env: dict[str, str]

    def expand_home(self, path: str) -> str:
        """`~` is the home of the node's user, never of whoever runs recipegen."""
        if path == "~":
            return self.home
        if path.startswith("~/"):
            return self.home.rstrip("/") + path[1:]
        return path


@dataclass(frozen=True)
class Router:
    """The cluster's `[router]`: one OpenAI endpoint in front of every routed recipe's head (schema: its keys)."""

    nodes: tuple[Node, ...]
    port: int
    recipes: tuple[str, ...] | None  # None: every recipe of the project
    image: str
    max_body: str
    api_key_env: str
    health_interval: str
    timeout: str


@dataclass(frozen=True)
class Metrics:
    """The cluster's `[metrics]`: Prometheus, Grafana and the blackbox exporter on `node`, a node exporter on every
    node (schema: its keys and their defaults)."""

    node: Node
    prometheus_port: int
    grafana_port: int
    node_exporter_port: int
    blackbox_port: int
    dcgm: bool
    dcgm_port: int
    scrape_interval: str
    retention_time: str
    retention_size: str
    wedge_after: str
    probe_timeout: str
    grafana_password_env: str
    prometheus_image: str
    grafana_image: str
    node_exporter_image: str
    blackbox_image: str
    dcgm_image: str


class NodeChoiceError(LookupError):
    """The cluster cannot give a recipe its nodes; `key` is the recipe key to point at."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


@dataclass
class Cluster:
    name: str
    path: Path
    user: str
    hf_cache: str
    gpu: str
    rdma: bool
    master_port: int
    ray_port: int
    gpu_memory_ceiling: float
    gpus_per_node: int
    stop_grace_period: str
    ulimits: Ulimits
    env: dict[str, str]
    nodes: tuple[Node, ...]
    document: TomlDocument
    pass_env: tuple[str, ...] = ()
    ray_args: tuple[Arg, ...] = ()
    ray_join_timeout: str = "10m"
    transfer_port: int = 29700  # `recipegen models` and `images`: receivers listen here on the fabric address
    group_port: int = 29680  # the ranks' group watches meet on the head's fabric address here
    gpu_memory: int = 128419522150  # bytes one GPU gives the engine (GB10: 119.6 GiB); the `fit` rules' budget
    container: ContainerOptions = ContainerOptions()
    router: Router | None = None
    metrics: Metrics | None = None

    def node_env(self, node: Node) -> dict[str, str]:
        """The environment the cluster file gives `node`: its [env], then the node's own over it."""
        return {**self.env, **node.env}

    def nodes_for(self, recipe: "Recipe") -> tuple[Node, ...]:
        """The nodes a recipe runs on, head first; NodeChoiceError says why there are none."""
        if recipe.nodes is None:
            if recipe.required_nodes > len(self.nodes):
                raise NodeChoiceError("required_nodes", f"needs {recipe.required_nodes} nodes but cluster "
                                                        f"'{self.name}' has {len(self.nodes)}")
            return self.nodes[: recipe.required_nodes]
        if len(recipe.nodes) != recipe.required_nodes:
            raise NodeChoiceError("nodes", f"names {len(recipe.nodes)} node(s) but required_nodes is "
                                           f"{recipe.required_nodes}")
        known = {n.name: n for n in self.nodes}
        missing = [name for name in recipe.nodes if name not in known]
        if missing:
            raise NodeChoiceError("nodes", f"cluster '{self.name}' has no node {', '.join(map(repr, missing))} "
                              f"(it has {', '.join(known)})")
        return tuple(known[name] for name in recipe.nodes)
