"""Every `recipegen` command: its name, the module and attribute that define it, and the line `--help` shows.

`recipegen --help` is printed from this table alone, and a command's module is imported only when that command
runs: start-up pays for click and the compile commands, not for the deploy side (tests/test_cli_lazy.py checks
that the table and the modules agree).
"""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    module: str
    attribute: str
    summary: str  # the line in `recipegen --help`; the command's own --help gives its whole text


_COMPILE, _DEPLOY, _CLUSTER = "generator.cli.compile", "generator.cli.deploy", "generator.cli.cluster"

COMMANDS: dict[str, Entry] = {
    "build": Entry(_COMPILE, "build", "Compile recipes into out/ (all or nothing); --check compares."),
    "validate": Entry(_COMPILE, "validate", "Check recipes and cluster files: schemas and lint rules."),
    "schema": Entry(_COMPILE, "schema", "Write the JSON Schemas editors and CI check recipes with."),
    "explain": Entry(_COMPILE, "explain", "Show a recipe resolved: each node's command, env, origins."),
    "diff": Entry(_COMPILE, "diff", "Show what a rebuild would change in out/, per node."),
    "fit": Entry("generator.cli.fit", "fit", "Will a recipe's model fit its GPUs: memory per rank, judged."),
    "import": Entry("generator.cli.importing", "import_", "Import eugr/spark-vllm-docker and sparkrun recipes."),
    "up": Entry(_DEPLOY, "up", "Start a recipe on its nodes, wait until it serves, ask it once."),
    "down": Entry(_DEPLOY, "down", "Stop and remove a recipe's containers on every node."),
    "ps": Entry(_DEPLOY, "ps", "One table of a recipe's ranks across its nodes."),
    "status": Entry(_DEPLOY, "ps", "The same as ps."),
    "top": Entry("generator.cli.top", "top", "Every recipe live: state, tok/s, requests, KV cache, TTFT."),
    "logs": Entry(_DEPLOY, "logs", "A recipe's logs from every node, each line named by node."),
    "smoke": Entry(_DEPLOY, "smoke", "Send a running recipe's head one real request."),
    "images": Entry(_DEPLOY, "images", "Make a recipe's image present and identical on its nodes."),
    "models": Entry("generator.cli.models", "models", "Put a recipe's model weights on every node it uses."),
    "bench": Entry("generator.cli.bench", "bench", "Benchmark a running recipe with llama-benchy."),
    "contexts": Entry(_CLUSTER, "contexts", "Each node's Docker context and whether it answers."),
    "swarm": Entry(_CLUSTER, "swarm", "Docker Swarm as the engine: label nodes, check GPUs."),
    "cluster": Entry(_CLUSTER, "cluster_group", "Cluster files from the live nodes (cluster probe)."),
    "doctor": Entry(_CLUSTER, "doctor", "Check the cluster file against the live nodes."),
    "unlock": Entry(_CLUSTER, "unlock", "Break a lock a dead recipegen command left on nodes."),
}
