"""`recipegen explain`: the resolved recipe and each node's exact command and environment, every value with
where it came from (parent recipe, recipe, cluster, node, compiler, default), read from the plan; then memory per
rank as `recipegen fit` shows it (fit_lines: the model's config.json read from this machine)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from generator.check.fit import gib
from generator.check.fitreport import FitReport, fit_report
from generator.plan.types import Launch, NodePlan, RecipePlan
from generator.resolve.argwords import group_flags
from generator.resolve.model import RECIPE_SCALARS, Origin
from generator.resolve.modelfiles import NotFound


@dataclass(frozen=True)
class Line:
    text: str
    origin: Origin | None = None
    note: str = ""


def explain(plan: RecipePlan, node_name: str | None = None) -> list[tuple[str, list[Line]]]:
    """Sections of (title, lines); the CLI lays them out."""
    recipe = plan.recipe
    chain = " <- ".join(d.shown for d in recipe.documents)
    resolved = [Line(f"{key} = {_show(getattr(recipe, key))}", recipe.origins.get(key)) for key in RECIPE_SCALARS
                if getattr(recipe, key) is not None]
    resolved += [Line(f"mount {_quote(m.host)} -> {_quote(m.container)}{' (ro)' if m.read_only else ''}", m.origin)
                 for m in recipe.mounts]
    resolved += [Line(f"{key} = {_show(value)}", recipe.origins.get(key)) for key, value in recipe.container.items()]
    if recipe.setup:  # a list, each command with the line it came from
        resolved.append(Line("setup = [", recipe.origins.get("setup")))
        resolved += [Line(f"  {_show(step.word)},", step.origin) for step in recipe.setup]
        resolved.append(Line("]"))
    resolved += [Line(f"mod {_quote(str(mod.source))} ({len(mod.files)} files)", mod.origin) for mod in recipe.mods]
    if recipe.mods_in_image:  # where the mods travel: the image the compose files build, by its tag
        resolved.append(Line(f"mods_transport = image: {plan.nodes[0].image}",
                             recipe.origins.get("mods_transport", recipe.origins.get("mods"))))
    if recipe.ray_args:
        resolved.append(Line(f"ray_args = {_show(tuple(a.word for a in recipe.ray_args))}", recipe.origins.get("ray_args")))
    resolved += [Line(f"build_args.{name} = {_show(value)}", recipe.origins.get("build_args"))
                 for name, value in recipe.build_args.items()]
    sections = [(f"recipe {recipe.id} ({chain})", resolved)]
    for node in plan.nodes:
        if node_name is None or node.node.name == node_name:
            sections.append(_node_section(plan, node))
    return sections


def fit_section(plan: RecipePlan) -> tuple[str, list[Line]]:
    """Memory per rank, as `recipegen fit` shows it (the model's config.json read from this machine)."""
    report = fit_report(plan.recipe, plan.cluster)
    if isinstance(report, NotFound):
        return "memory per rank (recipegen fit)", [Line(f"not judged: {report.reason}")]
    return "memory per rank (recipegen fit)", [Line(text) for text in fit_lines(report)]


def fit_lines(r: FitReport) -> list[str]:
    """The report as text lines: what was read, then one row per pipeline stage's ranks."""
    s = r.settings
    lines = [f"model {r.model}: config from {r.read_from}; weights {r.weights_from}",
             f"tensor x pipeline = {s.tp} x {s.pp}; {r.flag('utilization')} {s.utilization:g} of gpu_memory "
             f"{gib(s.gpu_memory)}; context: {r.length_said}; KV cache dtype {s.kv_dtype}; "
             f"{r.flag('seqs')} {s.max_num_seqs}; {r.flag('batched')} {s.max_num_batched_tokens}"]
    header = ("ranks (nodes)", "layers", "budget", "weights", "overhead", "KV cache", "1 request", "headroom",
              "tokens", "requests")
    rows = [header]
    for m in r.ranks:
        tokens, concurrency = m.capacity(r.length) if r.length > 0 else (0, 0.0)
        need = m.request_bytes(r.length) if r.length > 0 else 0.0
        rows.append((r.rank_nodes(m), str(m.layers), gib(m.budget), gib(m.weights), gib(m.overhead),
                     gib(m.pool), gib(need), gib(m.pool - need), f"{tokens:,}", f"{concurrency:.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
              for row in rows]
    lines += [f"not counted: {what}" for what in r.uncounted]
    return lines



def _node_section(plan: RecipePlan, node: NodePlan) -> tuple[str, list[Line]]:
    role = "head" if node.is_head else "worker"
    title = (f"node {node.node.name}: rank {node.rank} ({role}), context {node.node.context}, "
             f"address {node.node.address}")
    entry = node.entrypoint
    shown = [_quote(a.word) for a in entry]
    lines = [Line("command:"), Line("  " + " ".join(shown), entry[0].origin, "entrypoint")]
    for group in group_flags(node.arguments):
        if group.flag is None:  # leading words: the compiler's model, or `-c SCRIPT` of a Ray head
            lines += [Line("  " + _quote(a.word), a.origin) for a in group.args]
        else:
            lines.append(Line("  " + " ".join(_quote(a.word) for a in group.args), group.args[0].origin))
    if node.launch is not None:
        lines += _launch_lines(node, node.launch)
    lines.append(Line("environment:"))
    for var in node.env:
        note = "overrides " + ", ".join(o.layer for o in var.overrides) if var.overrides else ""
        lines.append(Line(f"  {var.name}={_quote(var.value)}", var.origin, note))
    lines += [Line(f"  {name}", None, "passed from the deploying shell (pass_env), never written out")
              for name in node.pass_env]
    lines.append(Line("volumes:"))
    lines += [Line(f"  {_quote(v.source)} -> {_quote(v.target)}{' (ro)' if v.read_only else ''}", v.origin)
              for v in node.volumes]
    return title, lines


def _launch_lines(node: NodePlan, launch: Launch) -> list[Line]:
    """What the launcher runs before the command above, in order."""
    lines = [Line("before the command (the launcher, in order):")]
    lines += [Line(f"  setup: {_show(step.word)}", step.origin) for step in launch.setup]
    lines += [Line(f"  mod {_quote(mod.name)}: cd {_quote(mod.directory)} && ./run.sh", mod.origin)
              for mod in launch.mods]
    if launch.ray_head is not None:
        lines.append(Line("  " + " ".join(_quote(w) for w in launch.ray_head.start), None, "compiler (Ray head)"))
        workers = ", ".join(f"{name} ({address})" for name, address in launch.ray_head.workers)
        lines.append(Line(f"  wait up to {launch.ray_head.join_timeout_s}s for Ray workers: {workers}", None,
                          "compiler"))
    if launch.ray_worker is not None:
        worker = launch.ray_worker
        lines.append(Line(f"  wait up to {worker.join_timeout_s}s for the Ray head at {worker.head_host}:"
                          f"{worker.head_port}, retrying the command until then", None, "compiler (Ray worker)"))
    lines += [Line(f"  file {_quote(f.path)}", None, f.about) for f in node.files]
    return lines


# Byte for byte: a value is shown so that it reads back as exactly the bytes the container gets. Characters a
# terminal would act on or hide (control characters, ESC sequences, which click also strips from a pipe, line and
# paragraph separators, zero-width and non-breaking spaces: whatever str.isprintable() refuses) are escaped.
_TOML_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_BASH_ESCAPES = {"\\": "\\\\", "'": "\\'", "\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v",
                 "\f": "\\f", "\r": "\\r", "\x1b": "\\e"}


def _code_point(ch: str) -> str:
    return f"\\u{ord(ch):04X}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08X}"


def _show(value: object) -> str:
    """A value as TOML writes it: a string in a basic string, non-printable characters escaped."""
    if isinstance(value, tuple):
        return "[" + ", ".join(map(_show, value)) + "]"
    if not isinstance(value, str):
        return str(value)
    return '"' + "".join(_TOML_ESCAPES.get(ch) or (ch if ch.isprintable() else _code_point(ch)) for ch in value) + '"'


def _quote(word: str) -> str:
    """A word as a shell reads it back: sh quoting when every character is printable, else bash's `$'...'`."""
    import shlex

    if word.isprintable():
        return shlex.quote(word)
    return "$'" + "".join(_BASH_ESCAPES.get(ch) or (ch if ch.isprintable() else _bash_code(ch)) for ch in word) + "'"


def _bash_code(ch: str) -> str:
    return f"\\x{ord(ch):02X}" if ord(ch) < 0x80 else _code_point(ch)
