#!/usr/bin/env python3
"""Extract every command-line flag `vllm serve` and `python3 -m sglang.launch_server` accept, per release, from
the engines' published sources, into generator/data/engine_flags.json (read by `recipegen validate`).

Regenerate (needs PyPI; downloads ~2 GB of wheels into a cache folder, parses them, imports neither engine):

    python3 tools/extract_engine_flags.py --download /tmp/engine-wheels \\
        --vllm 0.10.2 0.11.0 0.31.0 0.32.0 0.33.0 0.34.0 --sglang 0.5.3 0.5.21 0.5.22 0.5.23

Why wheels and not sdists: `pip download vllm==X --no-binary :all:` has to build the sdist's metadata, and vLLM's
setup.py imports torch (fails without it); SGLang stopped publishing sdists after 0.5.10.post1. A wheel holds the
same .py files and pip downloads it without building anything (`--only-binary :all: --no-deps`).

How a flag is found (static `ast` reading, mirroring what the engine does at run time):
- vLLM: start at `vllm serve`'s `subparser_init` (vllm/entrypoints/cli/serve.py) and follow the calls that build
  the parser (`make_arg_parser`, `FrontendArgs.add_cli_args`, `AsyncEngineArgs.add_cli_args`, ...). Each
  `add_argument` call gives names and kwargs; `**model_kwargs["field"]` comes from `get_kwargs(ModelConfig)`,
  whose type rules (`_compute_kwargs` in vllm/engine/arg_utils.py) are reproduced on the field's annotation:
  a dataclass is JSON, bool a BooleanOptionalAction (`--x` and `--no-x`, and since 0.33 `--enable-x` /
  `--disable-x` pairs), Literal choices (a plain string when `str` is in the union), list/tuple nargs '+', int,
  float, dict JSON, a dict in a union with a string or a class `json_or_str` (`union_dict_and_str`: JSON when the
  value is `{...}`, else the string). Fields that `_compute_kwargs` special-cases by name (human-readable ints, `auto`) are
  recorded as strings, never guessed. The FlexibleArgumentParser accepts `_` for `-` in names and dotted JSON keys
  (`--compilation-config.mode 3`).
- SGLang: `ServerArgs.add_cli_args` in python/sglang/srt/server_args.py: its `add_argument` calls (older
  releases: all of them) and, since the arg_groups refactor, `add_cli_args_from_dataclass`, whose rules are
  reproduced on the `A[T, Arg(...)]` fields of sglang/srt/arg_groups/fields/*.py. Plain argparse: no `_` spelling.
Both engines leave argparse's `allow_abbrev` on: a unique prefix of a flag is accepted (recorded per release).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

BUILTIN_ATOMS = {"str", "int", "float", "bool", "dict", "list", "tuple", "set", "None", "bytes"}
GENERIC = {"List": "list", "Dict": "dict", "Tuple": "tuple", "Set": "set", "list": "list", "dict": "dict",
           "tuple": "tuple", "set": "set", "frozenset": "set", "Sequence": "list"}
BOOL_ACTIONS = {"store_true", "store_false", "store_const", "count"}
# (get_kwargs result variable, field) -> edits of that field's kwargs: {"type": <ast>, "nargs": None (deleted)}
Overrides = dict[tuple[str, str], dict[str, Any]]


# ----------------------------------------------------------------------------------------------------------------
# Sources: the .py files of one release, parsed on demand
# ----------------------------------------------------------------------------------------------------------------

class Sources:
    """The Python files of one distribution (a wheel or a folder), each parsed once when first needed."""

    def __init__(self, files: dict[str, str]):
        self.files = files
        self._trees: dict[str, ast.Module] = {}

    @classmethod
    def from_path(cls, path: Path) -> "Sources":
        if path.is_dir():
            return cls({p.relative_to(path).as_posix(): p.read_text("utf-8", "replace")
                        for p in path.rglob("*.py")})
        with zipfile.ZipFile(path) as zf:
            return cls({n: zf.read(n).decode("utf-8", "replace") for n in zf.namelist() if n.endswith(".py")})

    def tree(self, path: str) -> ast.Module:
        if path not in self._trees:
            self._trees[path] = ast.parse(self.files[path])
        return self._trees[path]

    def module_path(self, dotted: str) -> str | None:
        base = dotted.replace(".", "/")
        for candidate in (base + ".py", base + "/__init__.py", "python/" + base + ".py"):
            if candidate in self.files:
                return candidate
        return None

    _DEF = re.compile(r"^(?:(class|def|async def) (\w+)|(\w+)\s*(?::[^=\n]*)?=[^=])", re.M)

    def _index(self) -> dict[tuple[str, str], list[str]]:
        """(kind, name) -> the modules defining it at top level: one regex pass over every file, once."""
        if not hasattr(self, "_names"):
            names: dict[tuple[str, str], list[str]] = {}
            for path in sorted(self.files):
                for m in self._DEF.finditer(self.files[path]):
                    kind = "assign" if m.group(3) else ("class" if m.group(1) == "class" else "def")
                    names.setdefault((kind, m.group(2) or m.group(3)), []).append(path)
            self._names = names
        return self._names

    def defining(self, name: str, kind: str, prefer: tuple[str, ...] = ()) -> Iterator[tuple[str, ast.AST]]:
        """Module-level definitions of `name` (kind: 'class', 'def' or 'assign'), preferred modules first."""
        candidates = self._index().get((kind, name), [])
        paths = [p for p in prefer if p in candidates] + [p for p in candidates if p not in prefer]
        for path in dict.fromkeys(paths):
            for node in self.tree(path).body:
                if kind == "class" and isinstance(node, ast.ClassDef) and node.name == name:
                    yield path, node
                elif kind == "def" and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                    yield path, node
                elif kind == "assign" and _assigns(node, name):
                    yield path, node

    def first(self, name: str, kind: str, prefer: tuple[str, ...] = ()) -> tuple[str, Any] | None:
        return next(self.defining(name, kind, prefer), None)


def _assigns(node: ast.AST, name: str) -> bool:
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.target.id == name and node.value is not None
    return isinstance(node, ast.TypeAlias) and node.name.id == name if hasattr(ast, "TypeAlias") else False


def _value(node: ast.AST) -> ast.AST | None:
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        return node.value
    return getattr(node, "value", None)


def _name(node: ast.AST | None) -> str | None:
    """`x` for Name x, `b` for Attribute a.b."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _key(node: ast.AST | None) -> str | None:
    """The string of a constant subscript or key: `"x"` in `kwargs["x"]`."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _const(node: ast.AST | None) -> Any:
    """The value of a constant node, else None."""
    return node.value if isinstance(node, ast.Constant) else None


def _field_ref(node: ast.AST) -> tuple[str, str] | None:
    """`model_kwargs["dtype"]` -> ("model_kwargs", "dtype")."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and _key(node.slice) is not None:
        return node.value.id, _key(node.slice) or ""
    return None


