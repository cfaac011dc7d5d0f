"""Shared by the tests: moved from tests/test_cli_safety.py, which uses them too."""

from __future__ import annotations

import signal
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def interruptible() -> None:
    """In the child: Ctrl-C (SIGINT) reaches it even when this run was started where SIGINT is ignored (a
    background job of a non-interactive shell), which the child would inherit."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
