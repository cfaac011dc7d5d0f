"""Mod folders found where the peers find them (sparkrun's core/mods.py order, eugr's launch-cluster.sh): beside
the recipe file (`<ref>`, then `mods/<ref>`; a leading `mods/` of the reference is dropped first), then in the
registry the file belongs to (the nearest parent with a `.sparkrun/registry.yaml`: its registries' `mods`
folders, the file's own registry first), then `mods/<name>` in the nearest parent folder that has it (eugr's
checkout, where recipes/ and mods/ are siblings); then, where sparkrun's last resort (its registry named `eugr`,
eugr/spark-vllm-docker's own mods/) would look: each `--mods-dir DIR` given (`DIR/<ref>`, then `DIR/mods/<ref>`: a
mods folder or a checkout of eugr's repository), then sparkrun's own checkout of that registry when it is present
(`~/.cache/sparkrun/registries/eugr/mods/<ref>`: RegistryManager.cache_root / name, mods_subpath "mods", in sparkrun's
core/registry.py and core/mods.py). `@eugr/<ref>` (sparkrun's scoped form) is looked for in those last two places.
A mod is a folder with a run.sh; its files are read by build's own reader (generator/resolve/mods.py), so an import
refuses what build refuses (a link out of the folder)."""

from __future__ import annotations

from pathlib import Path

from generator.diagnostics import RecipegenError, display_path
from generator.check.launch import mods_could_exceed
from generator.importers.base import Field, ModCopy
from generator.importers.yamlfile import YamlFile, read
from generator.resolve.model import DEFAULT, Mod
from generator.resolve.mods import inline_refusal, read_files, ref_problem


# sparkrun's clone of the registry named eugr (RegistryManager.cache_root, core/registry.py) and its mods_subpath
SPARKRUN_EUGR_MODS = Path(".cache") / "sparkrun" / "registries" / "eugr" / "mods"


def find_mods(doc: YamlFile, refs: object, mods_dirs: tuple[Path, ...] = ()) -> tuple[ModCopy, ...]:
    if refs in (None, []):
        return ()
    if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
        raise doc.error("mods", "must be a list of mod folder names")
    found: list[ModCopy] = []
    for i, ref in enumerate(refs):
        scope, _, rest = ref[1:].partition("/") if ref.startswith("@") else ("", "", ref)
        if ref.startswith("@") and scope != "eugr":
            raise doc.error("mods", f"mods[{i}] '{ref}' names the sparkrun registry '{scope}': copy that mod folder "
                                    f"beside the recipe file and name it by its folder")
        problem = ref_problem(ref, any_step=True)
        if problem:  # `..` would copy the recipe's own folder (or the project) over the imported recipe
            raise doc.error("mods", f"mods[{i}]: {problem}")
        rel = rest.removeprefix("mods/")
        near, parents = ([], []) if scope else _candidates(doc.path.resolve(), rel)
        fallback = _fallback(rel, mods_dirs)
        folder = next((p for p in near + parents + fallback if (p / "run.sh").is_file()), None)
        if folder is None:
            shown = ", ".join([str(p) for p in near] + [f"mods/{rel} in every parent folder"] * bool(parents)
                              + [str(p) for p in fallback])
            raise doc.error("mods", f"mods[{i}] '{ref}' not found (a folder with a run.sh): looked at {shown}; give "
                                    f"the folder holding it (a checkout of eugr/spark-vllm-docker) with --mods-dir")
        if any(m.name == folder.name for m in found):
            raise doc.error("mods", f"mods[{i}] '{ref}' has the folder name of an earlier mod: both would land in "
                                    f"the container as /workspace/mods/{folder.name}")
        # build's own reading of a mod folder (a link out of it, a linked folder, a binary file: refused at the
        # peer's `mods` line), and what it read is what the import writes: the files build would inline
        shown = f"mods[{i}] '{ref}' ({display_path(folder)})"
        files = read_files(folder, lambda m: doc.error("mods", f"{shown}: {m}"))
        found.append(ModCopy(folder.name, folder, f"{doc.name}: mods[{i}] ({ref})", files))
    return tuple(found)


def mods_fields(mods: tuple[ModCopy, ...], source: str) -> list[Field]:
    """The recipe's `mods`, and `mods_transport = "image"` when they cannot travel inside the generated files
    (a binary file, over 1 MiB, or a Swarm launcher they could take past 128 KiB): the peers copy any mod in
    (`docker cp`), so an import carries it in an image built from the recipe's image instead of refusing it."""
    if not mods:
        return []
    fields = [Field("mods", [f"mods/{m.name}" for m in mods], source)]
    as_built = tuple(Mod(m.name, f"mods/{m.name}", m.files, DEFAULT) for m in mods)
    if mods_could_exceed((m.name, m.source, m.files) for m in as_built) or any(map(inline_refusal, as_built)):
        size = sum(m.size for m in as_built)
        fields.append(Field("mods_transport", "image", f"the mods ({size // 1024} KiB) are too large to travel "
                                                       "inside the compose files; the peer copies them in"))
    return fields


def _candidates(recipe: Path, rel: str) -> tuple[list[Path], list[Path]]:
    """Beside the file and in its registry; then mods/<rel> in each parent folder."""
    base = recipe.parent
    tried = [base / rel, base / "mods" / rel]
    for parent in base.parents:
        manifest = parent / ".sparkrun" / "registry.yaml"
        if manifest.is_file():
            tried += [parent / sub / rel for sub in _registry_mods(manifest, recipe.relative_to(parent))]
            break
    return tried, [p / "mods" / rel for p in base.parents]


def _fallback(rel: str, mods_dirs: tuple[Path, ...]) -> list[Path]:
    """Where eugr's own mods may be: each --mods-dir (a mods folder, or a checkout holding mods/), then sparkrun's
    checkout of its `eugr` registry."""
    return [p for d in mods_dirs for p in (d / rel, d / "mods" / rel)] + [Path.home() / SPARKRUN_EUGR_MODS / rel]


def _registry_mods(manifest: Path, recipe: Path) -> list[str]:
    """The `mods` folders a registry manifest declares, the one of the registry holding `recipe` first."""
    try:
        data = read(manifest).data  # within the same bounds as a recipe file
    except RecipegenError:
        return []
    entries = data.get("registries")
    mods: list[tuple[bool, str]] = []
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict):
            sub = entry.get("mods_subpath", entry.get("mods"))
            recipes = str(entry.get("subpath", entry.get("recipes", "recipes")))
            if isinstance(sub, str) and sub:
                mods.append((not recipe.is_relative_to(recipes), sub))
    return [sub for _, sub in sorted(mods, key=lambda m: m[0])]
