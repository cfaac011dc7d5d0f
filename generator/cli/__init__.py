"""The `recipegen` command line, one module per command group: `compile` (build, validate, schema, explain, diff:
the group itself and what every command starts from), `deploy` (up, down, ps/status, logs, images, smoke: a recipe
on its nodes), `cluster` (contexts, swarm setup, cluster probe, doctor: the nodes themselves), `models` (weights
node to node), `importing` (peer recipe files as recipes) and `bench` (llama-benchy against a running head).

Importing the package registers every command on `main`, the console script's entry point.
"""

from generator.cli import bench, cluster, deploy, importing, models
from generator.cli.compile import main

for _name, _command in {**deploy.COMMANDS, **cluster.COMMANDS, **models.COMMANDS, **importing.COMMANDS,
                        **bench.COMMANDS}.items():
    main.add_command(_command, name=_name)

__all__ = ["main"]