def _const_list(node: ast.AST | None, src: Sources, here: str, depth: int = 0) -> list[Any] | None:
    """A literal list/tuple/set of constants (following module-level names and `+`), else None."""
    if node is None or depth > 4:
        return None
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        out = []
        for elt in node.elts:
            if isinstance(elt, ast.Constant) and isinstance(elt.value, (str, int, float)):
                out.append(elt.value)
            elif isinstance(elt, ast.Starred):
                inner = _const_list(elt.value, src, here, depth + 1)
                if inner is None:
                    return None
                out.extend(inner)
            else:
                return None
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _const_list(node.left, src, here, depth + 1), _const_list(node.right, src, here, depth + 1)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.Call) and _name(node.func) in ("list", "sorted", "tuple", "set") and len(node.args) == 1:
        inner = _const_list(node.args[0], src, here, depth + 1)
        return sorted(inner, key=str) if inner is not None and _name(node.func) == "sorted" else inner
    if isinstance(node, ast.Name):
        found = src.first(node.id, "assign", prefer=(here,))
        if found:
            return _const_list(_value(found[1]), src, found[0], depth + 1)
    return None


# ----------------------------------------------------------------------------------------------------------------
# Flags
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class Flag:
    """One option as argparse sees it: every spelling, and how its value parses."""

    names: list[str]
    type: str = "any"  # bool | int | float | str | json | json_or_str | choice | any (a custom parser: never judged)
    choices: list[Any] | None = None
    nargs: str | int | None = None
    optional: bool = False  # the value "None" (or "") parses as None
    negations: list[str] = field(default_factory=list)  # --no-x / --disable-x spellings of a boolean
    deprecated: bool = False

    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.choices is not None:
            out["choices"] = sorted({str(c) for c in self.choices})
        if self.nargs is not None:
            out["nargs"] = self.nargs
        if self.optional:
            out["optional"] = True
        if self.deprecated:
            out["deprecated"] = True
        return out


def kind_of_type_expr(expr: ast.AST | None) -> tuple[str, bool]:
    """An explicit `type=` callable -> (type, optional)."""
    if expr is None:
        return "str", False
    name = _name(expr)
    if isinstance(expr, ast.Call):
        fn = _name(expr.func)
        if fn == "optional_type" and expr.args:
            return kind_of_type_expr(expr.args[0])[0], True
        if fn == "parse_type" and expr.args:
            return kind_of_type_expr(expr.args[0])
        return "any", False
    if name in ("int", "float", "str"):
        return name, False
    if name == "loads" or name == "json_loads":
        return "json", False
    return "any", False


