"""What an importer returns, and the one interface every peer format implements.

An import is data until the writer turns it into TOML: each recipe value with the peer key (or the launcher
behaviour) it came from, the mods to copy, and every peer key that has no recipegen home, named with what to do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Union

from generator.importers.yamlfile import YamlFile
from generator.resolve.model import ModFile

TomlValue = Union[str, int, float, bool, list[Any], dict[str, Any]]  # what TOML holds ([bench] nests)


@dataclass(frozen=True)
class Field:
    """One recipe key: its value and why it is there (`deepseek.yaml: defaults.max_model_len`, or the launcher
    behaviour it reproduces)."""

    key: str
    value: TomlValue
    source: str


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str
    source: str


@dataclass(frozen=True)
class ModCopy:
    """A mod folder found where the peer finds it, copied into the recipe's folder as mods/<name>: its files as
    build reads them (generator/resolve/mods.py), so the copy holds exactly what build would inline."""

    name: str
    folder: Path
    source: str
    files: tuple[ModFile, ...] = ()


@dataclass(frozen=True)
class NotCarried:
    """A peer key with no recipegen home: named, one line, with what to do."""

    key: str
    line: int | None
    message: str


def parallel_size(key: str, value: int | None, source: str, kind: str) -> Field:
    """A parallel size as the engine gets it: the command's flag, else the engine's default 1."""
    return Field(key, value or 1, f"{source} ({kind} parallel flag)" if value else f"{source}: no flag, the engine's 1")


def peer_key(doc: YamlFile, recipe_key: str, source: str) -> tuple[str, ...]:
    """The peer file's key a value came from, as its comment names it (`x.yaml: executor_config.shm_size, ...`),
    where the file has that key; else the recipe key (a launcher's behaviour has no line in the file)."""
    said = source.removeprefix(f"{doc.name}: ")
    if said != source:
        path = tuple(re.split(r"[ ,(:]", said, maxsplit=1)[0].split("."))
        if doc.line(*path) is not None:
            return path
    return (recipe_key,)


def scalar_default(doc: YamlFile, name: str, value: object) -> None:
    """A default that fills a placeholder must be one value: a list or a mapping would reach the command as its
    Python text (`['a', 'b']`), which no engine reads, and the recipe would not boot."""
    if isinstance(value, (list, dict)):
        kind = "a list" if isinstance(value, list) else "a mapping"
        shown = str(value) if len(str(value)) <= 40 else str(value)[:37] + "..."
        raise doc.error(("defaults", name), f"is {kind}: the command's {{{name}}} would become its Python text "
                                            f"{shown}, which the engine cannot read; give the one value the "
                                            "command needs (a string)")


def launcher_env(env: list[EnvVar], added: list[tuple[str, str, str]]) -> list[EnvVar]:
    """The (name, value, source) a peer's launcher sets in every container, each where the recipe's own env (or
    the command's, or an earlier one of these) does not set it: the launcher's defaults yield to the recipe."""
    have = {e.name for e in env}
    found = []
    for name, value, source in added:
        if name not in have:
            found.append(EnvVar(name, value, source))
            have.add(name)
    return found


def no_model(doc: YamlFile) -> NotCarried:
    return NotCarried("command", doc.line("command"), "names no model: the engine would serve its default one; "
                                                      "the recipe serves `model`")


@dataclass(frozen=True)
class ImportedRecipe:
    source: Path
    peer: str  # "eugr v1", "sparkrun v2"
    fields: tuple[Field, ...]
    env: tuple[EnvVar, ...]
    mods: tuple[ModCopy, ...]
    not_carried: tuple[NotCarried, ...]
    notes: tuple[str, ...] = field(default=())  # header comments: which launcher code the import reproduces
    bench: tuple[Field, ...] = field(default=())  # the [bench] table, when the recipe schema has one


@dataclass(frozen=True)
class ImportOptions:
    ray: bool = False  # eugr: keep Ray, as run-recipe.py's --ray does (its default is without Ray)
    mods_dirs: tuple[Path, ...] = ()  # --mods-dir: where eugr's own mods are (a checkout of its repository)


class Importer(Protocol):
    """One peer recipe format."""

    peer: str

    def accepts(self, doc: YamlFile) -> bool:
        """Whether the file is in this importer's format (its recipe_version and keys say so)."""

    def convert(self, doc: YamlFile, options: ImportOptions) -> ImportedRecipe:
        """The recipe the peer's launcher would run, or a RecipegenError naming file, line and key."""
