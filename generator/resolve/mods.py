"""Load a recipe's mods: folders holding a `run.sh` and the files it uses (eugr/spark-vllm-docker's layout).

A mod's files travel inside the generated compose file (Compose `configs` with inline content; here-documents in
the Swarm stack), so a node needs nothing but its Docker context: no SSH, no copy made by hand. That makes them
YAML text: UTF-8 files only, and small enough to read in a diff.
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
_SAFE_NAME = re.compile(r"[A-Za-z0-9._+-]+")  # one path segment, as it lands in the container


def load_mods(doc: TomlDocument, layer: str, refs: list[str], project_mods: Path) -> tuple[Mod, ...]:
    """The mods `refs` names, each a folder relative to the recipe file `doc` or a name under the project's
    mods/; every problem is an error on the `mods` element that names it."""
    mods: list[Mod] = []
    names: dict[str, int] = {}
    for i, ref in enumerate(refs):
        def fail(message: str) -> RecipegenError:
            return RecipegenError(doc.diagnostic(("mods", i), message))

        folder = _find(doc.path.parent, ref, project_mods)
        if folder is None:
            raise fail(f"mod '{ref}' not found: looked beside the recipe and in {project_mods}")
        if not (folder / MOD_ENTRY).is_file():
            raise fail(f"mod '{ref}' has no {MOD_ENTRY} ({folder}): a mod is a folder with a {MOD_ENTRY} to run")
        name = folder.resolve().name
        if not _SAFE_NAME.fullmatch(name):
            raise fail(f"mod folder name '{name}' is not a plain file name (letters, digits, '.', '_', '+', '-')")
        if name in names:
            raise fail(f"mod '{ref}' has the same folder name as mods[{names[name]}]: both would land in "
                       f"the container's mods folder as '{name}'")
        names[name] = i
        mods.append(Mod(name, ref, read_files(folder, fail), doc.origin(layer, ("mods", i), value=True),
                        folder))
    return tuple(mods)


def _find(base: Path, ref: str, project_mods: Path) -> Path | None:
    """Beside the recipe, then under the project's mods/ (sparkrun's order; `mods/x` and `x` name the same)."""
    bare = ref.removeprefix("mods/")
    for candidate in (base / ref, base / "mods" / bare, project_mods / bare):
        if candidate.is_dir():
            return candidate
    return None


def read_files(folder: Path, fail: Callable[[str], RecipegenError]) -> tuple[ModFile, ...]:
    """The mod's files as they travel; `fail` makes the error of each refusal (build: at the recipe's `mods`
    element; import: at the peer file's `mods` line)."""
    files: list[ModFile] = []
    total = 0
    root = folder.resolve()
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", ".git"))
        for d in dirnames:  # os.walk lists a linked folder but does not enter it: say so, never drop it silently
            if (Path(dirpath) / d).is_symlink():
                relative = (Path(dirpath) / d).relative_to(folder).as_posix()
                raise fail(f"mod folder '{relative}' is a symlink: recipegen does not follow linked folders; "
                           "copy the folder into the mod")
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            relative = path.relative_to(folder).as_posix()
            if any(not _SAFE_NAME.fullmatch(part) for part in relative.split("/")):
                raise fail(f"mod file '{relative}' has a name that cannot travel in a compose file; rename it")
            if path.is_symlink() and not path.resolve().is_relative_to(root):
                raise fail(f"mod file '{relative}' is a symlink out of the mod folder")
            if not path.is_file():
                raise fail(f"mod file '{relative}' is not a regular file")
            data = path.read_bytes()
            total += len(data)
            if total > MAX_MOD_BYTES:
                raise fail(f"mod folder {folder} holds more than {MAX_MOD_BYTES // 1024} KiB: its files travel "
                           "inside every node's compose file; put large files in the image (docker_image_dir)")
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                raise fail(f"mod file '{relative}' is not UTF-8 text: mod files travel inside YAML; put binary "
                           "files in the image (docker_image_dir)") from None
            if "\x00" in text:
                raise fail(f"mod file '{relative}' contains a NUL character")
            files.append(ModFile(relative, text, bool(path.stat().st_mode & 0o111) or relative == MOD_ENTRY))
    return tuple(files)