def flag_from_call(call: ast.Call, base: dict[str, Any], src: Sources, here: str) -> Flag | None:
    """An `add_argument(...)` call, its `**kwargs` already resolved into `base`."""
    names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if any(isinstance(a, ast.Starred) for a in call.args):
        names = base.get("flags", []) + names
    names = [n for n in names if n.startswith("-")]
    if not names:
        return None  # a positional (model_tag)
    kw = dict(base)
    for k in call.keywords:
        if k.arg is None:
            continue
        kw[k.arg] = k.value
    return flag_from_kwargs(names, kw, src, here)


def flag_from_kwargs(names: list[str], kw: dict[str, Any], src: Sources, here: str) -> Flag:
    flag = Flag(names=list(names))
    deprecated = kw.get("deprecated")
    flag.deprecated = isinstance(deprecated, ast.Constant) and deprecated.value is True or deprecated is True
    action = kw.get("action")
    action_name = action.value if isinstance(action, ast.Constant) else (_name(action) if isinstance(action, ast.AST)
                                                                         else action)
    nargs: Any = kw.get("nargs")
    if isinstance(nargs, ast.Constant):
        nargs = nargs.value
    elif isinstance(nargs, ast.AST):
        nargs = "?"  # computed: be lenient
    if action_name in BOOL_ACTIONS or (isinstance(action_name, str) and "StoreTrue" in action_name):
        flag.type = "bool"
        return flag
    if action_name in ("BooleanOptionalAction", "EnableDisableAction", "boolopt"):
        flag.type = "bool"
        flag.negations = ["--no-" + n[2:] for n in names if n.startswith("--")]
        return flag
    if isinstance(kw.get("type"), str):  # from a config field
        flag.type, flag.optional = kw["type"], bool(kw.get("optional"))
        flag.choices = kw.get("choices")
        if isinstance(flag.choices, ast.AST):
            flag.choices = _const_list(flag.choices, src, here)
            if flag.choices is None:
                flag.type = "any"  # choices computed at run time: unknown set
    else:
        flag.type, flag.optional = kind_of_type_expr(kw.get("type"))
        choices = kw.get("choices")
        if isinstance(choices, list):
            flag.choices = choices
        elif isinstance(choices, ast.AST):
            flag.choices = _const_list(choices, src, here)
            if flag.choices is None:
                flag.type = "any" if flag.type == "str" else flag.type  # dynamic choices: unknown set
    if action_name not in (None, "store", "append", "extend"):
        flag.type, flag.choices = "any", None  # a custom Action decides what it accepts
    if flag.choices is not None and flag.type in ("str", "int", "float"):
        flag.type = "choice"
    flag.nargs = nargs
    return flag


# ----------------------------------------------------------------------------------------------------------------
# Annotations -> argparse kwargs (vLLM's _compute_kwargs, SGLang's add_cli_args_from_dataclass)
# ----------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Atom:
    kind: str  # str int float bool None dict list tuple set literal dataclass other
    values: tuple[Any, ...] = ()  # literal values
    elem: "tuple[Atom, ...]" = ()  # collection element atoms


