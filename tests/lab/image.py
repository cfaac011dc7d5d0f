"""The engine stand-in image: staging its build context and putting it on the lab's nodes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .sysutil import LabError, run

IMAGE = "recipegen-lab/engine:latest"
ENGINE_DIR = Path(__file__).parent / "engine"
BUSYBOX = Path("/bin/busybox")


def stage_context(dest: Path) -> Path:
    """Copy engine/ to dest and add rootfs/: the host's static busybox and its applet links.

    The binary is copied at run time rather than committed; the links are made here so that the
    Dockerfile has no RUN step.
    """
    shutil.copytree(ENGINE_DIR, dest)
    rootfs = dest / "rootfs"
    bindir = rootfs / "bin"
    bindir.mkdir(parents=True)
    shutil.copy2(BUSYBOX, bindir / "busybox")
    for applet in _applets():
        if applet != "busybox":
            os.symlink("busybox", bindir / applet)
    (rootfs / "tmp").mkdir(mode=0o1777)
    os.chmod(rootfs / "tmp", 0o1777)  # mkdir's mode is filtered by the umask
    (rootfs / "root").mkdir()
    (rootfs / "etc").mkdir()
    (rootfs / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (rootfs / "etc/group").write_text("root:x:0:\n")
    return dest


def _applets() -> list[str]:
    out = run([str(BUSYBOX), "--list"]).stdout
    return [name for name in out.split() if "/" not in name]


def build(context_dir: Path, docker: list[str], env: dict[str, str]) -> None:
    """Build the image with the classic builder: BuildKit needs a bridge network the lab lacks."""
    run([*docker, "build", "-q", "-t", IMAGE, str(context_dir)],
        env={**env, "DOCKER_BUILDKIT": "0"}, timeout=300)


def copy(src_docker: list[str], dst_docker: list[str], env: dict[str, str]) -> None:
    """`docker save | docker load` the image from one node to another."""
    save = subprocess.Popen([*src_docker, "save", IMAGE], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    try:
        load = subprocess.run([*dst_docker, "load", "-q"], stdin=save.stdout,
                              capture_output=True, env=env, timeout=300)
    finally:
        save.stdout.close()
        save_err = save.stderr.read().decode(errors="replace")
        save.stderr.close()
        save.wait(timeout=60)
    if save.returncode or load.returncode:
        raise LabError(f"docker save | load of {IMAGE} failed: {save_err}"
                       f"{load.stderr.decode(errors='replace')}")
