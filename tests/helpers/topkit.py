"""`recipegen top` in a real terminal: tmux runs it in a detached session of a known size, capture-pane reads the
screen as a user sees it, and the row of a recipe is read back into its columns."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

COLUMNS = ("recipe", "nodes", "state", "tok/s", "running", "waiting", "KV %", "TTFT p50", "restarts")


def tmux() -> str:
    found = shutil.which("tmux")
    if found is None:
        reason = "tmux is not installed (Debian's tmux)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return found


def screen_of(command: list[str], cwd: Path, env: dict[str, str], until: str, timeout: float = 60.0,
              settle: float = 0.0) -> str:
    """Run command in a 200x40 tmux session; the screen `settle` seconds after it first shows `until` (or at
    timeout), then end it. A tmux server of its own (-L): a running one would give the session its environment."""
    session = f"recipegen-top-{os.getpid()}-{time.monotonic_ns()}"
    base = [tmux(), "-L", session]
    line = f"cd {shlex.quote(str(cwd))} && exec {shlex.join(command)}"
    # The pane's size is the terminal's: a COLUMNS or LINES in the environment (an xdist worker has COLUMNS=80)
    # would override it for rich, as it does for any program that reads them.
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
    subprocess.run([*base, "new-session", "-d", "-s", session, "-x", "200", "-y", "40", line], env=env, check=True)
    screen = ""
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = subprocess.run([*base, "capture-pane", "-p", "-t", session], capture_output=True,
                                    text=True).stdout
            if until in screen:
                time.sleep(settle)
                return subprocess.run([*base, "capture-pane", "-p", "-t", session], capture_output=True,
                                      text=True).stdout
            time.sleep(0.3)
        return screen
    finally:
        subprocess.run([*base, "kill-server"], capture_output=True)


def row_of(screen: str, recipe: str) -> dict[str, str]:
    """A recipe's row of top's table on the screen, by column name."""
    line = next(li for li in screen.splitlines() if f" {recipe} " in li)
    cells = [c.strip() for c in line.strip().strip("│┃").split("│")]
    return dict(zip(COLUMNS, cells))