class Annotations:
    """Resolves annotation expressions to atoms, following module-level aliases and classes across the release."""

    def __init__(self, src: Sources):
        self.src = src

    def atoms(self, node: ast.AST | None, here: str, depth: int = 0) -> set[Atom]:
        if node is None or depth > 12:
            return {Atom("other")}
        if isinstance(node, ast.Constant):
            if node.value is None:
                return {Atom("None")}
            if isinstance(node.value, str):  # forward reference
                try:
                    return self.atoms(ast.parse(node.value, mode="eval").body, here, depth + 1)
                except SyntaxError:
                    return {Atom("other")}
            return {Atom("other")}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.atoms(node.left, here, depth + 1) | self.atoms(node.right, here, depth + 1)
        if isinstance(node, ast.Subscript):
            head = _name(node.value)
            items = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
            if head in ("Optional",):
                return self.atoms(items[0], here, depth + 1) | {Atom("None")}
            if head == "Union":
                return set().union(*(self.atoms(i, here, depth + 1) for i in items))
            if head in ("Annotated", "A", "SkipValidation"):
                return self.atoms(items[0], here, depth + 1)
            if head == "Literal":
                values = []
                for i in items:
                    if isinstance(i, ast.Constant):
                        values.append(i.value)
                    else:
                        return {Atom("other")}
                return {Atom("literal", tuple(values))}
            if head in GENERIC:
                elems = tuple(sorted(set().union(*(self.atoms(i, here, depth + 1) for i in items
                                                   if not (isinstance(i, ast.Constant) and i.value is Ellipsis))),
                                     key=repr)) if head != "dict" else ()
                return {Atom(GENERIC[head], elem=elems)}
            return {Atom("other")}
        name = _name(node)
        if name is None:
            return {Atom("other")}
        if name in BUILTIN_ATOMS:
            return {Atom(name)}
        if name in ("List", "Dict", "Tuple", "Set", "Sequence"):
            return {Atom(GENERIC[name])}
        if name == "Any":
            return {Atom("other")}
        found = self.src.first(name, "assign", prefer=(here,))
        if found:
            value = _value(found[1])
            if value is not None and self._looks_like_type(value):
                return self.atoms(value, found[0], depth + 1)
        cls = self.src.first(name, "class", prefer=(here,))
        if cls:
            return {Atom(self._class_kind(cls[1], cls[0]))}
        return {Atom("other")}

    @staticmethod
    def _looks_like_type(value: ast.AST) -> bool:
        if isinstance(value, ast.Subscript):
            return _name(value.value) in {"Literal", "Union", "Optional", "Annotated", *GENERIC}
        if isinstance(value, ast.BinOp):
            return isinstance(value.op, ast.BitOr)
        return isinstance(value, (ast.Name, ast.Attribute))

    def _class_kind(self, cls: ast.ClassDef, here: str, depth: int = 0) -> str:
        decorators = {_name(d.func) if isinstance(d, ast.Call) else _name(d) for d in cls.decorator_list}
        if decorators & {"dataclass", "config"}:
            return "dataclass"
        bases = {_name(b) for b in cls.bases}
        if "TypedDict" in bases:
            return "other"
        if bases & {"dict", "Dict"}:
            return "dict"
        if bases & {"BaseModel", "Struct"}:
            return "dataclass"
        for base in bases - {None, "object"}:
            found = self.src.first(base, "class", prefer=(here,)) if base and depth < 5 else None
            if found:
                kind = self._class_kind(found[1], found[0], depth + 1)
                if kind != "other":
                    return kind
        return "other"

    def class_fields(self, class_name: str, prefer: tuple[str, ...]) -> list[tuple[str, ast.AST, str]]:
        """(field, annotation, module) of a class and its bases, base fields first, as dataclasses.fields()."""
        found = self.src.first(class_name, "class", prefer=prefer)
        if not found:
            return []
        path, cls = found
        out: dict[str, tuple[str, ast.AST, str]] = {}
        for base in cls.bases:
            base_name = _name(base)
            if base_name and base_name not in ("object", "Struct", "BaseModel"):
                for item in self.class_fields(base_name, (path,)):
                    out[item[0]] = item
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                head = stmt.annotation
                head_name = _name(head.value) if isinstance(head, ast.Subscript) else _name(head)
                if head_name in ("ClassVar", "InitVar", "Final"):
                    continue
                out[stmt.target.id] = (stmt.target.id, stmt.annotation, path)
        return list(out.values())


def vllm_field_kwargs(atoms: set[Atom], lenient: bool, optional_bool_str: bool) -> dict[str, Any]:
    """vLLM's `_compute_kwargs` on one field's type hints."""
    kinds = {a.kind for a in atoms}
    kw: dict[str, Any] = {}
    if "dataclass" in kinds:
        kw["type"] = "json"
    elif optional_bool_str and kinds == {"bool", "str", "None"}:
        kw.update(type="str", nargs="?")
    elif "bool" in kinds:
        kw["action"] = "boolopt"
    elif "literal" in kinds:
        lit = next(a for a in atoms if a.kind == "literal")
        if "str" in kinds:
            kw["type"] = "str"
        else:
            kw.update(type="choice", choices=list(lit.values))
    elif kinds & {"tuple", "list", "set"}:
        coll = next(a for a in atoms if a.kind in ("tuple", "list", "set"))
        elem_kinds = {e.kind for e in coll.elem}
        kw["nargs"] = "+"
        if len(elem_kinds) == 1 and elem_kinds <= {"int", "float"}:
            kw["type"] = elem_kinds.pop()
        elif elem_kinds == {"literal"}:
            kw.update(type="choice", choices=list(coll.elem[0].values))
        else:
            kw["type"] = "str"
    elif "int" in kinds:
        kw["type"] = "str" if lenient else "int"
    elif "float" in kinds:
        kw["type"] = "float"
    elif "dict" in kinds and kinds & {"str", "other"}:
        kw["type"] = "json_or_str"  # union_dict_and_str: JSON when the value is {...}, else the string itself
    elif "dict" in kinds:
        kw["type"] = "json"
    else:
        kw["type"] = "str"
    if "None" in kinds and "bool" not in kinds:
        kw["optional"] = True
    return kw


