"""A peer's YAML file read as the peer reads it, with the line of every key.

Both peers load their recipes with PyYAML's `safe_load` (eugr's run-recipe.py; sparkrun through vpd's
read_yaml), so PyYAML is the parser here too: the same YAML 1.1 typing (`0.70` is the float 0.7 that renders
as "0.7", `yes` is True), which a command template's placeholders are filled with. Its node tree gives each
key's line, so every problem and every comment in the imported recipe can name it.

A peer file is someone else's: it is read within bounds. At most MAX_BYTES are read (a recipe is a few KB; a
device or a huge file is refused, not read whole), and the document's node tree, with every alias counted as
the copy it stands for, holds at most MAX_VALUES values and refers to no value inside itself. PyYAML shares an
aliased node, so a 500-byte "billion laughs" loads small, but every later `str()` or walk of it expands it in
full: the count is taken on the node tree, before anything is built from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from generator.diagnostics import Diagnostic, RecipegenError, display_path

MAX_BYTES = 1024 * 1024
MAX_VALUES = 100_000  # the peers' largest recipes hold a few hundred


class _Loop(Exception):
    """A node that contains itself through an alias (`&a [*a]`)."""


@dataclass(frozen=True)
class YamlFile:
    path: Path
    data: dict[str, Any]
    lines: dict[tuple[str, ...], int]  # key path -> 1-based line of the key, for the top two levels

    @property
    def name(self) -> str:
        return self.path.name

    def line(self, *key: str) -> int | None:
        return self.lines.get(key)

    def error(self, key: tuple[str, ...] | str, message: str) -> RecipegenError:
        path = (key,) if isinstance(key, str) else key
        return RecipegenError(Diagnostic(display_path(self.path), self.line(*path) if path else None, None,
                                         ".".join(path) or None, message))


def read_text(path: Path) -> str:
    """A peer file's text, or one error naming the file (not UTF-8, not readable, or over MAX_BYTES)."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise RecipegenError(Diagnostic(display_path(path), None, None, None,
                                            f"larger than {MAX_BYTES // 1024} KiB: not a recipe or cluster file "
                                            "(refused unread)"))
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecipegenError(Diagnostic(display_path(path), None, None, None,
                                        f"not UTF-8 text ({exc.reason})")) from None
    except OSError as exc:
        raise RecipegenError(Diagnostic(display_path(path), None, None, None,
                                        f"cannot read the file: {exc.strerror or exc}")) from None


def read(path: Path) -> YamlFile:
    """The file as a mapping, or one error naming the file and the line where it stops being YAML."""
    shown = display_path(path)
    text = read_text(path)
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _refuse_expansion(node, shown)
        data = loader.construct_document(node) if node is not None else None
    except RecursionError:
        raise RecipegenError(Diagnostic(shown, None, None, None, "not a recipe: its values nest too deep to "
                                        "read")) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = (mark.line + 1, mark.column + 1) if mark else (None, None)
        raise RecipegenError(Diagnostic(shown, where[0], where[1], None,
                                        f"not valid YAML: {exc.problem or exc.context}")) from None
    except yaml.YAMLError as exc:
        raise RecipegenError(Diagnostic(shown, None, None, None, f"not valid YAML: {exc}")) from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise RecipegenError(Diagnostic(shown, 1, 1, None, "not a recipe: the file is not a YAML mapping of keys"))
    lines: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            top = str(key.value)
            lines[(top,)] = key.start_mark.line + 1  # a repeated key: PyYAML keeps the last
            if isinstance(value, yaml.MappingNode):
                for sub, _ in value.value:
                    lines[(top, str(sub.value))] = sub.start_mark.line + 1
    return YamlFile(path, data, lines)


def _refuse_expansion(root: yaml.Node, shown: str) -> None:
    """One error at the top-level key (else the document) whose value, aliases expanded, holds more than
    MAX_VALUES values or holds itself."""
    sizes: dict[int, int] = {}
    pairs = root.value if isinstance(root, yaml.MappingNode) else [(None, root)]
    total = 0
    for key, value in pairs:
        line, col = (key.start_mark.line + 1, key.start_mark.column + 1) if key else (1, 1)
        name = str(key.value) if key else None
        try:
            total += _expanded(value, sizes, set())
        except _Loop:
            why = "holds itself through a YAML alias (`&a [*a]`): a value cannot be infinite"
            raise RecipegenError(Diagnostic(shown, line, col, name, why)) from None
        if total > MAX_VALUES:
            raise RecipegenError(Diagnostic(shown, line, col, name, f"its YAML aliases expand to more than "
                                                                    f"{MAX_VALUES} values: refused, no recipe "
                                                                    "needs that many"))


def _expanded(node: yaml.Node, sizes: dict[int, int], open_: set[int]) -> int:
    """How many values the node stands for with every alias copied out, counted once per node and stopped
    past MAX_VALUES (so the count itself stays small)."""
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in open_:
        raise _Loop
    open_.add(id(node))
    children = node.value if isinstance(node, yaml.SequenceNode) else \
        [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else []
    total = 1
    for child in children:
        total += _expanded(child, sizes, open_)
        if total > MAX_VALUES:
            break
    open_.discard(id(node))
    sizes[id(node)] = total
    return total
