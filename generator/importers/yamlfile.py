"""A peer's YAML file read as the peer reads it, with the line of every key.

Both peers load their recipes with PyYAML's `safe_load` (eugr's run-recipe.py; sparkrun through vpd's
read_yaml), so PyYAML is the parser here too: the same YAML 1.1 typing (`0.70` is the float 0.7 that renders
as "0.7", `yes` is True), which a command template's placeholders are filled with. Its node tree gives each
key's line, so every problem and every comment in the imported recipe can name it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from generator.diagnostics import Diagnostic, RecipegenError, display_path


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
    """A peer file's text, or one error naming the file (not UTF-8, or not readable)."""
    try:
        return path.read_text("utf-8")
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
        data = loader.construct_document(node) if node is not None else None
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