def _source_order(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under `node`, depth first in source order (ast.walk is breadth first)."""
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _source_order(child)


# ----------------------------------------------------------------------------------------------------------------
# Walking the parser-building code
# ----------------------------------------------------------------------------------------------------------------

class Walker:
    """Follows the functions that build a parser, collecting what each `add_argument` registers."""

    def __init__(self, src: Sources, engine: str):
        self.src = src
        self.engine = engine
        self.ann = Annotations(src)
        self.flags: list[Flag] = []
        self.visited: set[tuple[str, int, str | None]] = set()
        self.lenient_fields = self._special_cased_fields()
        self.optional_bool_str = "bool, str, type(None)" in self._compute_kwargs_source()

    def _compute_kwargs_source(self) -> str:
        found = self.src.first("_compute_kwargs", "def", prefer=("vllm/engine/arg_utils.py",))
        return ast.get_source_segment(self.src.files[found[0]], found[1]) or "" if found else ""

    def _special_cased_fields(self) -> set[str]:
        """Field names `_compute_kwargs` names itself (human-readable ints, 'auto'): their values are strings."""
        source = self._compute_kwargs_source()
        if not source:
            return set()
        return {n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant)
                and isinstance(n.value, str) and re.fullmatch(r"[a-z][a-z0-9_]+", n.value)}

    def field_kwargs(self, class_name: str, here: str) -> dict[str, dict[str, Any]]:
        out = {}
        for name, annotation, path in self.ann.class_fields(class_name, (here,)):
            atoms = self.ann.atoms(annotation, path)
            if self.engine == "vllm":
                out[name] = vllm_field_kwargs(atoms, name in self.lenient_fields, self.optional_bool_str)
        return out

    def walk_function(self, path: str, fn: ast.FunctionDef, bound_cls: str | None, depth: int = 0) -> None:
        key = (path, fn.lineno, bound_cls)
        if key in self.visited or depth > 8:
            return
        self.visited.add(key)
        kwvars: dict[str, str] = {}  # local name -> class given to get_kwargs
        overrides: Overrides = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                    and _name(node.value.func) == "get_kwargs" and node.value.args:
                arg = _name(node.value.args[0])
                cls = bound_cls if arg == "cls" else arg
                for t in node.targets:
                    if isinstance(t, ast.Name) and cls:
                        kwvars[t.id] = cls
        self._collect_overrides(fn, overrides)
        for stmt in _source_order(fn):  # registration order: the first spelling registered wins
            if isinstance(stmt, ast.Call):
                self.visit_call(stmt, path, fn, bound_cls, kwvars, overrides, depth)

    def _collect_overrides(self, fn: ast.AST, overrides: Overrides) -> None:
        """`frontend_kwargs["x"]["type"] = json.loads`, `del ...["nargs"]`: edits of get_kwargs' result."""
        for node in ast.walk(fn):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else []
            for t in targets:
                ref = _field_ref(t.value) if isinstance(t, ast.Subscript) else None
                key = _key(t.slice) if isinstance(t, ast.Subscript) else None
                if ref and key:
                    value = node.value if isinstance(node, ast.Assign) else None
                    overrides.setdefault(ref, {})[key] = value

    def _apply(self, kw: dict[str, Any], edits: dict[str, Any]) -> dict[str, Any]:
        kw = dict(kw)
        for key, value in edits.items():
            if value is None:
                kw.pop(key, None)
            elif key == "type":
                kw["type"], opt = kind_of_type_expr(value)
                kw["optional"] = opt
                kw.pop("choices", None) if kw["type"] != "choice" else None
            elif key == "flags":
                kw["flags"] = _const_list(value, self.src, "") or []
            elif key in ("action", "nargs", "choices"):
                kw[key] = value
        if isinstance(kw.get("choices"), list) and kw.get("type") in ("str", "int", "float", "any"):
            kw["type"] = "choice"
        return kw

    def visit_call(self, call: ast.Call, path: str, fn: ast.FunctionDef, bound_cls: str | None,
                   kwvars: dict[str, str], overrides: Overrides, depth: int) -> None:
        fname = _name(call.func)
        if fname == "add_argument":
            self._add_argument(call, path, kwvars, overrides, fn)
        elif fname == "add_cli_args_from_dataclass":
            self._sglang_dataclass_fields(call, path)
        elif fname in ("add_cli_args", "make_arg_parser") or (fname and re.fullmatch(r"_add_\w*args", fname)):
            self._follow(call, path, bound_cls, depth)

    def _follow(self, call: ast.Call, path: str, bound_cls: str | None, depth: int) -> None:
        fname = _name(call.func)
        if fname is None:
            return
        if isinstance(call.func, ast.Attribute):
            owner = _name(call.func.value)
            if isinstance(call.func.value, ast.Call) and _name(call.func.value.func) == "super":
                owner = bound_cls and self._base_of(bound_cls, path)
            elif owner in ("cls", "self"):
                owner = bound_cls
            if not owner:
                return
            method = self._method(owner, fname, path)
            if method:
                self.walk_function(method[0], method[1], owner, depth + 1)
            return
        found = self.src.first(fname, "def", prefer=(path,) + tuple(self._imported_modules(path, fname)))
        if found:
            self.walk_function(found[0], found[1], bound_cls, depth + 1)

    def _imported_modules(self, path: str, name: str) -> list[str]:
        out = []
        for node in self.src.tree(path).body:
            if isinstance(node, ast.ImportFrom) and node.module and any(a.name == name for a in node.names):
                mp = self.src.module_path(node.module)
                if mp:
                    out.append(mp)
        return out

    def _base_of(self, cls_name: str, here: str) -> str | None:
        found = self.src.first(cls_name, "class", prefer=(here,))
        if found and found[1].bases:
            return _name(found[1].bases[0])
        return None

    def _method(self, cls_name: str, method: str, here: str, depth: int = 0) -> tuple[str, ast.FunctionDef] | None:
        found = self.src.first(cls_name, "class", prefer=(here,) + tuple(self._imported_modules(here, cls_name)))
        if not found or depth > 6:
            return None
        path, cls = found
        for stmt in cls.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == method:
                return path, stmt
        for base_name in filter(None, map(_name, cls.bases)):
            hit = self._method(base_name, method, path, depth + 1)
            if hit:
                return hit
        return None

    def _add_argument(self, call: ast.Call, path: str, kwvars: dict[str, str], overrides: Overrides,
                      fn: ast.FunctionDef) -> None:
        star = [k.value for k in call.keywords if k.arg is None]
        if not star:
            flag = flag_from_call(call, {}, self.src, path)
            if flag:
                self.flags.append(flag)
            return
        if isinstance(star[0], ast.Name) and star[0].id not in self._aliases(fn, kwvars):
            self._loop_fields(call, star[0], path, kwvars, overrides, fn)
            return
        kw = self._star_kwargs(star[0], path, kwvars, overrides, fn)
        if kw is not None:
            flag = flag_from_call(call, kw, self.src, path)
            if flag:
                self.flags.append(flag)

    @staticmethod
    def _aliases(fn: ast.FunctionDef, kwvars: dict[str, str]) -> dict[str, tuple[str, str]]:
        """`moe_backend_kwargs = kernel_kwargs["moe_backend"]`: a name for one field's kwargs."""
        out = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                ref = _field_ref(node.value)
                if ref and ref[0] in kwvars:
                    out[node.targets[0].id] = ref
        return out

    def _star_kwargs(self, expr: ast.AST, path: str, kwvars: dict[str, str], overrides: Overrides,
                     fn: ast.FunctionDef) -> dict[str, Any] | None:
        """What `**expr` of an add_argument call holds: a config field's kwargs, edited, or a dict display."""
        ref = _field_ref(expr)
        if ref and ref[0] in kwvars:
            kw = self.field_kwargs(kwvars[ref[0]], path).get(ref[1])
            return None if kw is None else self._apply(kw, overrides.get(ref, {}))
        if isinstance(expr, ast.Name):
            alias = self._aliases(fn, kwvars).get(expr.id)
            if alias is None:
                return None
            found = self.field_kwargs(kwvars[alias[0]], path).get(alias[1])
            if found is None:
                return None
            edits: dict[str, Any] = {}
            for node in ast.walk(fn):  # moe_backend_kwargs["type"] = ...
                if isinstance(node, ast.Assign):
                    for t in node.targets:
                        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == expr.id \
                                and _key(t.slice):
                            edits[_key(t.slice) or ""] = node.value
            return self._apply(self._apply(found, overrides.get(alias, {})), edits)
        if isinstance(expr, ast.Dict):  # **{**cache_kwargs["x"], "default": None}
            merged: dict[str, Any] = {}
            display: dict[str, Any] = {}
            for key, value in zip(expr.keys, expr.values):
                if key is None:
                    inner = self._star_kwargs(value, path, kwvars, overrides, fn)
                    if inner is None:
                        return None
                    merged.update(inner)
                elif _key(key):
                    display[_key(key) or ""] = value
            return self._apply(merged, display)
        return None

    def _loop_fields(self, call: ast.Call, expr: ast.Name, path: str, kwvars: dict[str, str], overrides: Overrides,
                     fn: ast.FunctionDef) -> None:
        """for key, value in frontend_kwargs.items(): add_argument(f"--{key.replace('_', '-')}", **value)"""
        loop = next((n for n in ast.walk(fn) if isinstance(n, ast.For) and isinstance(n.target, ast.Tuple)
                     and any(c is call for c in ast.walk(n))), None)
        if loop is None or not isinstance(loop.iter, ast.Call) or not isinstance(loop.iter.func, ast.Attribute):
            return
        var = _name(loop.iter.func.value)
        if var not in kwvars:
            return
        for name, kw in self.field_kwargs(kwvars[var], path).items():
            kw = self._apply(kw, overrides.get((var, name), {}))
            names = list(kw.pop("flags", [])) + ["--" + name.replace("_", "-")]
            self.flags.append(flag_from_kwargs(names, kw, self.src, path))

    def _sglang_dataclass_fields(self, call: ast.Call, path: str) -> None:
        """SGLang's add_cli_args_from_dataclass over the `A[T, Arg(...)]` fields of the arg_groups namespaces."""
        field_files = sorted(p for p in self.src.files if "/srt/arg_groups/fields/" in p)
        for fpath in field_files:
            for cls in self.src.tree(fpath).body:
                if not isinstance(cls, ast.ClassDef):
                    continue
                for stmt in cls.body:
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                        flag = self._sglang_field(stmt.target.id, stmt.annotation, fpath)
                        if flag:
                            self.flags.append(flag)

    def _sglang_field(self, name: str, annotation: ast.AST, path: str) -> Flag | None:
        if not (isinstance(annotation, ast.Subscript) and _name(annotation.value) in ("A", "Annotated")):
            return None
        items = list(annotation.slice.elts) if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        inner, meta = items[0], items[1:]
        arg = next((m for m in meta if isinstance(m, ast.Call) and _name(m.func) == "Arg"), None)
        if arg is None and not any(isinstance(m, ast.Constant) and isinstance(m.value, str) for m in meta):
            return None
        kw = {k.arg: k.value for k in (arg.keywords if arg else []) if k.arg}
        if _const(kw.get("no_cli")):
            return None
        cli_name = _key(kw.get("cli_name")) or "--" + name.replace("_", "-")
        names = [cli_name] + (_const_list(kw.get("aliases"), self.src, path) or [])
        if kw.get("action") is not None:
            return flag_from_kwargs(names, {"action": kw["action"], "nargs": kw.get("nargs")}, self.src, path)
        atoms = self.ann.atoms(inner, path) - {Atom("None")}
        kinds = {a.kind for a in atoms}
        choices = _const_list(kw.get("choices"), self.src, path) if kw.get("choices") is not None else None
        dynamic_choices = kw.get("choices") is not None and choices is None
        parser = kw.get("type_parser")
        if len(atoms) == 1 and kinds == {"literal"}:
            if parser is not None or dynamic_choices:
                return Flag(names, type="any")
            return Flag(names, type="choice", choices=choices or list(next(iter(atoms)).values))
        if len(atoms) == 1 and kinds == {"list"} and parser is None:
            elem = {e.kind for e in next(iter(atoms)).elem}
            t = elem.pop() if len(elem) == 1 and elem <= {"int", "float", "str"} else "str"
            nargs = _const(kw.get("nargs")) or "+"
            return Flag(names, type="choice" if choices else ("any" if dynamic_choices else t), choices=choices,
                        nargs=nargs)
        if len(atoms) == 1 and kinds == {"bool"}:
            return Flag(names, type="bool")
        if parser is not None:
            t = "json" if _name(parser) in ("loads", "json_loads") else "any"
        else:
            t = next(iter(kinds)) if len(atoms) == 1 and kinds <= {"int", "float", "str"} else "str"
        nargs = _const(kw.get("nargs"))
        if choices and parser is None:  # a type_parser (e.g. str.lower) runs before argparse checks the choices
            return Flag(names, type="choice", choices=choices, nargs=nargs)
        # no optional: SGLang passes Optional[int] to argparse as type=int, so the word "None" is refused
        return Flag(names, type="any" if dynamic_choices else t, nargs=nargs)


# ----------------------------------------------------------------------------------------------------------------
# One release
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class Release:
    engine: str
    version: str
    flags: dict[str, dict[str, Any]]  # spelling -> spec (with "of": canonical spelling for aliases)
    underscores: bool  # `--max_num_seqs` accepted for `--max-num-seqs`
    dotted_json: bool  # `--compilation-config.mode 3`
    abbrev: bool  # argparse allow_abbrev: unique prefixes accepted
    short_o: bool  # vLLM's -O3 / -O.mode


def release_flags(flags: list[Flag]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for flag in flags:
        canonical = next((n for n in flag.names if n.startswith("--")), flag.names[0])
        spec = flag.spec()
        for name in flag.names:
            entry = dict(spec)
            if name != canonical:
                entry["of"] = canonical
            out.setdefault(name, entry)
        for neg in flag.negations:
            out.setdefault(neg, {"type": "bool", "of": canonical})
    return out


def extract_vllm(src: Sources, version: str) -> Release:
    walker = Walker(src, "vllm")
    serve = "vllm/entrypoints/cli/serve.py"
    for node in ast.walk(src.tree(serve)):
        if isinstance(node, ast.FunctionDef) and node.name == "subparser_init":
            walker.walk_function(serve, node, None)
    parser_src = next((src.files[p] for p in ("vllm/utils/argparse_utils.py", "vllm/utils/__init__.py")
                       if p in src.files and "class FlexibleArgumentParser" in src.files[p]), "")
    enable_disable = "EnableDisableAction" in parser_src and 'register("action"' in parser_src
    for flag in walker.flags:
        if flag.negations and enable_disable:
            for name in list(flag.names):
                for prefix, inverse in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                    if name.startswith(prefix):
                        flag.negations.append(inverse + name[len(prefix):])
    return Release("vllm", version, release_flags(walker.flags),
                   underscores='replace("_", "-")' in parser_src,
                   dotted_json="create_nested_dict" in parser_src or 'split(".")' in parser_src,
                   abbrev="allow_abbrev=False" not in parser_src,
                   short_o='startswith("-O")' in parser_src)


def extract_sglang(src: Sources, version: str) -> Release:
    walker = Walker(src, "sglang")
    path = src.module_path("sglang.srt.server_args")
    assert path, "sglang/srt/server_args.py not found"
    method = walker._method("ServerArgs", "add_cli_args", path)
    assert method, "ServerArgs.add_cli_args not found"
    walker.walk_function(method[0], method[1], "ServerArgs")
    return Release("sglang", version, release_flags(walker.flags), underscores=False, dotted_json=False,
                   abbrev="allow_abbrev=False" not in src.files[path], short_o=False)


# ----------------------------------------------------------------------------------------------------------------
# The data file
# ----------------------------------------------------------------------------------------------------------------

def version_key(v: str) -> tuple[int | str, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.]", v.replace("post", "")))


def combine(releases: list[Release], command: str) -> dict[str, Any]:
    """Deterministic, compact: per engine the releases (oldest first) and, per flag spelling, the variants of its
    spec each with the indices of the releases that have it."""
    data: dict[str, Any] = {"format": 1, "regenerate": command, "engines": {}}
    for engine in ("vllm", "sglang"):
        rels = sorted((r for r in releases if r.engine == engine), key=lambda r: version_key(r.version))
        if not rels:
            continue
        flags: dict[str, list[dict[str, Any]]] = {}
        for i, rel in enumerate(rels):
            for name, spec in rel.flags.items():
                variants = flags.setdefault(name, [])
                match = next((v for v in variants if {k: x for k, x in v.items() if k != "in"} == spec), None)
                if match is None:
                    variants.append({**spec, "in": [i]})
                else:
                    match["in"].append(i)
        data["engines"][engine] = {
            "releases": [r.version for r in rels],
            "parser": [{"underscores": r.underscores, "dotted_json": r.dotted_json, "abbrev": r.abbrev,
                        "short_o": r.short_o} for r in rels],
            "flags": {name: flags[name] for name in sorted(flags)},
        }
    return data


def download(engine: str, version: str, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    existing = sorted(into.glob(f"{engine}-{version}-*.whl"))
    if existing:
        return existing[0]
    subprocess.run([sys.executable, "-m", "pip", "download", f"{engine}=={version}", "--no-deps",
                    "--only-binary", ":all:", "-d", str(into), "-q"], check=True)
    return sorted(into.glob(f"{engine}-{version}-*.whl"))[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--download", type=Path, required=True, help="folder for the wheels (reused when present)")
    ap.add_argument("--vllm", nargs="*", default=[])
    ap.add_argument("--sglang", nargs="*", default=[])
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).resolve().parents[1] / "generator" / "data" / "engine_flags.json")
    args = ap.parse_args(argv)
    releases = []
    for engine, versions, extract in (("vllm", args.vllm, extract_vllm), ("sglang", args.sglang, extract_sglang)):
        for version in versions:
            rel = extract(Sources.from_path(download(engine, version, args.download)), version)
            print(f"{engine} {version}: {len(rel.flags)} spellings", file=sys.stderr)
            releases.append(rel)
    command = ("python3 tools/extract_engine_flags.py --download DIR --vllm " + " ".join(args.vllm)
               + " --sglang " + " ".join(args.sglang))
    text = json.dumps(combine(releases, command), sort_keys=True, separators=(",", ":"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(f"wrote {args.out} ({len(text)} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
