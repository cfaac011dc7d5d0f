"""The plan: one typed object per node saying exactly what runs there. Renderer, `explain`, the deployer and
the tests all read this object; nothing downstream re-derives a rank, an address or a variable.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from generator.diagnostics import RecipegenError
from generator.engines.ranks import (OWNED_ENV, draft_models, flag_value, rank_command, rank_env, serve_port,
                                     served_model_name)
from generator.read.units import duration_ns, size_bytes
from generator.resolve.buildcontext import find_build_context
from generator.resolve.model import (COMPILER, CONTAINER_KEYS, DEFAULT, HF_CACHE_IN_CONTAINER, RECIPE_SCALARS, Arg,
                                     Cluster, ContainerOptions, Node, NodeChoiceError, Origin, Recipe, Ulimits)
from generator.resolve.model import LAUNCHER_PATH as LAUNCHER_PATH, MODS_DIR as MODS_DIR  # the plan's vocabulary too

LABEL_PREFIX = "dev.recipegen"
ENGINE_SERVICE = "engine"  # the one service of every per-node compose file (templates/compose.yaml.j2)
SWARM_NODE_LABEL = "recipegen.node"  # the Swarm node label `placement` pins a rank with
GPU_RESOURCE_KIND = "NVIDIA_GPU"  # the Swarm generic resource a rank reserves (templates/stack.yaml.j2)
RESTART_ATTEMPTS = 3  # a rank whose peers are gone must not restart forever
# vLLM's Ray executor copies the driver's (head's) variables to every worker except the names this file lists
# (vllm/ray/ray_env.py: RAY_NON_CARRY_OVER_ENV_VARS, read from VLLM_CONFIG_ROOT).
NON_CARRY_OVER_FILE = "ray_non_carry_over_env_vars.json"
# The healthcheck probe: python3 is in every vLLM, NGC and SGLang image (curl and wget often are not).
HEALTH_PROBE = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)"
# Over TLS (`--ssl-certfile`) the probe does not verify the certificate: it asks its own container's loopback,
# which no certificate names (the cert names the node's real host, and may be signed by a private CA the image does
# not trust). What it checks is that the engine answers; who it is needs no proof from inside its own container.
HEALTH_PROBE_TLS = ("import ssl, sys, urllib.request; context = ssl.create_default_context(); "
                    "context.check_hostname = False; context.verify_mode = ssl.CERT_NONE; "
                    "urllib.request.urlopen(sys.argv[1], timeout=10, context=context)")
HEALTH_INTERVAL = "15s"
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
    restart_attempts: int
    stop_grace_period: str
    container: ContainerOptions
    build_args: tuple[tuple[str, str], ...] = ()
    dockerfile: str | None = None
    launch: Launch | None = None  # None: the engine command runs as the entrypoint itself
    files: tuple[ContainerFile, ...] = ()
    health: HealthCheck | None = None

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
        return f"on-failure:{self.restart_attempts}"

    @property
    def placement(self) -> str:
        """The Swarm placement constraint pinning this rank to its node (`recipegen swarm setup` sets the label)."""
        return f"node.labels.{SWARM_NODE_LABEL} == {self.node.name}"

    @property
    def entrypoint(self) -> tuple[Arg, ...]:
        if self.launch is not None:  # the launcher runs the steps, then execs the command it is given
            return (Arg("/bin/sh", COMPILER), Arg(LAUNCHER_PATH, COMPILER))
        return self.command[: self.entrypoint_words]

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


def plan_recipe(recipe: Recipe, cluster: Cluster, project_root: Path, out_dir: Path) -> RecipePlan:
    try:
        chosen = cluster.nodes_for(recipe)
    except NodeChoiceError as exc:
        raise RecipegenError(recipe.document.diagnostic((exc.key,), str(exc))) from None
    digest = input_hash(recipe, cluster, chosen)
    container = container_options(recipe, cluster)
    envs = [_environment(recipe, cluster, chosen, rank, container) for rank in range(len(chosen))]  # once each
    nodes = tuple(_plan_node(recipe, cluster, chosen, rank, envs, digest, project_root, out_dir)
                  for rank in range(len(chosen)))
    return RecipePlan(recipe, cluster, nodes, digest, serve_port(recipe), served_model_name(recipe),
                      _shown(recipe.path, project_root), _shown(cluster.path, project_root))


def _plan_node(recipe: Recipe, cluster: Cluster, chosen: tuple[Node, ...], rank: int,
               envs: list[tuple[EnvVar, ...]], digest: str, root: Path, out_dir: Path) -> NodePlan:
    node = chosen[rank]
    command = rank_command(recipe, cluster, chosen, rank)
    user_origins = iter(a.origin for a in recipe.args)
    starts_with_entrypoint = command.argv[: len(recipe.entrypoint)] == recipe.entrypoint
    words = []
    for i, value in enumerate(command.argv):
        if starts_with_entrypoint and i < len(recipe.entrypoint):
            origin = recipe.origins["entrypoint"]
        elif i in command.compiler_words:
            origin = COMPILER
        else:  # the recipe's own words follow the compiler's, in order
            origin = next(user_origins, COMPILER)
        words.append(Arg(value, origin))
    env = envs[rank]
    # The whole argv is pinned (entrypoint + command), so an image's own ENTRYPOINT (vllm-openai has
    # ["vllm", "serve"]) cannot run in front of it.
    entrypoint_words = len(recipe.entrypoint) if starts_with_entrypoint else 1
    hf_origin = cluster.document.origin("cluster", ("hf_cache",)) if "hf_cache" in cluster.document.data else DEFAULT
    volumes = [Volume(node.expand_home(cluster.hf_cache), HF_CACHE_IN_CONTAINER, False, hf_origin)]
    volumes += [Volume(node.expand_home(m.host), m.container, m.read_only, m.origin) for m in recipe.mounts]
    labels = (
        (f"{LABEL_PREFIX}.recipe", recipe.id),
        (f"{LABEL_PREFIX}.name", recipe.name),  # the display name: `recipegen ps`, `docker ps --format`
        (f"{LABEL_PREFIX}.cluster", cluster.name),
        (f"{LABEL_PREFIX}.node", node.name),
        (f"{LABEL_PREFIX}.rank", str(rank)),
        (f"{LABEL_PREFIX}.input-hash", digest),
    )
    container = container_options(recipe, cluster)  # the same for every rank (plan_recipe computed it too)
    ray_head = ray_worker = None
    join_timeout = duration_seconds(cluster.ray_join_timeout)
    if command.ray_head is not None:
        ray_head = RayHead(command.ray_head, join_timeout, tuple((n.name, n.address) for n in chosen[1:]))
    if command.ray_worker is not None:
        ray_worker = RayWorker(*command.ray_worker, join_timeout)
    mods = tuple(ModRun(m.name, f"{MODS_DIR}/{m.name}", m.origin) for m in recipe.mods)
    needed = mods or recipe.setup or ray_head or ray_worker
    launch = Launch(mods, recipe.setup, ray_head, ray_worker) if needed else None
    shipped = [(f"{MODS_DIR}/{m.name}/{f.path}", f.text, f.executable, f"mod {m.source}: {f.path}")
               for m in recipe.mods for f in m.files] + _ray_settings(recipe, envs, env)
    files = tuple(ContainerFile(f"{i}-{posixpath.basename(path)}", path, text, executable, about)
                  for i, (path, text, executable, about) in enumerate(shipped, 1))
    return NodePlan(
        recipe_id=recipe.id, node=node, rank=rank, model=recipe.model, models=(recipe.model, *draft_models(recipe)),
        image=recipe.docker_image,
        build_context=_build_context(recipe, root, out_dir / recipe.id / node.name), command=tuple(words),
        entrypoint_words=entrypoint_words,
        env=env,
        pass_env=_pass_env(recipe, cluster, env),
        volumes=tuple(volumes), shm_size=recipe.shm_size,
        ulimits=cluster.ulimits, gpu=cluster.gpu, gpus=cluster.gpus_per_node, rdma=cluster.rdma, labels=labels,
        restart_attempts=RESTART_ATTEMPTS, stop_grace_period=cluster.stop_grace_period,
        container=container, build_args=tuple(sorted(recipe.build_args.items())), dockerfile=recipe.dockerfile,
        launch=launch, files=files,
        health=_health(recipe, container) if rank == 0 else None)


def container_options(recipe: Recipe, cluster: Cluster) -> ContainerOptions:
    """The cluster's container defaults with the recipe's settings over them, key by key."""
    settings: dict[str, Any] = {k: v for k, v in recipe.container.items() if k in CONTAINER_KEYS}  # schema-typed
    return replace(cluster.container, **settings)


def _health(recipe: Recipe, container: ContainerOptions) -> HealthCheck:
    """The head's engine API, asked from inside its own container (host network: the node's loopback works
    unless the engine was told to listen on one address only), on the engine's `--port`, and over https when
    it serves TLS (`--ssl-certfile`, which vLLM and SGLang both take)."""
    host = (flag_value(recipe, "--host") or "").removeprefix("[").removesuffix("]")
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":  # every IPv6 address, and IPv4 too unless the node sets bindv6only: ::1 answers either way
        host = "::1"
    if ":" in host:  # an IPv6 address, bracketed once in the URL
        host = f"[{host}]"
    path = f"{host}:{serve_port(recipe)}/health"
    if flag_value(recipe, "--ssl-certfile"):
        return HealthCheck(f"https://{path}", container.health_start_period, HEALTH_PROBE_TLS)
    return HealthCheck(f"http://{path}", container.health_start_period)


def _ray_settings(recipe: Recipe, envs: list[tuple[EnvVar, ...]],
                  env: tuple[EnvVar, ...]) -> list[tuple[str, str, bool, str]]:
    """vLLM's Ray executor copies the head's vLLM variables to every worker: name the ones whose value is the
    node's own (they differ between nodes, or the compiler sets them per rank) so each worker keeps its own."""
    if not (recipe.engine == "vllm" and recipe.distributed_backend == "ray" and len(envs) > 1):
        return []
    values = [{v.name: v.value for v in rank_env} for rank_env in envs]
    per_node = {n for n in set().union(*values) if len({v.get(n) for v in values}) > 1}
    text = json.dumps(sorted(per_node), indent=2) + "\n"
    return [(f"{vllm_config_root(env)}/{NON_CARRY_OVER_FILE}", text, False,
             "vLLM's Ray executor: variables each worker keeps its own value of")]


