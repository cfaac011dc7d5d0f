"""An import as commented TOML, and its all-or-nothing write into recipes/<id>/.

Every value carries a comment naming its source (`# x.yaml: defaults.max_model_len`), so a reader can check the
translation line by line. Output is a function of the import alone: a second import of the same file gives the
same bytes. The folders are staged in a hidden folder at the project root and renamed into recipes/: a failure
leaves nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import tomllib
from pathlib import Path
from typing import Any, Callable

from generator.diagnostics import Diagnostic, RecipegenError, display_path
from generator.importers.base import ImportedRecipe, TomlValue
from generator.read import tomltext
from generator.write.lock import held

SCHEMA_LINE = "#:schema ../../schema/recipe.schema.json"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def render(imported: ImportedRecipe, schema_line: str = SCHEMA_LINE) -> str:
    src = imported.source.name
    out = [schema_line, f"# Imported by `recipegen import` from {src} ({imported.peer}), "
                        + "; ".join(imported.notes) + "."]
    out += ["# Each value names the peer key (or the launcher behaviour) it comes from."]
    for note in imported.not_carried:
        out.append(comment(f"not carried: {src}:{note.line or '?'}: {note.key}: {note.message}"))
    for field in imported.fields:
        out.extend(entry(field.key, field.value, field.source))
    if imported.env:
        out += ["", "[env]"]
        for var in imported.env:
            out.extend(entry(var.name, var.value, var.source))
    if imported.bench:
        out += ["", "[bench]"]
        for field in imported.bench:
            out.extend(entry(field.key, field.value, field.source))
    text = "\n".join(out) + "\n"
    _check(text, imported)
    return text


def entry(key: str, value: TomlValue, source: str) -> list[str]:
    name = tomltext.key(key)
    rendered = _value(value)
    if "\n" in rendered:  # a multi-line value: its comment goes above it
        return [comment(source), f"{name} = {rendered}"]
    return [f"{name} = {rendered}  {comment(source)}"]


def comment(text: str) -> str:
    return "# " + _CONTROL.sub(" ", text.replace("\n", " "))


def _value(value: TomlValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return tomltext.number(value)
    if isinstance(value, dict):
        return _inline(value)
    if isinstance(value, list):
        items = [_value(v) for v in value]
        if any("\n" in i for i in items) or sum(len(i) for i in items) > 80:
            return "[\n" + "".join(f"    {i},\n" for i in items) + "]"
        return "[" + ", ".join(items) + "]"
    return _string(value)


def _inline(table: dict[str, Any]) -> str:
    """An inline table, nested as deep as the value is (one line: TOML 1.0 inline tables cannot break)."""
    def one(v: Any) -> str:
        if isinstance(v, dict):
            return _inline(v)
        if isinstance(v, list):
            return "[" + ", ".join(one(i) for i in v) + "]"
        return tomltext.basic_string(v) if isinstance(v, str) else _value(v)  # a block cannot break a line here

    return "{" + ", ".join(f"{tomltext.key(k)} = {one(v)}" for k, v in table.items()) + "}"


def _string(text: str) -> str:
    """A multi-line command as a literal block (byte for byte, as written), anything else as a basic string."""
    if "\n" in text and "'''" not in text and not text.endswith("'") and not _CONTROL.search(text) \
            and "\r" not in text:
        return "'''\n" + text + "'''"
    return tomltext.basic_string(text)


def _check(text: str, imported: ImportedRecipe) -> None:
    """The TOML reads back as exactly the values imported (a writer bug must never reach a recipe)."""
    data = tomllib.loads(text)
    wrong = [f.key for f in imported.fields if data.get(f.key) != f.value]
    wrong += [f"bench.{f.key}" for f in imported.bench if data.get("bench", {}).get(f.key) != f.value]
    if wrong or {v.name: v.value for v in imported.env} != data.get("env", {}):
        raise ValueError(f"recipegen import wrote TOML that reads back differently: {wrong or ['env']}")


def schema_error(text: str, kind: str) -> Diagnostic | None:
    """The first error `validate` would find in the written file's schema (recipe or cluster), if any: an import
    never writes a file validate refuses."""
    from generator.read.schemas import validate_document
    from generator.read.tomldoc import parse_toml

    errors = [d for d in validate_document(parse_toml(text, Path(f"{kind}.toml")), kind) if d.is_error]
    return errors[0] if errors else None


def write_recipes(recipes: list[tuple[Path, str, ImportedRecipe]], force: bool,
                  before_swap: Callable[[], None] = lambda: None) -> None:
    """Each recipes/<id>/ (folder, its recipe.toml text, its import) with mods/<name>/ copied, swapped in whole
    (the caller decides whether an existing folder may be replaced). All are staged first, in a hidden folder at
    the project root, not under recipes/, so a build running meanwhile (or after a crash) never sees a half-made
    recipe, and a mod that cannot be copied leaves every recipe unwritten. `before_swap` runs once all are staged
    (the cluster file's write, so it too is skipped when a copy fails).

    Without `force` the id is checked again at the swap, under the project's write lock (generator/write/lock.py):
    of two imports of one id started together, the second is refused, never silently replacing the first."""
    if not recipes:
        before_swap()
        return
    recipes_dir = recipes[0][0].parent
    recipes_dir.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".recipegen-import-", dir=recipes_dir.parent))
    try:
        staged = [(write_staged(stage / str(n), text, imported), folder)
                  for n, (folder, text, imported) in enumerate(recipes)]
        with held(recipes_dir.parent):
            for _, folder in staged:
                if not force and (folder.exists() or folder.is_symlink()):
                    raise exists(folder)
            before_swap()
            for n, (new, folder) in enumerate(staged):
                if folder.exists() or folder.is_symlink():  # two renames: the old recipe leaves, the new one arrives
                    os.rename(folder, stage / f".replaced-{n}")
                os.rename(new, folder)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def exists(folder: Path) -> RecipegenError:
    return RecipegenError(Diagnostic(display_path(folder), None, None, None,
                                     "a recipe with this id exists: pass --force to replace it, or --id"))


def write_staged(new: Path, text: str, imported: ImportedRecipe) -> Path:
    """recipe.toml and the mods' copies in the new folder `new` (a staging or a scratch folder)."""
    new.mkdir()
    (new / "recipe.toml").write_text(text, "utf-8")
    for mod in imported.mods:  # the files as build read them: no link followed at copy time
        for file in mod.files:
            target = new / "mods" / mod.name / file.path
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as out:  # as a stream: a mod carried in an image may be of any size
                for chunk in file.chunks():
                    out.write(chunk)
            target.chmod(0o755 if file.executable else 0o644)
    return new
