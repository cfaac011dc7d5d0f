"""A file out of or into a container, through `docker cp` and a tar on its stdout or stdin: no tool is needed inside
the image (the router's HAProxy, the metrics stack's Prometheus)."""

from __future__ import annotations

import io
import tarfile
import time

from generator.deploy.docker import DockerError
from generator.deploy.targets import OnNode


def read_file(node: OnNode, container: str, path: str) -> bytes | None:
    """The file's bytes (Docker.copy_out); None when the container or the file is not there, or the node does not
    answer."""
    try:
        return node.docker.copy_out(container, path)
    except DockerError:
        return None


def write_file(node: OnNode, container: str, folder: str, name: str, data: bytes) -> None:
    """One file into a container's folder (a volume there too), readable by every user."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    node.docker.run("cp", "-", f"{container}:{folder}", input=buffer.getvalue())
