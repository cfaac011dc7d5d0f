"""A proposal as text: the cluster TOML file through templates/cluster.toml.j2, and the summary table's rows."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from generator.cluster.probe.facts import NodeFacts
from generator.cluster.probe.proposal import Proposal
from generator.read import tomltext
from generator.render.templates import Raw, comment, make_environment
from generator.resolve.model import Ulimits

if TYPE_CHECKING:
    import jinja2

DEFAULT_STACK = Ulimits().stack  # the model's default, written out so the file says what applies


def toml_value(value: object) -> str:
    """Every `{{ value }}` of the template as a TOML value: strings as basic strings, escaped."""
    if isinstance(value, Raw):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return tomltext.number(value)
    if isinstance(value, str):
        return tomltext.basic_string(value)
    if value is None:
        raise TypeError("a None value reached the cluster template")
    raise TypeError(f"the cluster template may only print strings, booleans and numbers, not {type(value).__name__}")


def toml_key(key: str) -> Raw:
    return Raw(tomltext.key(key))


def toml_comment(text: object) -> Raw:
    """`comment`, without whitespace at either end (the template writes `# ` before it)."""
    return Raw(comment(text).strip())


@cache
def _environment() -> jinja2.Environment:
    return make_environment(toml_value, {"key": toml_key, "comment": toml_comment})


def render_cluster(p: Proposal, schema_path: str = "./schema/cluster.schema.json") -> str:
    text: str = _environment().get_template("cluster.toml.j2").render(p=p, schema_path=Raw(schema_path),
                                                                      stack=DEFAULT_STACK)
    return text


def summary_rows(facts: list[NodeFacts], p: Proposal) -> list[list[str]]:
    """One row per node for `cluster probe`'s table: what it shows and what was chosen."""
    rows = []
    for f, n in zip(facts, p.nodes):
        iface = f.interfaces.get(n.iface or "")
        rdma = ",".join(f.rdma_for(n.iface)) if n.iface else ""
        gpu = (f.gpu.runtime or "no") if f.gpu else "-"
        if f.gpu and f.gpu.devices:
            gpu += f" ({len(f.gpu.devices)} GPU)"
        memlock = {None: "?", -1: "unlimited"}.get(f.memlock_hard, str(f.memlock_hard))
        rows.append([n.name, f.context, f.default_iface or "-", f"{n.iface or '-'} {n.address}",
                     iface.state if iface else "-", rdma or "-", gpu, memlock, f.image])
    return rows
