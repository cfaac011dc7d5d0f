"""Render plans into YAML through the Jinja2 templates in templates/.

No value can reach the YAML unquoted: the environment's `finalize` turns every `{{ value }}` into a YAML
double-quoted scalar with Compose's `$` interpolation escaped, so a template cannot forget to quote, and
strings from recipes cannot break out of YAML or be interpolated by Compose. Template text itself (keys,
structure) is trusted; the only way to emit raw text is `Raw`, used for comments made safe by `comment`.
"""

from __future__ import annotations

import json
import re
from functools import cache, lru_cache
from typing import Callable

import jinja2

from generator.diagnostics import Diagnostic, RecipegenError
from generator.plan import RecipePlan, shm_bytes
from generator.resources import read_data

# Characters YAML forbids or treats as line breaks inside a double-quoted scalar (json.dumps leaves them as is).
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]")


# Single-quoted YAML has no escapes: fine for one line of printable characters.
_SINGLE_QUOTABLE = re.compile("[^\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]*")  # fullmatch


class Raw(str):
    """Template-made text already valid where it goes (YAML here, TOML for the probe): never a user value."""


_PLAIN_SCALAR = re.compile(r"[A-Za-z0-9_./:,=+@%-]*")  # used with fullmatch: `$` would allow a final newline


def yaml_scalar(value: object) -> str:
    if isinstance(value, Raw):
        return value
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
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


def make_environment(finalize: Callable[[object], str], filters: dict[str, Callable]) -> jinja2.Environment:
    """A Jinja environment over templates/: every `{{ value }}` goes through `finalize`, an undefined name is an
    error, nothing is autoescaped, block tags leave no blank lines."""
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_template_source),
        undefined=jinja2.StrictUndefined, finalize=finalize, autoescape=False, keep_trailing_newline=True,
        trim_blocks=True, lstrip_blocks=True)
    env.filters.update(filters)
    return env


@cache
def _environment() -> jinja2.Environment:
    return make_environment(yaml_scalar, {"comment": comment, "shell_comment": shell_comment, "key": key,
                                          "shm_bytes": shm_bytes})


def _template_source(name: str):
    text = read_data("templates", name)
    return text, None, lambda: True


def render(template: str, **context: object) -> str:
    try:
        return _environment().get_template(template).render(**context)
    except jinja2.TemplateError as exc:  # a template bug, reported like any other error, never a traceback
        line = getattr(exc, "lineno", None)
        raise RecipegenError(Diagnostic(f"templates/{template}", line, 1 if line else None, None,
                                        f"template error: {exc}")) from None


def render_node(plan: RecipePlan, rank: int) -> str:
    return render("compose.yaml.j2", plan=plan, node=plan.nodes[rank])


def render_stack(plan: RecipePlan) -> str:
    return render("stack.yaml.j2", plan=plan)
