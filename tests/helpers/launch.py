"""Shared by the tests: moved from tests/test_launch.py, which uses them too."""

from __future__ import annotations

import os
from pathlib import Path
from click.testing import CliRunner
from generator.cli import main

TESTS = Path(__file__).resolve().parent.parent


CLUSTER = """\
name = "duo"
user = "spark"
gpu = "nvidia"
rdma = false
ray_join_timeout = "3s"
[[nodes]]
name = "n1"
address = "10.0.0.1"
context = "n1"
[[nodes]]
name = "n2"
address = "10.0.0.2"
context = "n2"
env = { NCCL_SOCKET_IFNAME = "eth9" }
"""


def build(root: Path):
    previous = Path.cwd()
    os.chdir(root)
    try:
        return CliRunner().invoke(main, ["build"], catch_exceptions=False)
    finally:
        os.chdir(previous)
