"""Checks across the recipes a cluster's router serves (`[router]`): rules of one recipe cannot see these.

- `served-name`: two routed recipes serving one name at different heads. The router sends a request by its `model`
  alone, so the second would never be reached (or, worse, reached by the wrong clients): an error at validate and
  build. At the same head address and port they are alternatives (two profiles of one model, e.g. a recipe and one
  extending it): only one can run there at a time, and the router sends the name to that address either way.
- `port-collision`: the router's port equal to another listener on a router node's host network (the cluster's
  rendezvous, Ray and transfer ports, or the API port of a routed head on that node).
- `router-name`: a served name the router cannot match exactly (a quote, a backslash, a control character).
- `router-reach`: a routed head told to listen on loopback only (`--host 127.0.0.1`): the router reaches heads at
  their nodes' fabric addresses, even on its own node.
"""

from __future__ import annotations

import re
from generator.check.ports import CLUSTER_PORTS
from generator.diagnostics import Diagnostic, Severity
from generator.engines.ranks import flag_value, last_group, serve_port, served_names
from generator.resolve.model import Cluster, NodeChoiceError, Origin, Recipe

# What a name may hold to sit in single quotes in haproxy.cfg and in the JSON the router returns as it is.
ROUTABLE_NAME = re.compile(r"[^'\\\x00-\x1f\x7f]+")
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def routed(recipes: list[Recipe], cluster: Cluster) -> list[Recipe]:
    """The recipes the router serves, in the order given (the router's own list when it has one)."""
    router = cluster.router
    if router is None:
        return []
    if router.recipes is None:
        return list(recipes)
    by_id = {r.id: r for r in recipes}
    return [by_id[i] for i in router.recipes if i in by_id]


def _at(origin: Origin, key: str, message: str, rule: str) -> Diagnostic:
    return Diagnostic(origin.file or "?", origin.line, origin.col, key, message, rule=rule)


def router_findings(recipes: list[Recipe], cluster: Cluster, complete: bool = True) -> list[Diagnostic]:
    """Every problem of the router over `recipes` (all of the project's, when `complete`: then a recipe id the
    router lists but the project lacks is one too)."""
    router = cluster.router
    if router is None:
        return []
    doc = cluster.document
    found: list[Diagnostic] = []
    if complete and router.recipes is not None:
        have = {r.id for r in recipes}
        # A warning: a cluster file shared between projects may name recipes another project has.
        found += [doc.diagnostic(("router", "recipes", i), f"no recipe '{rid}' in the project: not routed",
                                 rule="router-name", severity=Severity.WARNING)
                  for i, rid in enumerate(router.recipes) if rid not in have]
    port_key = ("router", "port") if "port" in doc.data["router"] else ("router",)
    for key, what in CLUSTER_PORTS.items():
        if getattr(cluster, key) == router.port:
            found.append(doc.diagnostic(port_key, f"the router's port {router.port} is also {key} ({what}): on a "
                                                  "router node's host network only one of them can bind",
                                        rule="port-collision"))
    claimed: dict[str, tuple[str, str, int]] = {}  # name -> (recipe, head address, port) that claimed it
    router_nodes = {n.name for n in router.nodes}
    for recipe in routed(recipes, cluster):
        try:
            head = cluster.nodes_for(recipe)[0]
        except NodeChoiceError:
            continue  # too-many-nodes says so
        port = serve_port(recipe)
        if head.name in router_nodes and port == router.port:
            found.append(doc.diagnostic(port_key, f"the router's port {router.port} is also the API port of "
                                                  f"'{recipe.id}', whose head runs on router node '{head.name}'",
                                        rule="port-collision"))
        host = last_group(recipe, "--host")  # the last one counts
        if host is not None and host.values and host.values[0] in LOOPBACK:
            found.append(_at(host.args[0].origin, "args", f"--host {host.values[0]}: the router reaches "
                                                          f"'{recipe.id}' at its head's fabric address "
                                                          f"{head.address}, which a loopback-only head does not "
                                                          "answer; use 0.0.0.0 (or leave the recipe out of the "
                                                          "router's recipes)", "router-reach"))
        for name, origin in served_names(recipe):
            where = "args" if flag_value(recipe, "--served-model-name") else "model"
            if not ROUTABLE_NAME.fullmatch(name):
                found.append(_at(origin, where, f"served name {name!r} holds a quote, backslash or control "
                                                "character: the router cannot match it", "router-name"))
            elif name in claimed and claimed[name][0] != recipe.id and claimed[name][1:] != (head.address, port):
                found.append(_at(origin, where, f"recipe '{recipe.id}' serves '{name}', and so does recipe "
                                                f"'{claimed[name][0]}' at another head: the router sends a request "
                                                "by its model alone, so one of them would never be reached; rename "
                                                "one (--served-model-name) or list the recipes that run together "
                                                "in the cluster's [router] recipes", "served-name"))
            else:  # the same name at the same head and port: alternatives (profiles), one runs at a time
                claimed.setdefault(name, (recipe.id, head.address, port))
    return found
