"""The `recipegen` command group: its commands come from the table in generator.cli.commands, each module
imported when one of its commands runs (`--help` reads the table alone), and every failure becomes one line per
problem and an exit code, never a traceback. Nothing imports this module but the package's entry point, so the
command modules it loads by name form no circle with it.

Exit codes: 0 success; 1 invalid input, failed check or failed deploy; 2 usage error; 130 interrupted.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from generator.cli.compile import print_diagnostics
from generator.diagnostics import ExternalError, RecipegenError


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        from generator.cli.commands import COMMANDS

        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        import importlib

        from generator.cli.commands import COMMANDS

        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        command = getattr(importlib.import_module(entry.module), entry.attribute)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from generator.cli.commands import COMMANDS

        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name].summary) for name in self.list_commands(ctx)])

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RecipegenError as exc:
            print_diagnostics(exc.diagnostics)
            ctx.exit(1)
        except BrokenPipeError:  # `recipegen explain ... | head`: the reader left, nothing to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(1)
        except OSError as exc:  # the filesystem said no: one line, exit 1
            click.echo(f"{exc.filename or 'recipegen'}: error: {exc.strerror or exc}", err=True)
            ctx.exit(1)
        except ExternalError as exc:  # the docker CLI failed where no command handled it
            click.echo(f"error: {exc}", err=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="recipegen")
def main() -> None:
    """Compile LLM-serving recipes into Docker Compose / Swarm stacks for DGX Spark clusters, and deploy them."""
