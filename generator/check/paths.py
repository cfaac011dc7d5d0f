"""Lint rules over the paths a recipe gives: its build context and Dockerfile, its mods and its parents.

Every path must stay inside the project: out/ is committed and rebuilt by other clones, which have the project
and nothing around it (`outside-project`, one check for every key naming a path). A build context must be one
Docker can build (`build-context`), and build settings that build nothing are said (`build-settings`).
"""

from __future__ import annotations

from pathlib import Path

from generator.check.registry import ERROR, WARNING, Findings, rule
from generator.diagnostics import display_path
from generator.resolve.buildcontext import find_build_context
from generator.resolve.model import Cluster, Origin, Recipe
from generator.resolve.project import Project

PORTABLE = "out/ is committed and rebuilt from other clones, which hold the project and nothing around it"


def project_root(recipe: Recipe) -> Path:
    """The project the recipe belongs to: the nearest folder above it with recipes/ or cluster.toml; for a recipe
    in no project, the folder holding its folder (as recipes/ holds recipes)."""
    found = Project.around(recipe.path)
    return (found.root if found else recipe.path.resolve().parent.parent).resolve()


def outside(path: Path, root: Path) -> bool:
    """`path`, its links followed, leads out of `root`."""
    return not path.resolve().is_relative_to(root)


def _path_problem(given: str, found: Path, root: Path) -> str | None:
    """Why a path a recipe gives cannot be rebuilt by another clone: absolute, or leading out (`..`, a link)."""
    if outside(found, root):
        return (f"'{given}' is {found.resolve()}, which is outside the project ({display_path(root)}): {PORTABLE}; "
                "move it into the project")
    if Path(given).is_absolute():
        return (f"'{given}' is an absolute path, which a clone at another path does not have: {PORTABLE}; give "
                "it relative to the recipe")
    return None


@rule("outside-project", ERROR, "a path (docker_image_dir, dockerfile, mods, extends) absolute or leading out of "
                                "the project: another clone could not rebuild out/")
def _outside_project(recipe: Recipe, cluster: Cluster | None) -> Findings:
    root = project_root(recipe)
    context = find_build_context(recipe, root)
    if context is not None and recipe.docker_image_dir:
        problem = _path_problem(recipe.docker_image_dir, context.folder or context.looked[0], root)
        if problem:
            yield recipe.origins["docker_image_dir"], "docker_image_dir", problem
        elif recipe.dockerfile and context.dockerfile_path is not None:
            problem = _path_problem(recipe.dockerfile, context.dockerfile_path, root)
            if problem:
                yield recipe.origins["dockerfile"], "dockerfile", problem
    for mod in recipe.mods:
        if mod.folder is not None:
            problem = _path_problem(mod.source, mod.folder, root)
            if problem:
                yield mod.origin, "mods", f"mod {problem}"
    for child, parent in zip(recipe.documents, recipe.documents[1:]):
        ref = str(child.data.get("extends", ""))
        problem = _path_problem(ref, parent.path, root)
        if problem:
            layer = "recipe" if child is recipe.document else f"parent recipe {child.path.parent.name}"
            yield child.origin(layer, ("extends",), value=True), "extends", f"parent recipe {problem}"


def _leaves(recipe: Recipe, folder: Path, root: Path) -> bool:
    """The context or its Dockerfile is outside the project: outside-project says so, and nothing more is said."""
    given = [(recipe.docker_image_dir or "", folder)]
    if recipe.dockerfile:
        given.append((recipe.dockerfile, folder / recipe.dockerfile))
    return any(_path_problem(text, path, root) for text, path in given)


def _origin(recipe: Recipe, *keys: str) -> tuple[Origin, str]:
    key = next(k for k in keys if k in recipe.origins)
    return recipe.origins[key], key


@rule("build-context", ERROR, "a build context Docker cannot build: its folder lacks the Dockerfile")
def _build_context(recipe: Recipe, cluster: Cluster | None) -> Findings:
    root = project_root(recipe)
    context = find_build_context(recipe, root)
    if context is None or context.folder is None or context.usable or _leaves(recipe, context.folder, root):
        return
    origin, key = _origin(recipe, "dockerfile", "docker_image_dir")
    yield (origin, key, f"the build context {display_path(context.folder)} holds no {context.dockerfile}: Docker "
                        "refuses to build it (\"failed to read dockerfile\"); add it, or name the one it holds with "
                        "`dockerfile`")


@rule("build-settings", WARNING, "build settings that build nothing (docker_image_dir naming no folder, dockerfile or "
                                 "build_args without it), or a Dockerfile outside its context")
def _build_settings(recipe: Recipe, cluster: Cluster | None) -> Findings:
    root = project_root(recipe)
    context = find_build_context(recipe, root)
    if context is None:
        for key in ("dockerfile", "build_args"):
            if key in recipe.origins and (recipe.dockerfile if key == "dockerfile" else recipe.build_args):
                yield (recipe.origins[key], key, f"`{key}` without `docker_image_dir` builds nothing: no `build:` is "
                                                 "written and the image is pulled as `docker_image`; name the build "
                                                 "context with `docker_image_dir`, or remove it")
        return
    if _leaves(recipe, context.folder or context.looked[0], root):
        return  # outside-project says it
    if context.folder is None:
        looked = ", ".join(display_path(p) for p in context.looked)
        yield (recipe.origins["docker_image_dir"], "docker_image_dir",
               f"'{recipe.docker_image_dir}' is no folder (looked for {looked}): no `build:` is written and the "
               "image is pulled as `docker_image`; add the folder or remove the key")
        return
    path = context.dockerfile_path
    if recipe.dockerfile and path is not None and not path.resolve().is_relative_to(context.folder.resolve()):
        yield (recipe.origins["dockerfile"], "dockerfile",
               f"'{recipe.dockerfile}' lies outside its build context {display_path(context.folder)}: Compose's "
               "BuildKit builds it, but the classic builder (DOCKER_BUILDKIT=0) refuses a Dockerfile outside the "
               "context; move it into the folder")
