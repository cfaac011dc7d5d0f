"""Planning: a resolved recipe and its cluster into one NodePlan per rank (generator/plan/types.py), each word,
variable and mount with where it came from."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
from dataclasses import replace
from pathlib import Path
from typing import Any

from generator.diagnostics import RecipegenError
from generator.engines.ranks import draft_models, flag_value, rank_command, serve_port, served_model_name
from generator.plan.env import environment, pass_env, ray_settings
from generator.plan.types import (GROUP_KEY_ENV, HEALTH_PROBE_TLS, LABEL_PREFIX, MODS_DIR, ContainerFile, EnvVar,
                                  GroupWatch, HealthCheck, Launch, ModRun, ModsImage, NodePlan, RayHead, RayWorker, RecipePlan,
                                  Volume, duration_seconds)
from generator.read.units import duration_ns
from generator.resolve.buildcontext import find_build_context
from generator.resolve.mods import MOD_ENTRY
from generator.resolve.model import (COMPILER, CONTAINER_KEYS, DEFAULT, HF_CACHE_IN_CONTAINER, RECIPE_SCALARS, Arg,
                                     Cluster, ContainerOptions, Node, NodeChoiceError, Recipe)


def plan_recipe(recipe: Recipe, cluster: Cluster, project_root: Path, out_dir: Path) -> RecipePlan:
    try:
        chosen = cluster.nodes_for(recipe)
    except NodeChoiceError as exc:
        raise RecipegenError(recipe.document.diagnostic((exc.key,), str(exc))) from None
    digest = input_hash(recipe, cluster, chosen)
    container = container_options(recipe, cluster)
    envs = [environment(recipe, cluster, chosen, rank, container) for rank in range(len(chosen))]  # once each
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
    inline_mods = () if recipe.mods_in_image else recipe.mods
    shipped = [(f"{MODS_DIR}/{m.name}/{f.path}", f.text, f.executable, f"mod {m.source}: {f.path}")
               for m in inline_mods for f in m.files] + ray_settings(recipe, envs, env)
    mods_image = _mods_image(recipe, out_dir / recipe.id / node.name) if recipe.mods_in_image else None
    health = _health(recipe, container) if rank == 0 else None
    files = tuple(ContainerFile(f"{i}-{posixpath.basename(path)}", path, text, executable, about)
                  for i, (path, text, executable, about) in enumerate(shipped, 1))
    return NodePlan(
        recipe_id=recipe.id, node=node, rank=rank, model=recipe.model, models=(recipe.model, *draft_models(recipe)),
        image=mods_image.tag if mods_image is not None else recipe.docker_image, mods_image=mods_image,
        build_context=_build_context(recipe, root, out_dir / recipe.id / node.name), command=tuple(words),
        entrypoint_words=entrypoint_words,
        env=env,
        pass_env=pass_env(recipe, cluster, env) + ((GROUP_KEY_ENV,) if container.restart == "group" and len(chosen) > 1
                                                   else ()),
        volumes=tuple(volumes), shm_size=recipe.shm_size,
        ulimits=cluster.ulimits, gpu=cluster.gpu, gpus=cluster.gpus_per_node, rdma=cluster.rdma, labels=labels,
        stop_grace_period=cluster.stop_grace_period,
        container=container, build_args=tuple(sorted(recipe.build_args.items())), dockerfile=recipe.dockerfile,
        launch=launch, files=files, health=health, group=_group(recipe, cluster, chosen, container, health, digest))


# The mods' image is made on the nodes and must never be fetched by its name: not from Docker Hub (where anyone may
# own a `recipegen` namespace, and a Swarm node's agent tries to pull a tag at every task start whatever
# `--resolve-image` says), nor from any registry: `.invalid` is reserved (RFC 2606), so a pull fails at DNS and
# the node runs the image it has. The recipe id goes in the tag, which takes every recipe id (a repository path
# refuses `a_-b`).
MODS_IMAGE_REPOSITORY = "recipegen.invalid/mods"


def _mods_image(recipe: Recipe, compose_dir: Path) -> ModsImage:
    """The derived image the mods travel in. Its context is the one folder they sit in (resolve/mods.py checked
    it); run.sh is made executable as the inline form makes it, the other files keep their modes."""
    context = next(m.folder for m in recipe.mods if m.folder is not None).resolve().parent
    digest = hashlib.sha256(recipe.docker_image.encode("utf-8"))
    lines = [f"FROM {recipe.docker_image}"]
    for m in recipe.mods:
        digest.update(b"\0mod\0" + m.name.encode("utf-8"))
        for f in m.files:
            digest.update(b"\0%s\0%d\0%d\0" % (f.path.encode("utf-8"), f.executable, f.size))
            for chunk in f.chunks():  # as a stream: a mod in an image may be of any size
                digest.update(chunk)
        lines += [f"COPY {m.name} {MODS_DIR}/{m.name}",
                  f"COPY --chmod=0755 {m.name}/{MOD_ENTRY} {MODS_DIR}/{m.name}/{MOD_ENTRY}"]
    return ModsImage(f"{MODS_IMAGE_REPOSITORY}:{recipe.id[:100]}-{digest.hexdigest()[:16]}", recipe.docker_image,
                     _relative(context, compose_dir.resolve()), "\n".join(lines) + "\n", len(lines) - 1)


def _group(recipe: Recipe, cluster: Cluster, chosen: tuple[Node, ...], container: ContainerOptions,
           health: HealthCheck | None, digest: str) -> GroupWatch | None:
    """The group watch of a rank (`restart = "group"`): it stops its engine a second before Docker would kill it."""
    if container.restart != "group":
        return None
    return GroupWatch(head=chosen[0].address, port=cluster.group_port, ranks=len(chosen),
                      limit=container.restart_limit, window_s=duration_seconds(container.restart_window),
                      grace_s=max(1, duration_seconds(cluster.stop_grace_period) - 1),
                      health=health.url if health is not None else "", group=f"{recipe.id}:{digest}",
                      peers=tuple(n.address for n in chosen), model=served_model_name(recipe),
                      wedge_s=duration_seconds(container.wedge_timeout, 0),
                      boot_s=boot_bound(container.health_start_period))


BOOT_FLOOR_S = 600  # a period meant for Docker's healthcheck (`1s`, `2m`) must not end every real boot


def boot_bound(start_period: str) -> int:
    """How long the head's watch waits for /health's first answer before the boot counts as failed: the recipe's
    health_start_period (the same grace the healthcheck gives), at least BOOT_FLOOR_S; 0 (no bound) for `0`."""
    return max(BOOT_FLOOR_S, duration_seconds(start_period, 0)) if (duration_ns(start_period) or 0) > 0 else 0


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
            "group_port", "stop_grace_period", "env", "pass_env", "ray_join_timeout")},
        "ray_args": [[a.word for a in cluster.ray_args], [a.word for a in recipe.ray_args]],
        "container": [dataclasses.asdict(cluster.container), recipe.container],
        "build": [recipe.build_args, recipe.dockerfile],
        "setup": [a.word for a in recipe.setup],
        "mods": [[m.name, [[f.path, f.sha256() if recipe.mods_in_image else f.text,
                             f.executable] for f in m.files]] for m in recipe.mods]
                + [["image"]] * recipe.mods_in_image,
        "ulimits": [cluster.ulimits.memlock, cluster.ulimits.stack],
        "nodes": [[n.name, n.address, n.context, n.home, n.env] for n in chosen],
    }
    blob = json.dumps(resolved, sort_keys=True, ensure_ascii=False, default=list).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]
