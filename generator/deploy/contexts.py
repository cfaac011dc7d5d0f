"""`recipegen contexts`: does each node's Docker context exist and answer; create missing ones on request."""

from __future__ import annotations

import json
from dataclasses import dataclass

from generator.deploy.docker import Docker, DockerError
from generator.model import Cluster, Node


@dataclass(frozen=True)
class ContextRow:
    node: str
    context: str
    endpoint: str | None
    answer: str
    ok: bool


def _known_contexts() -> dict[str, str]:
    out = Docker("default").run("context", "ls", "--format", "{{json .}}", timeout=15)
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    return {row["Name"]: row.get("DockerEndpoint", "") for row in rows}


def check_contexts(cluster: Cluster, create: bool) -> list[ContextRow]:
    from generator.deploy.targets import each  # thread fan-out shared with the deploy commands

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
            return ContextRow(node.name, node.context, None, "missing (recipegen contexts --create)", False)
        try:
            version = Docker(node.context).server_version()
            return ContextRow(node.name, node.context, known[node.context], f"yes (engine {version})", True)
        except DockerError as exc:
            return ContextRow(node.name, node.context, known[node.context], f"no: {exc.detail}", False)

    results = each(list(cluster.nodes), probe)
    return list(results.values())
