"""Run the domain rules that catch a recipe which would fail at boot, before anyone waits 15 minutes for it.

Each rule is a small function over the resolved recipe and the cluster that yields findings (Helm's habit), in a
module of this package named for what it protects (args, env, fabric, fit, flags, launch, mounts, parallelism, paths,
ports, ray, secrets); the schema covers what it can express (types, enums, patterns) and the editor shows it.
lint_recipe runs every registered rule over a recipe, lint_cluster the checks of a cluster file alone.
"""

from __future__ import annotations

from typing import Any

from generator.check.registry import ERROR, FAMILIES, RULES as RULES, WARNING, LauncherSizes
from generator.diagnostics import Diagnostic
from generator.engines.ranks import OWNED_ENV, OWNED_RAY_FLAGS
from generator.read.tomldoc import KeyPath, TomlDocument, format_key
from generator.resolve.argwords import group_flags
from generator.resolve.model import Cluster, Recipe
# The rule modules grouped by what they protect register themselves on import: lint_recipe runs them all. This
# order keeps the order of RULES that `validate` names (the cluster-dependent rules) as it was.
from generator.check import flags as lint_flags, launch as lint_launch, mounts as lint_mounts  # noqa: F401
from generator.check import paths as lint_paths, ports as lint_ports, ray as lint_ray  # noqa: F401
from generator.check import args as lint_args, env as lint_env  # noqa: F401
from generator.check import parallelism as lint_parallelism, fabric as lint_fabric  # noqa: F401
from generator.check import fit as lint_fit  # noqa: F401
from generator.check.secrets import SECRET_FIX, SECRET_VALUE, secret_name


def lint_recipe(recipe: Recipe, cluster: Cluster | None, launcher_sizes: LauncherSizes) -> list[Diagnostic]:
    """launcher_sizes renders the launchers (a later stage), for the rules over their text: the entry points pass
    generator.render.sizes.launcher_sizes."""
    found = []
    child = recipe.document.shown
    severity = {r.id: r.severity for r in RULES}
    judged = [(r.id, *f) for r in RULES for f in r.check(recipe, cluster, launcher_sizes)]
    judged += [f for family in FAMILIES for f in family(recipe, cluster)]  # one computation, several rules
    for rule_id, origin, key, message in judged:
        file = origin.file or child
        if file != child:  # a parent's line: say which recipe it is a problem for
            message += f" (inherited by {child})"
        line = origin.line
        found.append(Diagnostic(file, line, (origin.col or 1) if line else None, key, message, severity[rule_id],
                                rule_id))
    return sorted(set(found), key=lambda d: (d.file, d.line or 0, d.col or 0, d.rule or "", d.message))


def lint_cluster(doc: TomlDocument) -> list[Diagnostic]:
    """Rules over a cluster file alone: secrets, pass_env clashes, owned env and Ray flags, its ports."""
    found = []

    def walk(value: Any, path: KeyPath) -> None:
        if path and path[-1] == "pass_env":
            return  # names of variables passed through, not values
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, path + (k,))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, path + (i,))
        elif isinstance(value, str) and value:
            named = len(path) >= 2 and path[-2] == "env" and secret_name(str(path[-1]))
            if SECRET_VALUE.search(value) or named:
                found.append(doc.diagnostic(path, f"looks like a secret: {SECRET_FIX}", rule="secret"))

    walk(doc.data, ())
    envs = [(("env",), doc.data.get("env", {}))] + [(("nodes", i, "env"), n.get("env", {}))
                                                    for i, n in enumerate(doc.data.get("nodes", []))]
    valued = {name: path + (name,) for path, env in envs for name in env}
    for i, name in enumerate(doc.data.get("pass_env", [])):  # as the recipe's pass-env rule, for the cluster
        if name in OWNED_ENV:
            found.append(doc.diagnostic(("pass_env", i), f"'{name}' is set per rank by the compiler from the nodes' "
                                                         "addresses: it cannot be passed from the deploying shell",
                                        rule="pass-env"))
        elif name in valued:
            found.append(doc.diagnostic(("pass_env", i), f"'{name}' is passed from the deploying shell but also has "
                                                         f"a value at {format_key(valued[name])} (line "
                                                         f"{doc.key_position(valued[name]).line}): keep one",
                                        rule="pass-env"))
    for path, env in envs:
        for name in OWNED_ENV:
            if name in env:
                found.append(doc.diagnostic(path + (name,), f"'{name}' is set per rank by the compiler from the "
                                                            "nodes' addresses; this value is not used",
                                            at_value=False, rule="owned-env", severity=WARNING))
    found += _cluster_ray_flags(doc)
    found += lint_ports.cluster_port_findings(doc)
    return found


def _cluster_ray_flags(doc: TomlDocument) -> list[Diagnostic]:
    """The cluster's `ray_args` go to every Ray node too: the compiler's own `ray start` flags are errors there,
    as in a recipe (a `--block` there would stop the head before the engine, a `--port` split head and workers)."""
    from generator.diagnostics import RecipegenError
    from generator.resolve.argwords import split_words

    try:
        words = split_words(doc, doc.data.get("ray_args", []), "cluster", key="ray_args")
    except RecipegenError:
        return []  # loading the cluster reports the quoting
    return [Diagnostic(doc.shown, group.args[0].origin.line, group.args[0].origin.col, "ray_args",
                       f"'{group.flag}' is set by the compiler: {OWNED_RAY_FLAGS[group.flag]}", ERROR, "owned-flag")
            for group in group_flags(words) if group.flag in OWNED_RAY_FLAGS] + lint_ray.cluster_findings(doc, words)
