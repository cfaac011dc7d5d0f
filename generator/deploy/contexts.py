"""A node's Docker context: does it exist and answer (`recipegen contexts`), create missing ones on request, and
the finding every command reports when one does not answer."""

from __future__ import annotations

from dataclasses import dataclass

from generator.deploy import findings as codes
from generator.deploy.docker import MISSING_CONTEXT, Docker, DockerError, Failure
from generator.deploy.findings import Finding, Severity
from generator.deploy.targets import each
from generator.resolve.model import Cluster, Node


def context_finding(node: str, context: str, exc: DockerError) -> Finding:
    """The context of a node does not exist or does not answer: say which, and how to fix it."""
    if exc.failure is Failure.NO_CONTEXT:
        return Finding(node, Severity.ERROR, codes.CONTEXT_MISSING,
                       f"context '{context}' does not answer: {exc.short}; create it with "
                       "`recipegen contexts --create`", "recipegen contexts --create")
    return Finding(node, Severity.ERROR, codes.CONTEXT_UNREACHABLE, f"context '{context}' does not answer: "
                   f"{exc.short}", f"check `docker --context {context} info` (the context, ssh access to the node, "
                   "the docker service); `recipegen contexts`")


@dataclass(frozen=True)
class ContextRow:
    node: str
    context: str
    endpoint: str | None
    answer: str
    ok: bool


def _known_contexts() -> dict[str, str]:
    rows = Docker("default").json_lines("context", "ls", "--format", "{{json .}}", timeout=15)
    return {str(row["Name"]): str(row.get("DockerEndpoint", "")) for row in rows}


def check_contexts(cluster: Cluster, create: bool) -> list[ContextRow]:
    known = _known_contexts()
    if create:
        for node in cluster.nodes:
            if node.context not in known:
                endpoint = f"ssh://{node.user}@{node.ssh_host}"
                Docker("default").run("context", "create", node.context, "--description",
                                      f"recipegen node {node.name} of {cluster.name}", "--docker",
                                      f"host={endpoint}", timeout=15)
                known[node.context] = endpoint

    def probe(node: Node) -> ContextRow:
        if node.context not in known:
            return ContextRow(node.name, node.context, None, MISSING_CONTEXT, False)
        try:
            version = Docker(node.context).server_version()
            return ContextRow(node.name, node.context, known[node.context], f"yes (engine {version})", True)
        except DockerError as exc:
            return ContextRow(node.name, node.context, known[node.context], f"no: {exc.short}", False)

    results = each(list(cluster.nodes), probe)
    return [r if isinstance(r, ContextRow) else ContextRow(n.name, n.context, known.get(n.context), f"no: {r}", False)
            for n, r in zip(cluster.nodes, results.values())]
