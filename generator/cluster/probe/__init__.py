"""`recipegen cluster probe`: look at the nodes through their Docker contexts and propose a cluster file.

One job per module, each testable alone: `read` (what runs on a node: the probe, GPU and memlock containers),
`parse` (pure: recorded text to `facts`), `proposal` (pure: every node's facts to a `Proposal`), `render` (the
proposal as cluster TOML through templates/cluster.toml.j2; imported where needed: it loads Jinja) and `write`.
"""

from generator.cluster.probe.facts import NodeFacts, gid_index
from generator.cluster.probe.proposal import exclusion, propose
from generator.cluster.probe.read import LABEL, ProbeError, error_detail, gather
from generator.cluster.probe.write import write_atomic

__all__ = ["LABEL", "NodeFacts", "ProbeError", "error_detail", "exclusion", "gather", "gid_index", "propose",
           "write_atomic"]
