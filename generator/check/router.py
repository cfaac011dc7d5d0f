"""Checks across the recipes a cluster's router serves (`[router]`): rules of one recipe cannot see these.

- `served-name`: two routed recipes serving one name at different heads. The router sends a request by its `model`
  alone, so the second would never be reached (or, worse, reached by the wrong clients): an error at validate and
  build. At the same head address and port they are alternatives (two profiles of one model, e.g. a recipe and one
  extending it): only one can run there at a time, and the router sends the name to that address either way.
- `port-collision`: the router's port equal to another listener on a router node's host network (the cluster's
  rendezvous, Ray and transfer ports, or the API port of a routed head on that node).
- `router-name`: a served name the router cannot match exactly (a single quote, a backslash, a control character).
- `router-reach`: a routed head told to listen on loopback only (`--host 127.0.0.1`): the router reaches heads at
  their nodes' fabric addresses, even on its own node.
- `router-setting`: a `[router]` value HAProxy would take but serve badly (a 413 for every request, a 1 ms timeout,
  a buffer past its size), an image that is not an image reference, a port its non-root user cannot bind (warning).
- `secret`: the router's API key (the variable `api_key_env` names) given a value in an `[env]`, where it would be
  written into out/; or a well-known variable (PATH, HF_TOKEN ...) named as the key.
"""

from __future__ import annotations

import re
from generator.check.ports import CLUSTER_PORTS
from generator.diagnostics import Diagnostic, Severity
from generator.engines.ranks import flag_value, last_group, serve_port, served_names
from generator.read.schemas import schema
from generator.read.units import duration_ns, size_bytes
from generator.resolve.model import Cluster, NodeChoiceError, Origin, Recipe

# What a name may hold to sit in single quotes in haproxy.cfg and in the JSON the router returns as it is.
ROUTABLE_NAME = re.compile(r"[^'\\\x00-\x1f\x7f]+")
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
# HAProxy holds a whole body in one buffer per request being read (tune.bufsize, an int: 2 GiB overflows it).
MAX_BODY = 1 << 30
# The official haproxy image runs as user haproxy, which cannot bind a port under this one on the host network.
PRIVILEGED_BELOW = 1024
# Variables that mean something else to the shell that deploys (or to the engines, HF_TOKEN): as the key, the
# deployer's PATH would become the bearer token, or the Hugging Face token be sent in clear by `ps`.
WELL_KNOWN = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "TERM", "LANG", "LANGUAGE",
                        "HOSTNAME", "TMPDIR", "TZ", "DISPLAY", "EDITOR", "PAGER", "MAIL", "SHLVL", "IFS", "PS1",
                        "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CUDA_HOME",
                        "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HOME", "HF_HUB_CACHE", "DOCKER_HOST",
                        "DOCKER_CONTEXT", "DOCKER_CONFIG", "SSH_AUTH_SOCK", "GITHUB_TOKEN", "VLLM_API_KEY",
                        "OPENAI_API_KEY", "NCCL_SOCKET_IFNAME"})
WELL_KNOWN_PREFIXES = ("LC_", "XDG_", "SSH_", "DOCKER_", "HF_", "HUGGING_FACE_", "AWS_", "GIT_", "SUDO_")


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
    found += settings_findings(cluster) + key_findings(recipes, cluster)
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
                other = claimed[name]
                there = (f"on the same node at another port ({other[2]}, this one {port})"
                         if other[1] == head.address else "at another head")
                found.append(_at(origin, where, f"recipe '{recipe.id}' serves '{name}', and so does recipe "
                                                f"'{other[0]}' {there}: the router sends a request "
                                                "by its model alone, so one of them would never be reached; rename "
                                                "one (--served-model-name) or list the recipes that run together "
                                                "in the cluster's [router] recipes", "served-name"))
            else:  # the same name at the same head and port: alternatives (profiles), one runs at a time
                claimed.setdefault(name, (recipe.id, head.address, port))
    return found


def _setting(cluster: Cluster, key: str, message: str, severity: Severity = Severity.ERROR) -> Diagnostic:
    where = ("router", key) if key in cluster.document.data["router"] else ("router",)
    return cluster.document.diagnostic(where, message, rule="router-setting" if key != "api_key_env" else "secret",
                                       severity=severity)


def settings_findings(cluster: Cluster) -> list[Diagnostic]:
    """`[router]` values HAProxy would take and serve badly, each named by its key."""
    router = cluster.router
    assert router is not None
    found = []
    body = size_bytes(router.max_body)
    if body is not None and not 0 < body <= MAX_BODY:
        found.append(_setting(cluster, "max_body", f"{router.max_body!r}: a body must be allowed more than 0 bytes "
                                                   "and at most 1g (HAProxy holds each whole body in one buffer; 0 "
                                                   "sends a 413 to every request)"))
    for key in ("timeout", "health_interval"):
        value = getattr(router, key)
        ns = duration_ns(value)
        if ns is not None and ns < 10**6:
            found.append(_setting(cluster, key, f"{value!r}: must be at least 1ms (HAProxy counts milliseconds; "
                                                "less would cut every stream at its first pause, or check each head "
                                                "a thousand times a second)"))
    if not re.fullmatch(schema("recipe")["properties"]["docker_image"]["pattern"], router.image):
        found.append(_setting(cluster, "image", f"{router.image!r} is not an image reference "
                                                "(repository[:tag][@digest], as docker_image)"))
    if router.port < PRIVILEGED_BELOW:
        found.append(_setting(cluster, "port", f"{router.port}: the official haproxy image runs as a non-root user, "
                                               f"which cannot bind a port under {PRIVILEGED_BELOW} (use 4000, or an "
                                               "image that runs as root)", Severity.WARNING))
    name = router.api_key_env
    if name.upper() in WELL_KNOWN or name.upper().startswith(WELL_KNOWN_PREFIXES):
        found.append(_setting(cluster, "api_key_env", f"{name!r} is a well-known variable of the deploying shell, "
                                                      "not a key: its value would become the bearer token (and be "
                                                      "sent by `ps`); name a variable of its own, e.g. "
                                                      "RECIPEGEN_ROUTER_API_KEY"))
    return found


def key_findings(recipes: list[Recipe], cluster: Cluster) -> list[Diagnostic]:
    """The router's key given a value in an [env] (cluster, node, recipe): a compose file would carry it."""
    router = cluster.router
    assert router is not None
    name = router.api_key_env
    message = (f"{name} is the router's API key (api_key_env): a secret, never written to out/; set it in the "
               "shell that runs `recipegen up` (pass_env passes it to a container)")
    doc = cluster.document
    found = [doc.diagnostic(("env", name), message, rule="secret")] if name in cluster.env else []
    found += [doc.diagnostic(("nodes", i, "env", name), message, rule="secret")
              for i, node in enumerate(cluster.nodes) if name in node.env]
    found += [_at(r.env_origins[name], "env", message, "secret") for r in recipes
              if name in r.env and name in r.env_origins]
    return found
