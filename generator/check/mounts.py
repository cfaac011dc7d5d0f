"""Lint rules over what the container sees at its paths: a model given as a container path must be on a mount
(or in the image), else the engine finds nothing to load."""

from __future__ import annotations

import posixpath

from generator.check.registry import ERROR, WARNING, Findings, rule
from generator.engines.ranks import draft_models
from generator.engines.written import Written, written_paths
from generator.resolve.model import (DEFAULT, HF_CACHE_IN_CONTAINER, Cluster, ContainerOptions, Mount, Origin,
                                     Recipe, container_target)
from generator.resolve.modelid import read_model


def _reaches(target: str, path: str) -> bool:
    return path == target or path.startswith(target.rstrip("/") + "/")


def _where(recipe: Recipe, model: str) -> tuple[Origin, str]:
    """Where a model is named: `model`, or the args word (a draft model's flag or JSON) that holds it."""
    if model == recipe.model:
        return recipe.origins["model"], "model"
    for group in recipe.flag_groups:
        if any(model in arg.word for arg in group.args):
            return group.args[0].origin, "args"
    return recipe.origins.get("args", recipe.origins["model"]), "args"


@rule("model-mount", WARNING, "a model given as a container path that no mount reaches (unless the image holds it), "
                              "or as a relative path")
def _model_mount(recipe: Recipe, cluster: Cluster | None) -> Findings:
    targets = [(HF_CACHE_IN_CONTAINER, "the Hugging Face cache")] + [
        (container_target(m.container), f"extra_mounts '{m.container}'") for m in recipe.mounts]
    for model in (recipe.model, *draft_models(recipe)):
        if read_model(model).hub_id is not None:
            continue  # a Hugging Face id: the engine finds it in the cache (or downloads it)
        if not model.startswith("/"):
            origin, key = _where(recipe, model)
            yield (origin, key, f"'{model}' is a relative path in the container (not a Hugging Face id): the engine "
                                "reads it from the image's working directory, which no mount is known to reach; "
                                "unless the image holds it there, give the absolute path under an [[extra_mounts]] "
                                "`container` folder")
            continue
        path = posixpath.normpath(model)
        if any(_reaches(target, path) for target, _ in targets):
            continue
        origin, key = _where(recipe, model)
        mounts = ", ".join(f"{target} ({what})" for target, what in targets)
        yield (origin, key, f"'{model}' is a path in the container that no mount reaches (mounts: {mounts}): "
                            "unless the image holds it, the engine finds no model there; add an [[extra_mounts]] "
                            "whose `container` folder holds it")


@rule("mount-target", ERROR, "an extra mount on /, on a path the compiler mounts or over a path it writes (its "
                             "launcher, the mods, vLLM's Ray settings ...), or twice on one folder")
def _mount_target(recipe: Recipe, cluster: Cluster | None) -> Findings:
    reserved = {HF_CACHE_IN_CONTAINER: "the Hugging Face cache (set hf_cache in the cluster)",
                "/dev/shm": "shared memory (set shm_size)"}
    written = written_paths(recipe, cluster)
    seen: dict[str, Mount] = {}
    for mount in recipe.mounts:  # compared as the container resolves them: //dev/shm is /dev/shm
        target = container_target(mount.container)
        over = next((w for w in written if _overlaps(target, w)), None)
        if target == "/":
            yield mount.origin, "extra_mounts", f"'{mount.container}' is the container's root: Docker refuses it"
        elif over is not None:
            how = "is" if target == over.path else "is inside" if target.startswith(over.path + "/") else "holds"
            yield (mount.origin, "extra_mounts",
                   f"'{mount.container}' {how} {over.path} ({over.what}), which recipegen writes into the container: "
                   "the mount would hide it, or take recipegen's writes onto the host; mount elsewhere")
        elif target in reserved:
            yield mount.origin, "extra_mounts", f"'{mount.container}' is {reserved[target]}; mount elsewhere"
        elif target in seen:
            first = seen[target]
            yield (mount.origin, "extra_mounts",
                   f"'{mount.container}' and '{first.container}' (line {first.origin.line}) are both {target}: "
                   "one folder takes one mount; keep one")
        else:
            seen[target] = mount


def _overlaps(target: str, written: Written) -> bool:
    """A mount on the path, on a folder above it, or (for a folder recipegen owns whole) on a path inside it."""
    path = written.path
    return (target == path or (written.above and path.startswith(target.rstrip("/") + "/"))
            or (written.folder and target.startswith(path + "/")))


@rule("container-user", ERROR, "a non-root container_user that mods cannot run as: a user name, or an empty mod file")
def _container_user(recipe: Recipe, cluster: Cluster | None) -> Findings:
    """Mod files reach the container as Compose configs, in folders Docker creates as root; Compose gives a file
    to a user only by uid, and the launcher (running as that user) must create the mod's empty files itself."""
    given = recipe.container.get("container_user")  # the schema made it a string
    user = str(given) if given else (cluster.container.container_user if cluster else None)
    options = ContainerOptions(container_user=user)
    if options.as_root or not recipe.mods:
        return
    origin = recipe.origins.get("container_user") or recipe.origins["mods"]
    key = "container_user" if "container_user" in recipe.origins else "mods"
    if options.numeric_user is None:
        yield (origin, key, f"container_user '{user}' is a name: Compose gives the mods' files to a user by uid "
                            "only, and a name's uid is in the image's /etc/passwd, which compiling cannot read; "
                            "write the numeric UID[:GID] (`docker run --rm IMAGE id USER` shows it)")
    for mod in recipe.mods:
        for file in mod.files:
            if not file.size:
                yield (mod.origin, "mods",
                       f"mod '{mod.source}': {file.path} is empty, so the launcher creates it (Compose copies no "
                       f"empty config), in a folder Docker makes as root: as container_user '{user}' it cannot; "
                       "give the file content (a comment), or run as root")


@rule("shm-ignored", WARNING, "`shm_size` with `ipc = \"host\"`: the container uses the node's /dev/shm, and Docker "
                              "ignores the size", needs_cluster=True)
def _shm_ignored(recipe: Recipe, cluster: Cluster | None) -> Findings:
    ipc = recipe.container.get("ipc", cluster.container.ipc if cluster else None)
    written = recipe.origins.get("shm_size")
    if ipc == "host" and written is not None and written is not DEFAULT:
        where = "the recipe's" if "ipc" in recipe.container else "the cluster's"
        yield (written, "shm_size", f"shm_size {recipe.shm_size} has no effect: with {where} ipc = \"host\" the "
                                    "container shares the node's /dev/shm, whose size the node sets; drop shm_size, "
                                    "or use ipc = \"private\" for a /dev/shm of this size")
