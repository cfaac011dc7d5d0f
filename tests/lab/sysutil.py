"""Small process, mount and polling helpers for the lab (Linux, root)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


class LabError(RuntimeError):
    """The lab could not be set up or torn down, or a command run in it failed."""


class LabTimeout(LabError):
    """A bounded wait of the lab ran out."""


def run(
    args: Sequence[str],
    *,
    check: bool = True,
    env: dict[str, str] | None = None,
    input: str | bytes | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess:
    """Run a command, capturing its output (bytes if input is bytes, else text); on failure
    raise LabError with its stderr."""
    proc = subprocess.run(
        list(args), capture_output=True, env=env, input=input, timeout=timeout,
        text=not isinstance(input, bytes),
    )
    if check and proc.returncode != 0:
        err = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode(errors="replace")
        raise LabError(f"{' '.join(args)} exited {proc.returncode}: {err.strip()}")
    return proc


def wait_until(
    condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.1
) -> None:
    """Poll condition until it is true; raise LabError naming `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise LabTimeout(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def pid_alive(pid: int) -> bool:
    """True while pid exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def read_pidfile(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def stop_pid(pid: int, timeout: float = 30) -> None:
    """SIGTERM pid and wait until it exited; SIGKILL it if it outlives timeout."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(pid)
            if not pid_alive(pid):
                return
            time.sleep(0.05)
    raise LabError(f"process {pid} survived SIGKILL")


def _reap(pid: int) -> None:
    """Collect pid if it is our child, so that it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError):  # not our child: its parent reaps it
        os.waitpid(pid, os.WNOHANG)


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below root, deepest first (the order to unmount them in)."""
    prefix = str(root).rstrip("/") + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix.rstrip("/") or point.startswith(prefix):
            points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def unmount_under(root: Path) -> None:
    """Unmount whatever a dead dockerd left mounted below root (overlays, shm, netns files)."""
    for point in mounts_under(root):
        if run(["umount", point], check=False).returncode != 0:
            run(["umount", "-l", point], check=False)


def docker_ping(sock: Path, timeout: float = 1.0) -> bool:
    """True if a Docker engine answers GET /_ping on the unix socket."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(sock))
            s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return b" 200 " in s.recv(64).split(b"\r\n", 1)[0]
    except OSError:
        return False


def base36(n: int, width: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = digits[r] + out
    return out.rjust(width, "0")


def each(fn: Callable[[object], object], items: Sequence) -> list:
    """fn over items in threads (the lab's steps mostly wait on daemons); re-raise the first
    error once all have finished, so that no thread outlives the call."""
    items = list(items)
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        futures = [pool.submit(fn, i) for i in items]
    return [f.result() for f in futures]
