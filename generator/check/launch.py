"""Lint rules over what recipegen's launcher carries: the Swarm stack passes each node's launcher, with the mods'
files and the setup commands in it, as one `sh -c` argument, and Linux refuses one argument longer than 32 pages
(MAX_ARG_STRLEN, 128 KiB): the task could not start. The size is known only once the launcher is rendered, which
needs the plan (a cluster) and Jinja: a recipe whose mods and setup are far below the limit is not rendered. Both
are later stages: the entry points hand the rule the renderer (generator/render/sizes.py)."""

from __future__ import annotations

from typing import Iterable

from generator.check.registry import ERROR, Findings, LauncherSizes, rendering_rule
from generator.diagnostics import RecipegenError
from generator.resolve.model import MODS_DIR, Cluster, ModFile, Recipe

MAX_INLINE_LAUNCHER = 128 * 1024 - 1
# Below this bound the launcher cannot reach the limit, so no rendering is needed: its own text (templates/
# launch.sh.j2, under 8 KiB), plus what the recipe carries (a setup command is written twice: echoed, then run),
# each byte at most 5 after shell quoting (shlex.quote writes a ' as '"'"').
_TEMPLATE_BYTES = 8 * 1024
_QUOTED = 5


_PER_MOD = 256  # the lines that run one mod
_PER_FILE = 64  # the fixed words of the line that writes one file (its path is counted apart)


def _carried(recipe: Recipe) -> int:
    """The bytes the recipe puts into the launcher, before quoting: each file's text, its comment and its path
    (written four times: mkdir, printf, chmod and the comment), each mod's run lines, and the setup commands."""
    carried = () if recipe.mods_in_image else recipe.mods  # in their image, the mods' files are not in it
    return (mods_carried((m.name, m.source, m.files) for m in carried)
            + 2 * sum(len(s.word.encode("utf-8")) for s in recipe.setup))


def mods_carried(mods: Iterable[tuple[str, str, tuple[ModFile, ...]]]) -> int:
    """_carried's share of the mods, each given as (name, source as the recipe names it, files)."""
    return sum(_PER_MOD + sum(f.size + len(source.encode("utf-8")) + _PER_FILE
                              + 4 * len(f"{MODS_DIR}/{name}/{f.path}") for f in files) for name, source, files in mods)


def mods_could_exceed(mods: Iterable[tuple[str, str, tuple[ModFile, ...]]]) -> bool:
    """Whether mods alone could take a node's launcher past the limit (an import then carries them in an image)."""
    return _TEMPLATE_BYTES + _QUOTED * mods_carried(mods) > MAX_INLINE_LAUNCHER


def could_exceed(recipe: Recipe) -> bool:
    return _TEMPLATE_BYTES + _QUOTED * _carried(recipe) > MAX_INLINE_LAUNCHER


@rendering_rule("stack-argument", ERROR,
                "a node's Swarm launcher (setup, mods' files) above Linux's 128 KiB per argument", needs_cluster=True)
def _stack_argument(recipe: Recipe, cluster: Cluster | None, launcher_sizes: LauncherSizes) -> Findings:
    if cluster is None or not could_exceed(recipe) or any(doc.dropped for doc in recipe.documents):
        return  # no plan to render (a recipe with invalid keys dropped is no ground to plan on)
    try:
        sizes = launcher_sizes(recipe, cluster)
    except RecipegenError:  # a plan that cannot be made is another rule's finding (too-many-nodes ...)
        return
    mods_bytes = 0 if recipe.mods_in_image else sum(m.size for m in recipe.mods)
    key = "mods" if mods_bytes > sum(len(s.word.encode("utf-8")) for s in recipe.setup) else "setup"
    for name, size in sizes:
        if size > MAX_INLINE_LAUNCHER:
            yield (recipe.origins[key], key,
                   f"the Swarm stack carries node {name}'s launcher with its setup and mod files as one `sh -c` "
                   f"argument of {size // 1024} KiB, above Linux's 128 KiB per argument: the task could not start; "
                   + ('set mods_transport = "image" to carry the mods in an image built from docker_image'
                      if key == "mods" else "put the large files in the image (docker_image_dir)"))
            return


