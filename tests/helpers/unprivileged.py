"""Run a piece of recipegen as an unprivileged user, wherever the checkout lies.

As root, chmod 000 stops nothing, so permission cases drop to an unprivileged user (setpriv; .ci/run creates
`recipegen-ci`). That user cannot pass through a checkout under a 0700 folder (a clone under /root or a
`mktemp -d`), so what it runs is copied first into a folder it can reach: the test then depends on the code,
not on where the checkout lies. The same holds for the venv, which "Set up" puts inside the checkout: the child
runs the venv's base interpreter with a copy of recipegen's dependencies (the closure of its requirements, not
the test extras) as its PYTHONPATH.
"""

from __future__ import annotations

import atexit
import functools
import importlib.metadata
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
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


def reachable(path: Path) -> bool:
    """Whether any user can run `path`: it and every folder above it open to others (search for the folders)."""
    if not os.stat(path).st_mode & stat.S_IXOTH:
        return False
    return all(parent.stat().st_mode & stat.S_IXOTH for parent in path.parents)


def interpreter() -> Path:
    """The interpreter the unprivileged child runs: the venv's base interpreter (a venv's own `python` lies inside
    the checkout when the venv does), resolved, so nothing on its path needs more than the search bit. Outside
    CI an interpreter behind a closed folder skips the case with the reason printed."""
    base = Path(os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable))
    if not reachable(base):
        reason = f"{base} lies behind a folder closed to other users: the permission case cannot run it"
        if os.environ.get("CI"):
            pytest.fail(reason)
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    return base


def _requirements(name: str) -> list[str]:
    """The distributions `name` needs installed here (no extras; markers judged for this interpreter)."""
    from packaging.requirements import Requirement  # pytest's own dependency

    needed = []
    for line in importlib.metadata.distribution(name).requires or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            needed.append(req.name)
    return needed


@functools.cache
def dependency_site() -> Path:
    """A folder any user can read holding the installed files of every distribution recipegen needs to run
    (about 40 MB, copied once per session, removed at exit); recipegen itself comes from `project_copy`."""
    site = Path(tempfile.mkdtemp(prefix="recipegen-site-"))
    atexit.register(shutil.rmtree, site, True)
    seen: set[str] = set()
    todo = _requirements("recipegen")
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        dist = importlib.metadata.distribution(name)
        todo.extend(_requirements(name))
        for file in dist.files or []:
            source = Path(str(dist.locate_file(file)))
            if "__pycache__" in file.parts or file.parts[0] == ".." or not source.is_file():
                continue  # bytecode is rebuilt; `..` is a script in the venv's bin/
            (site / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, site / file)
    site.chmod(0o755)
    open_to_all(site)
    return site


def run_python(command: list[str], as_user: list[str] | None, cwd: Path,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Python with `command` in `cwd`: as this process runs it when `as_user` is None, else as `as_user`, with
    an interpreter and packages that user can reach wherever the checkout and its venv lie."""
    python, extra = Path(sys.executable), {}
    if as_user is not None:
        python, extra = interpreter(), {"PYTHONPATH": str(dependency_site()), "PYTHONNOUSERSITE": "1"}
    return subprocess.run([*(as_user or []), str(python), *command], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **extra, **(env or {})})
