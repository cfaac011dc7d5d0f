"""Mod folders found where the peers find them: beside the recipe file (`<ref>`, then `mods/<ref>`), then in the
nearest parent folder holding `mods/<name>` (a registry's or eugr's repository root)."""

from __future__ import annotations

from pathlib import Path

from generator.importers.base import ModCopy
from generator.importers.yamlfile import YamlFile


def find_mods(doc: YamlFile, refs: object) -> tuple[ModCopy, ...]:
    if refs in (None, []):
        return ()
    if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
        raise doc.error("mods", "must be a list of mod folder names")
    found: list[ModCopy] = []
    for i, ref in enumerate(refs):
        if ref.startswith("@"):
            raise doc.error("mods", f"mods[{i}] '{ref}' names a sparkrun registry: copy that mod folder beside "
                                    f"the recipe file and name it by its folder")
        rel = ref.removeprefix("mods/")
        base = doc.path.resolve().parent
        tried = [base / rel, base / "mods" / rel] + [p / "mods" / rel for p in base.parents]
        folder = next((p for p in tried if (p / "run.sh").is_file()), None)
        if folder is None:
            raise doc.error("mods", f"mods[{i}] '{ref}' not found: no folder with a run.sh at {tried[0]}, "
                                    f"{tried[1]} or mods/{rel} in any parent folder")
        found.append(ModCopy(folder.name, folder, f"{doc.name}: mods[{i}] ({ref})"))
    return tuple(found)
