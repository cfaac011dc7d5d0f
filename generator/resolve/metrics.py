"""The cluster's `[metrics]` table into a Metrics (its node looked up by name, every other key its schema default
when absent). Beside load.py, which calls it, as router's table is read there."""

from __future__ import annotations

from dataclasses import fields

from generator.diagnostics import RecipegenError
from generator.read.schemas import schema
from generator.read.tomldoc import TomlDocument
from generator.resolve.model import Metrics, Node


def load_metrics(doc: TomlDocument, nodes: tuple[Node, ...]) -> Metrics | None:
    """None without a `[metrics]` table; a node name the cluster lacks is an error at its place."""
    raw = doc.data.get("metrics")
    if raw is None:
        return None
    known = {n.name: n for n in nodes}
    if raw["node"] not in known:
        raise RecipegenError(doc.diagnostic(("metrics", "node"), f"the cluster has no node '{raw['node']}' (it has "
                                                                 f"{', '.join(known)})"))
    props = schema("cluster")["properties"]["metrics"]["properties"]
    values = {f.name: raw.get(f.name, props[f.name].get("default")) for f in fields(Metrics) if f.name != "node"}
    return Metrics(node=known[raw["node"]], **values)
