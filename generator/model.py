"""Typed inputs of the compiler: a resolved recipe and a cluster, each value with where it came from.

Shared by every stage (kompose's habit: constants and data objects live with the data, not in a stage).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

from generator.tomldoc import TomlDocument

# The recipe id is the Compose project name (`name:`) and the Swarm stack name: Compose's rule, no dots.
RECIPE_ID = re.compile(r"^[a-z0-9][a-z0-9_-]*$")

ENGINE_DEFAULT_ENTRYPOINT = {"vllm": ("vllm", "serve"), "sglang": ("python3", "-m", "sglang.launch_server")}
ENGINE_DEFAULT_PORT = {"vllm": 8000, "sglang": 30000}
HF_CACHE_IN_CONTAINER = "/root/.cache/huggingface"


def container_target(path: str) -> str:
    """A mount target as the container sees it: `//dev/shm`, `/m/`, `/a/./b` and `/x/../m` name the folders
    /dev/shm, /m, /a/b and /m (POSIX keeps a leading `//` apart; Linux does not)."""
    normal = posixpath.normpath(path)
    return "/" + normal.lstrip("/") if normal.startswith("//") else normal
# The recipe keys holding one value each (a child's value replaces its parent's), in the order explain shows them.
RECIPE_SCALARS = ("engine", "name", "docker_image", "docker_image_dir", "model", "required_nodes", "nodes",
                  "tensor_parallel_size", "pipeline_parallel_size", "distributed_backend", "shm_size", "entrypoint")


class Origin:
    """Where a value was written: a file, line and column, and which layer that file is (for `explain`).

    The position is found on first use (`locate`, giving a line or an object with .line and .col): positions
    cost a second parse of the file, which only diagnostics and `explain` need, never a clean build. Two
    origins are equal by layer, file and line.
    """

    __slots__ = ("layer", "file", "_line", "_col", "_locate")

    def __init__(self, layer: str, file: str | None = None, line: int | None = None,
                 locate: Callable[[], Any] | None = None, col: int | None = None):
        self.layer = layer  # "recipe", "parent recipe <id>", "cluster", "node <name>", "compiler", "default"
        self.file = file
        self._line = line
        self._col = col
        self._locate = locate

    def _resolve(self) -> None:
        if self._line is None and self._locate is not None:
            found, self._locate = self._locate(), None
            self._line, self._col = (found, None) if isinstance(found, int) else (found.line, found.col)

    @property
    def line(self) -> int | None:
        self._resolve()
        return self._line

    @property
    def col(self) -> int | None:
        self._resolve()
        return self._col

    def _key(self) -> tuple:
        return self.layer, self.file, self.line

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Origin) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Origin({self.layer!r}, {self.file!r}, {self.line!r})"

    def __str__(self) -> str:
        where = f" ({self.file}:{self.line})" if self.file and self.line else (f" ({self.file})" if self.file else "")
        return self.layer + where


COMPILER = Origin("compiler")
DEFAULT = Origin("default")


@dataclass(frozen=True)
class Mount:
    host: str
    container: str
    read_only: bool
    origin: Origin


@dataclass(frozen=True)
class Arg:
    """One shell word of `args`, with the array element it came from."""

    word: str
    origin: Origin


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
    pass_env: tuple[str, ...] = ()  # names taken from the deploying environment, never written out
    unused_removals: tuple[tuple[Origin, str, str], ...] = ()  # (where, "remove_args"/"remove_env", what)
    origins: dict[str, Origin] = field(default_factory=dict)  # top-level key -> where it was set
    env_origins: dict[str, Origin] = field(default_factory=dict)
    documents: tuple[TomlDocument, ...] = ()  # this recipe first, then its parents

    @property
    def document(self) -> TomlDocument:
        return self.documents[0]

    @cached_property
    def flag_groups(self) -> list:
        """`args` grouped into flags and their values (argwords.FlagGroup), computed once per recipe."""
        from generator.argwords import group_flags  # argwords builds on this module's types

        return group_flags(self.args)


@dataclass(frozen=True)
class Ulimits:
    memlock: int = -1
    stack: int = 67108864


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
