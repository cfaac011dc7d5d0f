"""The plan: one typed object per node saying exactly what runs there. Renderer, `explain`, the deployer and
the tests all read this object; nothing downstream re-derives a rank, an address or a variable.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from generator.diagnostics import RecipegenError
from generator.engines import OWNED_ENV, rank_command, rank_env, serve_port, served_model_name
from generator.model import (COMPILER, DEFAULT, HF_CACHE_IN_CONTAINER, RECIPE_SCALARS, Arg, Cluster, Node,
                             NodeChoiceError, Origin, Recipe, Ulimits)
from generator.units import size_bytes

LABEL_PREFIX = "dev.recipegen"
RESTART_ATTEMPTS = 3  # a rank whose peers are gone must not restart forever


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
class NodePlan:
    recipe_id: str
    node: Node
    rank: int
    model: str  # what the rank loads: a Hugging Face id or a path in the container
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

    @property
    def is_head(self) -> bool:
        return self.rank == 0

    @property
    def entrypoint(self) -> tuple[Arg, ...]:
        return self.command[: self.entrypoint_words]

    @property
    def arguments(self) -> tuple[Arg, ...]:
        return self.command[self.entrypoint_words:]



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
    nodes = tuple(_plan_node(recipe, cluster, chosen, rank, digest, project_root, out_dir)
                  for rank in range(len(chosen)))
    return RecipePlan(recipe, cluster, nodes, digest, serve_port(recipe), served_model_name(recipe),
                      _shown(recipe.path, project_root), _shown(cluster.path, project_root))


def _plan_node(recipe: Recipe, cluster: Cluster, chosen: tuple[Node, ...], rank: int, digest: str, root: Path,
               out_dir: Path) -> NodePlan:
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
    env = _environment(recipe, cluster, chosen, rank)
    # The whole argv is pinned (entrypoint + command), so an image's own ENTRYPOINT (vllm-openai has
    # ["vllm", "serve"]) cannot run in front of it.
    entrypoint_words = len(recipe.entrypoint) if starts_with_entrypoint else 1
    hf_origin = cluster.document.origin("cluster", ("hf_cache",)) if "hf_cache" in cluster.document.data else DEFAULT
    volumes = [Volume(node.expand_home(cluster.hf_cache), HF_CACHE_IN_CONTAINER, False, hf_origin)]
    volumes += [Volume(node.expand_home(m.host), m.container, m.read_only, m.origin) for m in recipe.mounts]
    labels = (
        (f"{LABEL_PREFIX}.recipe", recipe.id),
        (f"{LABEL_PREFIX}.cluster", cluster.name),
        (f"{LABEL_PREFIX}.node", node.name),
        (f"{LABEL_PREFIX}.rank", str(rank)),
        (f"{LABEL_PREFIX}.input-hash", digest),
    )
    return NodePlan(
        recipe_id=recipe.id, node=node, rank=rank, model=recipe.model, image=recipe.docker_image,
        build_context=_build_context(recipe, root, out_dir / recipe.id / node.name), command=tuple(words),
        entrypoint_words=entrypoint_words,
        env=env,
        pass_env=_pass_env(recipe, cluster, env),
        volumes=tuple(volumes), shm_size=recipe.shm_size,
        ulimits=cluster.ulimits, gpu=cluster.gpu, gpus=cluster.gpus_per_node, rdma=cluster.rdma, labels=labels,
        restart_attempts=RESTART_ATTEMPTS, stop_grace_period=cluster.stop_grace_period)


def _pass_env(recipe: Recipe, cluster: Cluster, env: tuple[EnvVar, ...]) -> tuple[str, ...]:
    """Names passed through from the deploying shell; one that also has a value here keeps the value (lint
    reports the clash)."""
    valued = {var.name for var in env}
    return tuple(dict.fromkeys(n for n in (*cluster.pass_env, *recipe.pass_env) if n not in valued))


def _environment(recipe: Recipe, cluster: Cluster, chosen: tuple[Node, ...], rank: int) -> tuple[EnvVar, ...]:
    """Cluster env, then the node's, then the recipe's, then what the compiler owns: later layers win."""
    doc, node = cluster.document, chosen[rank]
    layers: list[tuple[dict[str, str], callable]] = [
        (cluster.env, lambda k: doc.origin("cluster", ("env", k))),
        (node.env, lambda k: doc.origin(f"node {node.name}", ("nodes", node.index, "env", k))),
        (recipe.env, lambda k: recipe.env_origins[k]),
        (rank_env(recipe, cluster, chosen, rank), lambda k: COMPILER),
    ]
    merged: dict[str, EnvVar] = {}
    for layer, (values, origin_of) in enumerate(layers):
        for name, value in values.items():
            if name in OWNED_ENV and layer < 3:
                continue  # the compiler's per-rank value or none: lint says so where it was written
            previous = merged.get(name)
            overridden = (*previous.overrides, previous.origin) if previous else ()
            merged[name] = EnvVar(name, value, origin_of(name), overridden)
    return tuple(merged.values())


def _build_context(recipe: Recipe, root: Path, compose_dir: Path) -> str | None:
    """`docker_image_dir` names a build context: beside the recipe, under images/, or at the project root."""
    if not recipe.docker_image_dir:
        return None
    base = recipe.image_dir_base
    for candidate in (base / recipe.docker_image_dir, root / "images" / recipe.docker_image_dir,
                      root / recipe.docker_image_dir):
        if (candidate / "Dockerfile").is_file():
            return _relative(candidate.resolve(), compose_dir.resolve())
    return None


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
            "stop_grace_period", "env",
            "pass_env")},
        "ulimits": [cluster.ulimits.memlock, cluster.ulimits.stack],
        "nodes": [[n.name, n.address, n.context, n.home, n.env] for n in chosen],
    }
    blob = json.dumps(resolved, sort_keys=True, ensure_ascii=False, default=list).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]
