"""Load a recipe's mods: folders holding a `run.sh` and the files it uses (eugr/spark-vllm-docker's layout).

A mod travels one of two ways, and a node needs nothing but its Docker context either way: no SSH, no host path,
no copy made by hand.
- Inline (the default while it fits): its files are inside the generated compose file (Compose `configs` with
  inline content; here-documents in the Swarm stack). That makes them YAML text: UTF-8 files, at most 1 MiB a mod,
  read in a diff of out/.
- In a derived image (`mods_transport = "image"`, or "auto" when the inline form cannot carry them): the compose
  file builds `FROM docker_image` plus one `COPY` of each mod folder, its build context the folder the mods sit
  in, sent by Compose through the Docker API; `recipegen images` builds it and sends it node to node for Swarm.
  Any size, any bytes; the files stay where they are reviewed, and the image's tag is a hash of them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable

from generator.diagnostics import RecipegenError
from generator.read.tomldoc import TomlDocument
from generator.resolve.model import Mod, ModFile

MOD_ENTRY = "run.sh"
MAX_MOD_BYTES = 1024 * 1024  # all files of one mod: they are committed inside every node's compose file
_SKIPPED = ("__pycache__", ".git")  # folders a mod may hold that are not its files
_SAFE_NAME = re.compile(r"[A-Za-z0-9._+-]+")  # one path segment, as it lands in the container


def plain_name(name: str) -> bool:
    """One path segment that names itself: _SAFE_NAME's characters, and neither `.` nor `..` (the folder holding
    it, or its parent)."""
    return bool(_SAFE_NAME.fullmatch(name)) and name not in (".", "..")


def load_mods(doc: TomlDocument, layer: str, refs: list[str], project_mods: Path) -> tuple[Mod, ...]:
    """The mods `refs` names, each a folder relative to the recipe file `doc` or a name under the project's
    mods/; every problem is an error on the `mods` element that names it."""
    mods: list[Mod] = []
    names: dict[str, int] = {}
    for i, ref in enumerate(refs):
        def fail(message: str) -> RecipegenError:
            return RecipegenError(doc.diagnostic(("mods", i), message))

        problem = ref_problem(ref)
        if problem:
            raise fail(problem)
        folder = _find(doc.path.parent, ref, project_mods)
        if folder is not None and _holds_recipe(folder, doc.path):
            raise fail(f"mod '{ref}' is the recipe's own folder or one above it: a mod is a folder of its own")
        if folder is None:
            raise fail(f"mod '{ref}' not found: looked beside the recipe and in {project_mods}")
        if not (folder / MOD_ENTRY).is_file():
            raise fail(f"mod '{ref}' has no {MOD_ENTRY} ({folder}): a mod is a folder with a {MOD_ENTRY} to run")
        name = folder.resolve().name
        if not plain_name(name):
            raise fail(f"mod folder name '{name}' is not a plain file name (letters, digits, '.', '_', '+', '-')")
        if name in names:
            raise fail(f"mod '{ref}' has the same folder name as mods[{names[name]}]: both would land in "
                       f"the container's mods folder as '{name}'")
        names[name] = i
        mods.append(Mod(name, ref, read_files(folder, fail), doc.origin(layer, ("mods", i), value=True),
                        folder))
    return tuple(mods)


def ref_problem(ref: str, any_step: bool = False) -> str | None:
    """Why a mod reference names no mod folder of its own: a last step `.` or `..` makes it the recipe's folder, a
    parent or the whole project (an import would copy it over the recipe; an image's context would be the root).
    `any_step`: a `.` or `..` anywhere (import: a peer's reference, copied to mods/<name>, names a folder only)."""
    steps = [step for step in ref.replace("\\", "/").split("/") if step]
    if not steps or steps[-1] in (".", "..") or (any_step and any(step in (".", "..") for step in steps)):
        return (f"mod '{ref}' has a '.' or '..' step: a mod is named by its own folder (beside the recipe, or "
                "under mods/), never by a path through another folder")
    return None


def _holds_recipe(folder: Path, recipe: Path) -> bool:
    """The folder is the recipe's own or one above it: as a mod it would carry the recipe (and the project)."""
    return recipe.resolve().parent.is_relative_to(folder.resolve())


def _find(base: Path, ref: str, project_mods: Path) -> Path | None:
    """Beside the recipe, then under the project's mods/ (sparkrun's order; `mods/x` and `x` name the same)."""
    bare = ref.removeprefix("mods/")
    for candidate in (base / ref, base / "mods" / bare, project_mods / bare):
        if candidate.is_dir():
            return candidate
    return None


TRANSPORTS = ("auto", "inline", "image")
IMAGE_HINT = 'set mods_transport = "image" to carry the mods in an image built from docker_image'


def inline_refusal(mod: Mod) -> str | None:
    """Why the mod's files cannot travel inside the compose file (None: they can)."""
    if mod.size > MAX_MOD_BYTES:
        return (f"mod '{mod.source}' holds {mod.size // 1024} KiB, more than the {MAX_MOD_BYTES // 1024} KiB a "
                "mod may carry inside every node's compose file")
    for f in mod.files:
        try:
            text = f.data.decode("utf-8")
        except UnicodeDecodeError:
            return f"mod file '{mod.source}/{f.path}' is not UTF-8 text, and inline mod files travel inside YAML"
        if "\x00" in text:
            return f"mod file '{mod.source}/{f.path}' contains a NUL character, which YAML cannot carry"
    return None


def in_image(transport: str, mods: tuple[Mod, ...], at: Callable[[int, str], RecipegenError]) -> bool:
    """Whether the mods travel in a derived image: "image" says so; "auto" when one cannot travel inline;
    "inline" refuses such a mod (`at(i, message)`: the error at mods[i])."""
    if not mods or transport == "image":
        return bool(mods)
    for i, mod in enumerate(mods):
        why = inline_refusal(mod)
        if why and transport == "inline":
            raise at(i, f"{why}; {IMAGE_HINT}")
        if why:
            return True
    return False


def image_refusal(mod: Mod) -> str | None:
    """Why `COPY` of the mod's folder would not put into the image exactly the files recipegen read and hashed: a
    link (COPY carries the link, which may dangle in the container) or a folder recipegen skips (COPY takes it)."""
    if mod.folder is None:
        return None
    if mod.folder.is_symlink():
        return (f"mod folder '{mod.source}' is a symlink: the image's build context would be the folder it points "
                "into (the project root, say), sent whole to Docker; put the mod folder itself beside the others")
    for dirpath, dirnames, filenames in os.walk(mod.folder, followlinks=False):
        for name in sorted(dirnames):
            if name in _SKIPPED:
                relative = (Path(dirpath) / name).relative_to(mod.folder).as_posix()
                return (f"mod '{mod.source}' holds '{relative}', which recipegen does not read but the image's COPY "
                        "would carry: remove it from the mod folder")
        for name in sorted(filenames):
            if (Path(dirpath) / name).is_symlink():
                relative = (Path(dirpath) / name).relative_to(mod.folder).as_posix()
                return (f"mod file '{mod.source}/{relative}' is a symlink, which the image's COPY would carry as a "
                        "link (dangling in the container): put the file itself in the mod folder")
    return None


def image_context(mods: tuple[Mod, ...], at: Callable[[int, str], RecipegenError]) -> Path:
    """The build context of the derived image: the one folder every mod sits in (Compose sends one context)."""
    parents = {m.folder.resolve().parent for m in mods if m.folder is not None}
    if len(parents) != 1:
        shown = ", ".join(sorted(str(p) for p in parents))
        raise at(0, f"mods carried in an image must sit in one folder, the image's build context; they are in "
                    f"{shown}: move them into one mods/ folder")
    context = parents.pop()
    if (context / ".dockerignore").exists():
        raise at(0, f"the mods' build context {context} holds a .dockerignore, which would drop from the image "
                    "files the image's tag hashes: remove it, or move the mods to a folder without one")
    return context


def read_files(folder: Path, fail: Callable[[str], RecipegenError]) -> tuple[ModFile, ...]:
    """The mod's files, read once for both ways they travel; `fail` makes the error of each refusal (build: at the
    recipe's `mods` element; import: at the peer file's `mods` line)."""
    if folder.resolve().name.startswith("-"):
        raise fail(f"mod folder name '{folder.resolve().name}' begins with '-': the image's COPY would read it as an "
                   "option (--link, --parents, --); rename the folder")
    files: list[ModFile] = []
    held = 0  # bytes read into memory: a mod's first MAX_MOD_BYTES (what can travel inline), the rest streamed
    root = folder.resolve()
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED)
        for d in dirnames:  # os.walk lists a linked folder but does not enter it: say so, never drop it silently
            if (Path(dirpath) / d).is_symlink():
                relative = (Path(dirpath) / d).relative_to(folder).as_posix()
                raise fail(f"mod folder '{relative}' is a symlink: recipegen does not follow linked folders; "
                           "copy the folder into the mod")
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            relative = path.relative_to(folder).as_posix()
            if not all(map(plain_name, relative.split("/"))):
                raise fail(f"mod file '{relative}' has a name that cannot travel in a compose file; rename it")
            if path.is_symlink() and not path.resolve().is_relative_to(root):
                raise fail(f"mod file '{relative}' is a symlink out of the mod folder")
            if not path.is_file():
                raise fail(f"mod file '{relative}' is not a regular file")
            stat = path.stat()
            held += stat.st_size
            content = _read_capped(path, MAX_MOD_BYTES) if held <= MAX_MOD_BYTES else None
            files.append(ModFile(relative, content, bool(stat.st_mode & 0o111) or relative == MOD_ENTRY,
                                 path, stat.st_size))
    return tuple(files)



def _read_capped(path: Path, cap: int) -> bytes:
    """The file, never more than `cap` bytes (one that grew since its stat is cut, and its hash says so)."""
    with path.open("rb") as f:
        return f.read(cap)
