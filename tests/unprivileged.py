"""Run a piece of recipegen as an unprivileged user, wherever the checkout lies.

As root, chmod 000 stops nothing, so permission cases drop to an unprivileged user (setpriv; .ci/run creates
`recipegen-ci`). That user cannot pass through a checkout under a 0700 folder (a clone under /root or a
`mktemp -d`), so what it runs is copied first into a folder it can reach: the test then depends on the code,
not on where the checkout lies.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CI_USER = "recipegen-ci"  # .ci/run creates it; without it, root drops to nobody (65534)

# What `python3 -m generator validate/build` reads: the package, its data, and a project to run in.
PROJECT_PARTS = ("generator", "schema", "templates", "recipes", "mods", "cluster.toml")


def drop_root(case: str) -> list[str] | None:
    """A command prefix that runs as an unprivileged user when this process is root; None when it is not (the
    case then runs as it is). Outside CI a missing setpriv skips the case with the reason printed."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam(CI_USER)
        uid, gid = entry.pw_uid, entry.pw_gid
    except KeyError:
        uid = gid = 65534
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        reason = "running as root without setpriv (util-linux): cannot drop privileges for the permission case"
        if os.environ.get("CI"):
            pytest.fail(reason)
        print(f"SKIP {case}: {reason}")
        pytest.skip(reason)
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]


def open_to_all(path: Path) -> None:
    """Let any user read `path` and pass through it and its parents up to / (search, not listing, for the
    parents): a clone made under umask 077 has 0600 files."""
    for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
        if item.is_symlink():
            continue
        mode = item.stat().st_mode
        extra = stat.S_IROTH | (stat.S_IXOTH if item.is_dir() or mode & stat.S_IXUSR else 0)
        item.chmod(mode | extra)
    for parent in path.parents:
        if parent.stat().st_mode & stat.S_IXOTH == 0:
            raise AssertionError(f"{parent} is closed to other users: make the copy under a folder they can reach")


def project_copy(base: Path) -> Path:
    """A copy of the package and the project under `base` (a folder other users can pass through), readable by
    all. Run `python3 -m generator` there (cwd): Python finds the copied package before the installed one."""
    project = base / "project"
    project.mkdir()
    for part in PROJECT_PARTS:
        source = ROOT / part
        if source.is_dir():
            shutil.copytree(source, project / part, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif source.is_file():
            shutil.copy2(source, project / part)
    open_to_all(project)
    return project


def run_python(command: list[str], as_user: list[str] | None, cwd: Path,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`sys.executable` with `command`, as `as_user`, in `cwd`; the interpreter must be reachable (.ci/run opens
    its folders)."""
    return subprocess.run([*(as_user or []), sys.executable, *command], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **(env or {})})
