"""The `recipegen` command line: `group` (the `recipegen` group and its exit codes), then one module per command
group: `compile` (build, validate, schema, explain, diff, and what every command starts from), `deploy` (up,
down, ps/status, logs, images, smoke: a recipe on its nodes), `cluster` (contexts, swarm setup, cluster probe,
doctor: the nodes themselves), `models` (weights node to node), `importing` (peer recipe files as recipes) and
`bench` (llama-benchy against a running head).

`main` (cli/group.py) is the console script's entry point; generator.cli.commands lists the commands, each module
imported only when one of its commands runs.
"""

from generator.cli.group import main

__all__ = ["main"]
