"""Render plans into YAML through the Jinja2 templates in templates/.

No value can reach the YAML unquoted: the environment's `finalize` turns every `{{ value }}` into a YAML
double-quoted scalar with Compose's `$` interpolation escaped, so a template cannot forget to quote, and
strings from recipes cannot break out of YAML or be interpolated by Compose. Template text itself (keys,
structure) is trusted; the only way to emit raw text is `Raw`, used for comments made safe by `comment`.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import pickle
import posixpath
import re
import sys
import types
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable

import jinja2
from jinja2.bccache import bc_magic

from generator.diagnostics import Diagnostic, RecipegenError
from generator.plan.types import (GPU_RESOURCE_KIND, HEALTH_INTERVAL, HEALTH_RETRIES, HEALTH_TIMEOUT, LAUNCHER_PATH,
                                  WATCH_FILE, WATCH_PATH, NodePlan, RecipePlan, shm_bytes)
from generator.engines.written import PREPARED_MARKER
from generator.read.resources import read_data

# Characters YAML forbids or treats as line breaks inside a double-quoted scalar (json.dumps leaves them as is).
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]")


# Single-quoted YAML has no escapes: fine for one line of printable characters.
_SINGLE_QUOTABLE = re.compile("[^\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]*")  # fullmatch


class Raw(str):
    """Template-made text already valid where it goes (YAML here, TOML for the probe): never a user value."""


_PLAIN_SCALAR = re.compile(r"[A-Za-z0-9_./:,=+@%-]*")  # used with fullmatch: `$` would allow a final newline


def yaml_scalar(value: object) -> str:
    kind = type(value)
    if kind is str:  # most values: tested first, by exact type (Raw is a str too)
        return _quote(value)
    if kind is Raw:  # template-made: a filter's output
        return value  # type: ignore[return-value]
    if isinstance(value, str):  # a str subclass from elsewhere: quoted like any string
        return _quote(str(value))
    if isinstance(value, bool):
        return Raw("true" if value else "false")
    if isinstance(value, int):
        return Raw(str(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_scalar(v) for v in value) + "]"
    raise TypeError(f"templates may only print strings, numbers and lists, not {type(value).__name__}")


@lru_cache(maxsize=8192)  # the same values recur on every node of a recipe
def _quote(value: str) -> str:
    if _PLAIN_SCALAR.fullmatch(value):  # nothing to escape: the common case
        return f'"{value}"'
    value = value.replace("$", "$$")  # Compose interpolates `$`; `$$` is a literal one
    if ('"' in value or "\\" in value) and _SINGLE_QUOTABLE.fullmatch(value):
        return "'" + value.replace("'", "''") + "'"  # JSON reads better without backslashes
    quoted = json.dumps(value, ensure_ascii=False)
    return _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m[0]):04x}", quoted)


# Bare keys start with a letter: `_0` or `_1E5` may read back as numbers in some YAML parsers.
_PLAIN_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


@lru_cache(maxsize=4096)
def key(value: str) -> Raw | str:
    """A mapping key: bare where YAML reads it back as the same string, quoted otherwise."""
    if _PLAIN_KEY.fullmatch(value) and value.lower() not in _YAML_WORDS:
        return Raw(value)
    return value


def shell_comment(value: object) -> Raw:
    """A shell word inside a comment people copy and paste: quoted as the shell needs it."""
    import shlex

    return comment(shlex.quote(str(value)))


def comment(value: object) -> Raw:
    """Text for a `#` comment: one line, no control characters."""
    return Raw(re.sub(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+", " ", str(value)))


# What a YAML literal block cannot hold (it would not read back as the same text): control characters other than
# tab and newline, carriage returns, and the characters YAML treats as line breaks or byte-order marks.
_NOT_IN_BLOCK = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]")


def block(value: str, indent: int) -> Raw | str:
    """Multi-line text (a script, a mod's file) as a YAML literal block indented by `indent`, so the committed
    file reads like the text itself; text a block cannot carry exactly falls back to a quoted scalar."""
    if "\n" not in value.rstrip("\n"):
        return value  # one line: finalize quotes it
    if _NOT_IN_BLOCK.search(value) or value.startswith((" ", "\t", "\n")):
        return value  # characters only a quoted scalar keeps: finalize quotes it
    body = value.replace("$", "$$")  # Compose interpolates `$` in config contents too
    stripped = body.rstrip("\n")
    trailing = len(body) - len(stripped)
    chomp = "-" if trailing == 0 else ("" if trailing == 1 else "+")
    pad = " " * indent
    lines = [pad + line if line else "" for line in stripped.split("\n")]
    return Raw(f"|{chomp}\n" + "\n".join(lines) + "\n" * max(trailing - 1, 0))


def shell_word(value: object) -> str:
    """One shell word of a generated script: quoted unless template-made (Raw) or a number."""
    import shlex

    if isinstance(value, Raw):
        return value
    if isinstance(value, bool):
        raise TypeError("templates may not print booleans into scripts")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return shlex.quote(value)
    raise TypeError(f"templates may only print strings and numbers into scripts, not {type(value).__name__}")


def _join_words(words: tuple[str, ...]) -> Raw:
    return Raw(" ".join(shell_word(w) for w in words))


def make_environment(finalize: Callable[[object], str], filters: dict[str, Callable[..., Any]]
                     ) -> jinja2.Environment:
    """A Jinja environment over templates/: every `{{ value }}` goes through `finalize`, an undefined name is an
    error, block tags leave no blank lines.

    No autoescaping and no macros: parts shared by two templates are includes (_ulimits.j2 ...), whose text is
    written as it is, so nothing needs marking as template-made. (Macros did, through autoescaping: markupsafe
    then wrapped every printed value again, about a third of the rendering time.)"""
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_template_source),
        undefined=jinja2.StrictUndefined, finalize=finalize, autoescape=False, keep_trailing_newline=True,
        trim_blocks=True, lstrip_blocks=True)
    env.filters.update(filters)
    env.bytecode_cache = _bytecode_cache(env)
    return env


class _CompiledTemplates(jinja2.FileSystemBytecodeCache):
    """Jinja's own cache of compiled templates, in its per-user folder of the temp dir (made 0700, owner checked):
    compiling ours costs ~40 ms per process, loading them ~2 ms. Jinja keys a template by its name and checks its
    source's checksum; the key here also holds everything else the compiled code depends on (`_fingerprint`),
    so a changed setting or filter never runs stale code. An entry is read as bytes and compared, never
    unpickled; one that is damaged is compiled afresh, and a cache that cannot be read or written is skipped."""

    def __init__(self, fingerprint: str):
        super().__init__(pattern="recipegen-%s.cache")
        self.fingerprint = fingerprint

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        return hashlib.sha256(f"{self.fingerprint}|{name}".encode()).hexdigest()

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        # What Jinja's Bucket.write_bytecode wrote: its magic, the source's checksum pickled (protocol 2), the code.
        try:
            with open(self._get_cache_filename(bucket), "rb") as fh:  # where dump_bytecode wrote it
                data = fh.read()
        except OSError:
            return
        header = bc_magic + pickle.dumps(bucket.checksum, 2)
        if not data.startswith(header):  # another source, another Jinja, or damaged: compiled afresh
            return
        try:
            code = marshal.loads(data[len(header):])
        except (EOFError, ValueError, TypeError):
            return
        if isinstance(code, types.CodeType):
            bucket.code = code

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _fingerprint(env: jinja2.Environment) -> str | None:
    """What compiled code depends on besides its source: the environment's settings, Jinja's and Python's
    versions, and the text of every module defining its `finalize`, filters and tests. Jinja's compiler runs
    those on constant values (`{{ "a" | key }}` compiles to its result) and bakes in how each is marked
    (pass_context ...), so an edit to any of them must change the key. None, so no cache, when one of those
    modules cannot be read (e.g. run from a zip)."""
    def named(function: object) -> tuple[str | None, str | None]:
        return getattr(function, "__module__", None), getattr(function, "__qualname__", None)

    digest = hashlib.sha256()
    settings = (jinja2.__version__, sys.version, env.autoescape, env.trim_blocks, env.lstrip_blocks,
                env.keep_trailing_newline, env.newline_sequence, env.optimized, named(env.finalize),
                sorted((n, named(f)) for n, f in env.filters.items()),
                sorted((n, named(f)) for n, f in env.tests.items()))
    digest.update(repr(settings).encode())
    defined_in = {named(f)[0] for f in (env.finalize, *env.filters.values(), *env.tests.values())}
    for name in sorted(m for m in defined_in if m):
        if name in sys.builtin_module_names or name.startswith("jinja2."):
            continue  # built into Python, or Jinja's own: their versions are in the key
        path = getattr(sys.modules.get(name), "__file__", None)
        try:
            digest.update(name.encode() + b"\0" + Path(path).read_bytes())  # type: ignore[arg-type]
        except (OSError, TypeError):
            return None
    return digest.hexdigest()


def _bytecode_cache(env: jinja2.Environment) -> jinja2.BytecodeCache | None:
    fingerprint = _fingerprint(env)
    if fingerprint is None:
        return None
    try:
        return _CompiledTemplates(fingerprint)
    except (OSError, RuntimeError):  # no private temp folder to be had: compile every time
        return None


def _words(args: Iterable[Any]) -> list[str]:
    """The words of a plan's entrypoint or arguments (each carries its origin too): `map(attribute="word")` in
    Python, a fifth of the rendering time in Jinja's attribute lookups."""
    return [arg.word for arg in args]


@cache
def _environment() -> jinja2.Environment:
    env = make_environment(yaml_scalar, {"comment": comment, "shell_comment": shell_comment, "key": key,
                                         "shm_bytes": shm_bytes, "block": block,
                                         "spaces": lambda n: Raw(" " * n), "words": _words})
    env.globals.update(launcher_path=LAUNCHER_PATH, watch_path=WATCH_PATH, watch_file=WATCH_FILE,
                       gpu_resource_kind=GPU_RESOURCE_KIND,
                       health_interval=HEALTH_INTERVAL,
                       health_timeout=HEALTH_TIMEOUT, health_retries=HEALTH_RETRIES)
    return env


@cache
def _shell_environment() -> jinja2.Environment:
    """Scripts (the launcher): every `{{ value }}` is one shell word, quoted as POSIX sh reads it back."""
    env = make_environment(shell_word, {"comment": comment, "dirname": posixpath.dirname, "join_words": _join_words,
                                        "oneline": lambda text: " ".join(str(text).split())})
    env.globals.update(prepared_marker=PREPARED_MARKER)
    return env


def _template_source(name: str) -> tuple[str, None, Callable[[], bool]]:
    text = read_data("templates", name)
    return text, None, lambda: True


def render(template: str, **context: object) -> str:
    env = _shell_environment() if template.endswith(".sh.j2") else _environment()
    try:
        return env.get_template(template).render(**context)
    except jinja2.TemplateError as exc:  # a template bug, reported like any other error, never a traceback
        line = getattr(exc, "lineno", None)
        raise RecipegenError(Diagnostic(f"templates/{template}", line, 1 if line else None, None,
                                        f"template error: {exc}")) from None


def render_launcher(node: NodePlan, inline_files: bool) -> str | None:
    """The script a node's container starts with when it has steps before the engine; with `inline_files` it
    also writes the files the compose file would carry as configs (a Swarm stack cannot)."""
    if node.launch is None:
        return None
    return render("launch.sh.j2", node=node, inline_files=inline_files)


def render_node(plan: RecipePlan, rank: int) -> str:
    from generator.render.versions import header_line, needs_of

    node = plan.nodes[rank]
    launcher = render_launcher(node, inline_files=False)
    # The same test as the template's `configs:` (Compose copies no empty config: those are not shipped).
    needs = needs_of(bool(launcher) or any(f.text for f in node.files) or node.group is not None, node.gpu)
    return render("compose.yaml.j2", plan=plan, node=node, launcher=launcher, needs=header_line(needs))


def render_stack(plan: RecipePlan) -> str:
    """The Swarm stack; each node's launcher is one `sh -c` argument (the lint rule stack-argument keeps it
    under Linux's limit for one argument)."""
    launchers = {node.rank: render_launcher(node, inline_files=True) for node in plan.nodes}
    watch = render_watch(plan)
    return render("stack.yaml.j2", plan=plan, launchers=launchers,
                  watch_config=watch_config_name(plan.recipe.id, watch) if watch is not None else "")


def render_watch(plan: RecipePlan) -> str | None:
    """The group watch as the file beside the stack (Swarm takes no inline config), or None without a watch."""
    if plan.head.group is None:
        return None
    return (f"# Generated by recipegen from generator/runtime/groupwatch.py for {plan.recipe.id}'s Swarm stack.\n"
            f"# Do not edit: it is recipegen's own program; `recipegen build` writes it.\n" + plan.head.group.source)


def watch_config_name(recipe_id: str, text: str) -> str:
    """The Swarm config's name: Swarm configs cannot change, so other content is another name (the hash covers
    the file as shipped); set whole, since the stack's own prefix would take recipe ids past Swarm's 64 characters."""
    digest = hashlib.sha256(f"{recipe_id}\0{text}".encode()).hexdigest()[:12]
    return f"{recipe_id[:40]}-watch-{digest}"
