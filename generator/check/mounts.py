"""Lint rules over what the container sees at its paths: a model given as a container path must be on a mount
(or in the image), else the engine finds nothing to load."""

from __future__ import annotations

import posixpath

from generator.check.registry import WARNING, Findings, rule
from generator.engines.ranks import draft_models
from generator.resolve.model import HF_CACHE_IN_CONTAINER, Cluster, Origin, Recipe, container_target
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
