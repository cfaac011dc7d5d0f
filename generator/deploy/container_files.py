"""A file out of or into a container, through `docker cp` and a tar on its stdout or stdin: no tool is needed inside
the image (the router's HAProxy, the metrics stack's Prometheus)."""

from __future__ import annotations

import io
import subprocess
import tarfile
import time

from generator.deploy.targets import OnNode


def read_file(node: OnNode, container: str, path: str) -> bytes | None:
    """The file's bytes; None when the container or the file is not there."""
    done = subprocess.run(node.docker.command("cp", f"{container}:{path}", "-"), capture_output=True, timeout=30)
    if done.returncode != 0:
        return None
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        member = tar.next()
        handle = tar.extractfile(member) if member is not None else None
        return handle.read() if handle is not None else None


def write_file(node: OnNode, container: str, folder: str, name: str, data: bytes) -> None:
    """One file into a container's folder (a volume there too), readable by every user."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    node.docker.run("cp", "-", f"{container}:{folder}", input=buffer.getvalue())
