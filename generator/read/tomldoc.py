"""Load a TOML file: values from tomllib (the reference parser), positions from tree-sitter on demand.

Positions are needed only to point at a key or value (a schema error, a lint finding, `explain`), so the
tree-sitter pass runs lazily, the first time one is asked for.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Any, Iterator

from generator.diagnostics import Diagnostic, RecipegenError, display_path
from generator.read import tomltext
from generator.read.origin import Origin


KeyPath = tuple[str | int, ...]

_SYNTAX_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")
# tomllib names a table by its key as a Python tuple (`cannot declare ('env',) twice`): shown as TOML's [env]
_TUPLE = re.compile(r"\((?:'[^']*'|\"[^\"]*\")(?:, (?:'[^']*'|\"[^\"]*\"))*,?\)")
_ITEM = re.compile(r"'([^']*)'|\"([^\"]*)\"")
_KEY_AT_START = re.compile(r"""^\s*\[*\s*([A-Za-z0-9_\-."]+)""")
_KEY_ASSIGNED = re.compile(r"""^([A-Za-z0-9_\-."]+)\s*=""")  # an unindented `key =`: where a value starts
_TRIPLE_QUOTE = re.compile(r'"""|\'\'\'')


@dataclass(frozen=True)
class Position:
    line: int  # 1-based
    col: int  # 1-based


@dataclass
class TomlDocument:
    path: Path
    text: str
    data: dict[str, Any]
    shown: str = field(default="")  # the path as printed in messages
    dropped: frozenset[str] = frozenset()  # keys removed as invalid (validate lints what is left)

    def __post_init__(self) -> None:
        self.shown = self.shown or display_path(self.path)

    @cached_property
    def _index(self) -> dict[KeyPath, tuple[Position, Position]]:
        return _index_positions(self.text)

    def key_position(self, path: KeyPath) -> Position:
        """Where the key (or array element) at `path` is written; falls back to its nearest parent."""
        return self._lookup(path, 0)

    def value_position(self, path: KeyPath) -> Position:
        """Where the value at `path` starts; falls back to its nearest parent."""
        return self._lookup(path, 1)

    def _lookup(self, path: KeyPath, which: int) -> Position:
        while path:
            hit = self._index.get(tuple(path))
            if hit:
                return hit[which]
            path = path[:-1]
        return Position(1, 1)

    def origin(self, layer: str, path: KeyPath, value: bool = False) -> Origin:
        """Where `path` is written, located lazily (see Origin)."""
        find = self.value_position if value else self.key_position
        return Origin(layer, self.shown, locate=partial(find, path))  # a partial pickles: recipes cross processes

    def diagnostic(self, path: KeyPath, message: str, *, at_value: bool = True, **kw: Any) -> Diagnostic:
        pos = self.value_position(path) if at_value else self.key_position(path)
        return Diagnostic(self.shown, pos.line, pos.col, format_key(path) or None, message, **kw)


def format_key(path: KeyPath) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + (part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else f'"{part}"')
    return out


def load_toml(path: str | Path) -> TomlDocument:
    """Read and parse one TOML file; every failure becomes a RecipegenError with file, line and key."""
    path = Path(path)
    shown = display_path(path)
    try:
        if path.is_dir():
            raise RecipegenError(Diagnostic(shown, None, None, None, "is a directory, not a TOML file"))
        if path.exists() and not path.is_file():  # a FIFO or a device would block or never end
            raise RecipegenError(Diagnostic(shown, None, None, None, "is not a regular file"))
        raw = path.read_bytes()
    except FileNotFoundError:
        raise RecipegenError(Diagnostic(shown, None, None, None, "no such file")) from None
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop, on some Pythons
        reason = getattr(exc, "strerror", None) or exc
        raise RecipegenError(Diagnostic(shown, None, None, None, f"cannot read: {reason}")) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        found = _KEY_AT_START.match(raw.splitlines()[line - 1].decode("utf-8", "replace"))
        raise RecipegenError(Diagnostic(shown, line, col, found[1] if found else None,
                                        "file is not UTF-8 text")) from None
    return parse_toml(text, path)


def parse_toml(text: str, path: Path) -> TomlDocument:
    """Parse TOML text that is (or is about to be) the file at `path`."""
    shown = display_path(path)
    text = text.removeprefix("\ufeff")  # editors on Windows save a byte-order mark; TOML readers tolerate it
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipegenError(_syntax_diagnostic(shown, text, str(exc))) from None
    document = TomlDocument(path, text, data, shown)
    beyond = [document.diagnostic(at, f"TOML syntax: integer {value} is beyond the 64-bit range TOML allows "
                                      "(-2^63 to 2^63-1)") for at, value in _beyond_int64(data, ())]
    if beyond:  # tomllib reads integers of any size; the spec (and tombi) refuse them: the file is not TOML
        raise RecipegenError(beyond)
    return document


_INT64 = range(-2**63, 2**63)


def _beyond_int64(value: Any, path: KeyPath) -> Iterator[tuple[KeyPath, int]]:
    """Integers the TOML spec refuses: "If an integer cannot be represented losslessly [in 64 bits], an error must
    be thrown." tomllib refuses every other invalid case of toml-lang/toml-test (tests/test_toml_spec.py)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _beyond_int64(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _beyond_int64(v, path + (i,))
    elif isinstance(value, int) and not isinstance(value, bool) and value not in _INT64:
        yield path, value


def _syntax_diagnostic(shown: str, text: str, message: str) -> Diagnostic:
    match = _SYNTAX_AT.search(message)
    if match:
        line, col = int(match[1]), int(match[2])
        message = message[: match.start()]
    else:  # "(at end of document)"
        message = message.replace(" (at end of document)", " at end of file")
        line = text.count("\n") + (0 if text.endswith("\n") else 1) or 1
        col = 1
        opened = _unclosed_triple_quote(text)
        if "nterminated" in message and opened is not None:  # point where the string opens, not at EOF
            line, col = opened
            message = "multi-line string opened here is never closed"
    message = _TUPLE.sub(lambda m: "[" + ".".join(tomltext.key(a or b) for a, b in _ITEM.findall(m[0])) + "]",
                         message)  # ('env',) -> [env]
    return Diagnostic(shown, line, col, _key_near(text.splitlines(), line),
                      f"TOML syntax: {message[0].lower()}{message[1:]}")


def _key_near(lines: list[str], line: int) -> str | None:
    """The key a syntax error belongs to: the one written on its line, else the nearest `key =` above it
    (an element of a multi-line array belongs to the array's key)."""
    if not 0 < line <= len(lines):
        return None
    own = lines[line - 1]
    found = _KEY_AT_START.match(own)
    if found and not own.lstrip().startswith(('"', "'", "#")):
        return found[1].strip(".")
    for above in reversed(lines[: line - 1]):
        if above.startswith("["):
            return None
        found = _KEY_ASSIGNED.match(above)
        if found:
            return found[1]
    return None


def _unclosed_triple_quote(text: str) -> tuple[int, int] | None:
    """Line and column of a multi-line string's opening quotes that are never closed."""
    opening: tuple[str, int] | None = None
    for match in _TRIPLE_QUOTE.finditer(text):
        if opening is None:
            opening = (match[0], match.start())
        elif match[0] == opening[0]:
            opening = None
    if opening is None:
        return None
    offset = opening[1]
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


# --- positions -------------------------------------------------------------------------------------------

_parser: Any = None  # tree_sitter.Parser, made on first use (tree-sitter ships no type stubs)


def _ts_parser() -> Any:
    global _parser
    if _parser is None:
        import tree_sitter
        import tree_sitter_toml

        _parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_toml.language()))
    return _parser


def _pos(node: Any) -> Position:
    return Position(node.start_point[0] + 1, node.start_point[1] + 1)


def _key_parts(node: Any) -> list[str]:
    """The segments of a bare, quoted or dotted key node, decoded as TOML decodes them."""
    if node.type == "dotted_key":
        return [part for child in node.named_children for part in _key_parts(child)]
    text = node.text.decode("utf-8")
    if node.type == "quoted_key":
        return [next(iter(tomllib.loads(f"{text} = 0")))]
    return [text]


def _index_positions(text: str) -> dict[KeyPath, tuple[Position, Position]]:
    """Map every key path (tables, keys, array elements) to the positions of its key and its value."""
    index: dict[KeyPath, tuple[Position, Position]] = {}
    table_array_len: dict[KeyPath, int] = {}
    tree = _ts_parser().parse(text.encode("utf-8"))

    def resolve(parts: list[str]) -> KeyPath:
        # [nodes.env] after the 2nd [[nodes]] means nodes[1].env: insert the current element index.
        out: KeyPath = ()
        for part in parts:
            out += (part,)
            if out in table_array_len:
                out += (table_array_len[out] - 1,)
        return out

    def visit_value(path: KeyPath, node: Any) -> None:
        if node.type == "array":
            for i, child in enumerate(c for c in node.named_children if c.type != "comment"):
                index[path + (i,)] = (_pos(child), _pos(child))
                visit_value(path + (i,), child)
        elif node.type == "inline_table":
            for pair in node.named_children:
                if pair.type == "pair":
                    visit_pair(path, pair)

    def visit_pair(base: KeyPath, pair: Any) -> None:
        key_node, value_node = pair.named_children[0], pair.named_children[-1]
        parts = _key_parts(key_node)
        for depth in range(1, len(parts)):
            index.setdefault(base + tuple(parts[:depth]), (_pos(key_node), _pos(key_node)))
        path = base + tuple(parts)
        index[path] = (_pos(key_node), _pos(value_node))
        visit_value(path, value_node)

    for top in tree.root_node.named_children:
        if top.type == "pair":
            visit_pair((), top)
        elif top.type in ("table", "table_array_element"):
            header = next(c for c in top.named_children if c.type in ("bare_key", "quoted_key", "dotted_key"))
            parts = _key_parts(header)
            if top.type == "table_array_element":
                parent = resolve(parts[:-1]) + (parts[-1],)
                table_array_len[parent] = table_array_len.get(parent, 0) + 1
                index.setdefault(parent, (_pos(header), _pos(header)))
            base = resolve(parts)
            index[base] = (_pos(header), _pos(header))
            for child in top.named_children:
                if child.type == "pair":
                    visit_pair(base, child)
    return index
