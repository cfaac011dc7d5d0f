"""The command table (generator/cli/commands.py) and the command modules agree, and `recipegen --help` is
printed from the table without importing the modules behind the commands."""

from __future__ import annotations

import importlib
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from generator.cli import main
from generator.cli.commands import COMMANDS

MODULES = sorted({entry.module for entry in COMMANDS.values()})


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_entry_is_a_command_of_its_module(name: str):
    entry = COMMANDS[name]
    command = getattr(importlib.import_module(entry.module), entry.attribute)
    assert isinstance(command, click.Command)
    assert main.get_command(click.Context(main), name) is command
    assert entry.summary and len(entry.summary) <= 66  # one line beside the name in an 80-column terminal


@pytest.mark.parametrize("module", MODULES)
def test_every_top_level_command_of_a_module_is_in_the_table(module: str):
    listed = {entry.attribute for entry in COMMANDS.values() if entry.module == module}
    loaded = importlib.import_module(module)
    nested = {id(c) for v in vars(loaded).values() if isinstance(v, click.Group) for c in v.commands.values()}
    defined = {name for name, v in vars(loaded).items()
               if isinstance(v, click.Command) and v is not main and id(v) not in nested}
    assert defined == listed


def test_help_lists_the_table_and_imports_no_command_module():
    code = ("import sys\nfrom generator.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('generator.cli.') or m.startswith('generator.deploy')"
            " or m in ('jinja2', 'rich', 'ryaml')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported = eval(result.stdout.strip().splitlines()[-1])
    assert imported == ["generator.cli.commands", "generator.cli.compile", "generator.cli.group"]
    for name, entry in COMMANDS.items():
        assert f"  {name}" in result.stdout and entry.summary in result.stdout


def test_an_alias_runs_the_same_command_under_its_own_name():
    result = CliRunner().invoke(main, ["status", "--help"])
    assert result.exit_code == 0 and result.output.startswith("Usage: main status [OPTIONS] RECIPE")
    assert main.get_command(click.Context(main), "status") is main.get_command(click.Context(main), "ps")


def test_an_unknown_command_is_a_usage_error():
    result = CliRunner().invoke(main, ["deploy-everything"])
    assert result.exit_code == 2 and "No such command 'deploy-everything'" in result.output