def vllm_config_root(env: tuple[EnvVar, ...]) -> str:
    """Where vLLM reads its config files (vllm/envs.py: VLLM_CONFIG_ROOT, else $XDG_CONFIG_HOME/vllm, else
    ~/.config/vllm; engine images run as root)."""
    values = {var.name: var.value for var in env}
    if values.get("VLLM_CONFIG_ROOT"):
        return values["VLLM_CONFIG_ROOT"].rstrip("/") or "/"
    return (values.get("XDG_CONFIG_HOME") or "/root/.config").rstrip("/") + "/vllm"




def duration_seconds(text: str) -> int:
    """A compose duration (`10m`, `1h30m`) in whole seconds, at least 1 (the schema checked it parses)."""
    return max(1, (duration_ns(text) or 0) // 10**9)


def _pass_env(recipe: Recipe, cluster: Cluster, env: tuple[EnvVar, ...]) -> tuple[str, ...]:
    """Names passed through from the deploying shell; one that also has a value here keeps the value (lint
    reports the clash)."""
    valued = {var.name for var in env}
    return tuple(dict.fromkeys(n for n in (*cluster.pass_env, *recipe.pass_env) if n not in valued))


def _environment(recipe: Recipe, cluster: Cluster, chosen: tuple[Node, ...], rank: int,
                 container: ContainerOptions) -> tuple[EnvVar, ...]:
    """Cluster env, then the node's, then the recipe's, then what the compiler owns: later layers win."""
    doc, node = cluster.document, chosen[rank]
    layers: list[tuple[dict[str, str], Callable[[str], Origin]]] = [
        (_user_env(recipe, cluster, container), lambda k: COMPILER),  # defaults: any layer may set its own
        (cluster.env, lambda k: doc.origin("cluster", ("env", k))),
        (node.env, lambda k: doc.origin(f"node {node.name}", ("nodes", node.index, "env", k))),
        (recipe.env, lambda k: recipe.env_origins[k]),
        (rank_env(recipe, cluster, chosen, rank), lambda k: COMPILER),
    ]
    merged: dict[str, EnvVar] = {}
    for layer, (values, origin_of) in enumerate(layers):
        for name, value in values.items():
            if name in OWNED_ENV and layer < 4:
                continue  # the compiler's per-rank value or none: lint says so where it was written
            previous = merged.get(name)
            overridden = (*previous.overrides, previous.origin) if previous else ()
            merged[name] = EnvVar(name, value, origin_of(name), overridden)
    return tuple(merged.values())


# Where a non-root user's vLLM finds the Ray settings file: not under /root, which such a user cannot enter in most
# images, and in /tmp, which it can write (a Swarm task's launcher writes the file itself, as that user).
USER_VLLM_CONFIG_ROOT = "/tmp/recipegen/vllm"


def _user_env(recipe: Recipe, cluster: Cluster, container: ContainerOptions) -> dict[str, str]:
    """For a non-root `container_user`, the paths that default to root's home: the Hugging Face cache (mounted at
    /root/.cache/huggingface, where deploy and `recipegen models` expect it, but found through $HOME, which is
    another user's, or `/` for a bare uid) and vLLM's config root. Unless the cluster or recipe sets them."""
    if container.as_root:
        return {}
    env = {"HF_HOME": HF_CACHE_IN_CONTAINER}
    if recipe.engine == "vllm" and recipe.distributed_backend == "ray" and recipe.required_nodes > 1:
        env["VLLM_CONFIG_ROOT"] = USER_VLLM_CONFIG_ROOT
    given = {*cluster.env, *recipe.env, *(k for n in cluster.nodes for k in n.env)}
    if given & {"HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"}:
        del env["HF_HOME"]
    if given & {"VLLM_CONFIG_ROOT", "XDG_CONFIG_HOME"}:
        env.pop("VLLM_CONFIG_ROOT", None)
    return env


def _build_context(recipe: Recipe, root: Path, compose_dir: Path) -> str | None:
    """The build context relative to the compose file's folder. The lint rules `build-context`, `build-settings`
    and `outside-project` said already why a context is missing, unusable or outside the project."""
    found = find_build_context(recipe, root)
    if found is None or found.folder is None or not found.usable:
        return None
    return _relative(found.folder.resolve(), compose_dir.resolve())


def _relative(target: Path, start: Path) -> str:
    import os

    return Path(os.path.relpath(target, start)).as_posix()


def _shown(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.name


def input_hash(recipe: Recipe, cluster: Cluster, chosen: tuple[Node, ...]) -> str:
    """A digest of the resolved inputs (not of the files: comments and `extends` refactors do not churn out/)."""
    resolved = {
        "recipe": {k: getattr(recipe, k) for k in (*RECIPE_SCALARS, "env", "pass_env")},
        "args": [a.word for a in recipe.args],
        "mounts": [[m.host, m.container, m.read_only] for m in recipe.mounts],
        "cluster": {k: getattr(cluster, k) for k in (
            "name", "user", "hf_cache", "gpu", "gpus_per_node", "rdma", "master_port", "ray_port",
            "stop_grace_period", "env", "pass_env", "ray_join_timeout")},
        "ray_args": [[a.word for a in cluster.ray_args], [a.word for a in recipe.ray_args]],
        "container": [dataclasses.asdict(cluster.container), recipe.container],
        "build": [recipe.build_args, recipe.dockerfile],
        "setup": [a.word for a in recipe.setup],
        "mods": [[m.name, [[f.path, f.text, f.executable] for f in m.files]] for m in recipe.mods],
        "ulimits": [cluster.ulimits.memlock, cluster.ulimits.stack],
        "nodes": [[n.name, n.address, n.context, n.home, n.env] for n in chosen],
    }
    blob = json.dumps(resolved, sort_keys=True, ensure_ascii=False, default=list).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]
