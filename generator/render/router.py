"""Render the router's plan: haproxy.cfg (its own quoting rules), a compose file per router node and the stack.

In haproxy.cfg every `{{ value }}` is one single-quoted word: HAProxy takes everything between single quotes as it
is (no escapes, no `${}` expansion). A value holding a quote or a backslash cannot be written so: check/router.py
refuses such served names at validate, and the renderer refuses them again rather than write a broken file.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any, Callable

import jinja2

from generator.diagnostics import Diagnostic, RecipegenError
from generator.plan.router import (CONFIG_PATH, MAXREWRITE, ROUTER_DIR, ROUTER_LABEL, ROUTER_PROJECT, ROUTER_SERVICE,
                                   STATS_PATH, RouterPlan)
from generator.plan.types import SWARM_NODE_LABEL
from generator.render.templates import Raw, comment, make_environment, render, shell_comment

# HAProxy splits a config line into 64 words at most (MAX_LINE_ARGS); a use_backend rule spends 9 on itself.
NAMES_PER_LINE = 48
CONFIG_NAME = "haproxy.cfg"  # beside the compose folders in out/_router/: the stack reads it as a Swarm config


def _haproxy_word(value: object) -> str:
    if isinstance(value, Raw):
        return value
    if isinstance(value, bool):
        raise TypeError("templates may not print booleans into haproxy.cfg")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if "'" in value or "\n" in value:
            raise ValueError(f"cannot write {value!r} as one haproxy.cfg word")
        return f"'{value}'"
    raise TypeError(f"templates may only print strings and numbers into haproxy.cfg, not {type(value).__name__}")


def lf_text(value: str) -> str:
    """Text inside a log-format string (lf-string): `%` starts a fetch there, `%%` is a literal one."""
    return value.replace("%", "%%")


def error_json(code: int, kind: str, message: str, param: str | None = None) -> str:
    """An OpenAI-shaped error body (`{"error": {"message", "type", "param", "code"}}`)."""
    return json.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}},
                      separators=(",", ":"), ensure_ascii=False)


@cache
def _haproxy_environment() -> jinja2.Environment:
    env = make_environment(_haproxy_word, {"comment": comment, "raw": lambda v: Raw(str(v)), "lf_text": lf_text})
    env.globals.update(error_json=error_json, maxrewrite=MAXREWRITE, stats_path=STATS_PATH,
                       names_per_line=NAMES_PER_LINE)
    return env


def render_config(plan: RouterPlan) -> str:
    try:
        return _haproxy_environment().get_template("haproxy.cfg.j2").render(plan=plan)
    except (jinja2.TemplateError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        raise RecipegenError(Diagnostic("templates/haproxy.cfg.j2", line, 1 if line else None, None,
                                        f"template error: {exc}")) from None


def _context(plan: RouterPlan, config: str) -> dict[str, Any]:
    return {"router": plan, "config": config, "config_path": CONFIG_PATH, "project": ROUTER_PROJECT,
            "service": ROUTER_SERVICE, "label": ROUTER_LABEL, "config_name": CONFIG_NAME,
            # Swarm configs cannot change: each text gets its own name, so a new config is a rolling update.
            "swarm_config": f"{ROUTER_PROJECT}-{hashlib.sha256(config.encode()).hexdigest()[:12]}",
            "node_label": SWARM_NODE_LABEL, "shell_comment": shell_comment}


def render_router(plan: RouterPlan, finish: Callable[[str], str]) -> dict[str, str]:
    """Every file of out/_router/, each passed through `finish` (the writer's stamp): haproxy.cfg, then
    <node>/compose.yaml per router node and stack.yaml, which carry the finished config."""
    config = finish(render_config(plan))
    files = {f"{ROUTER_DIR}/{CONFIG_NAME}": config}
    for node in plan.nodes:
        files[f"{ROUTER_DIR}/{node.name}/compose.yaml"] = render("router-compose.yaml.j2", node=node,
                                                                 **_context(plan, config))
    files[f"{ROUTER_DIR}/stack.yaml"] = render("router-stack.yaml.j2", **_context(plan, config))
    return {path: text if path.endswith(CONFIG_NAME) else finish(text) for path, text in files.items()}
