"""The whole `cluster probe` as one action: read every node at once, propose a cluster file, check that it
loads. Returns data; the CLI prints it and writes the file."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from generator.cluster.probe.facts import NodeFacts
from generator.cluster.probe.proposal import Proposal, propose
from generator.cluster.probe.read import ProbeError, gather
from generator.deploy import findings as codes
from generator.deploy.docker import reason
from generator.deploy.findings import Finding, Severity
from generator.deploy.targets import each


@dataclass(frozen=True)
class ProbeRun:
    failures: list[Finding]  # one per context that could not be probed: then nothing is proposed
    facts: list[NodeFacts] = field(default_factory=list)  # in the contexts' order
    proposal: Proposal | None = None
    text: str = ""  # the proposed cluster file
    invalid: list[str] = field(default_factory=list)  # why the text would not load as a cluster file


def probe_cluster(contexts: list[str], name: str, user: str | None, hf_cache: str | None, image: str | None,
                  timeout: float, path: Path) -> ProbeRun:
    """`path` is where the file would be written (the loader's messages name it)."""
    from generator.cluster.probe.render import render_cluster
    from generator.diagnostics import RecipegenError
    from generator.resolve.load import cluster_from_text

    results = each(contexts, lambda c: gather(c, image=image, timeout=timeout), key=str)
    failures = [Finding(c, Severity.ERROR, r.code if isinstance(r, ProbeError) else codes.PROBE_FAILED,
                        str(r) if isinstance(r, ProbeError) else reason(r))
                for c, r in results.items() if isinstance(r, Exception)]
    facts = [r for r in results.values() if isinstance(r, NodeFacts)]
    if failures:
        return ProbeRun(failures)
    proposal = propose(facts, name=name, user=user, hf_cache=hf_cache)
    text = render_cluster(proposal)
    try:  # the text must load as a cluster before anyone writes it where the user asked
        cluster_from_text(text, path)
    except RecipegenError as exc:
        return ProbeRun([], facts, proposal, text, [f"({d.key or 'file'}): {d.message}" for d in exc.diagnostics])
    return ProbeRun([], facts, proposal, text)
