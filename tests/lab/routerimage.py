"""The lab's router image: the engine stand-in image plus Debian's haproxy (2.6), tagged as the router's image.

No image can be pulled here, so the official `haproxy:2.6` the router's compose file names is stood in for by
Debian's own build (/work/shared/LAB.md): the .debs `apt-get download`ed into a cache folder by `.ci/run` (tests run
offline), unpacked with `dpkg-deb -x`, and the binary with the libraries `ldd` names for it (LD_LIBRARY_PATH on the
unpacked folders) copied into a layer over the engine image, whose busybox gives `cat` and a shell for a look inside.
The haproxy binary runs with the same arguments as in the official image (`haproxy -W -db -f CONFIG`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from . import image
from .layers import archive as archive_layers, load as load_archive, tar_layer
from .sysutil import LabError, run

if TYPE_CHECKING:
    from .netlab import Lab, Node

ROUTER_IMAGE = "recipegen-lab/router:latest"
# haproxy and the libraries Debian's build links that a bare Debian lacks (LAB.md).
PACKAGES = ("haproxy", "liblua5.3-0", "libopentracing-c-wrapper0", "libopentracing1")
DEBS = Path(os.environ.get("RECIPEGEN_LAB_DEBS") or Path.home() / ".cache" / "recipegen-lab" / "debs")


def download_command() -> str:
    return f"cd {DEBS} && apt-get download {' '.join(PACKAGES)}"


def unavailable_reason() -> str | None:
    """Why the router image cannot be made here (no cached .debs), or None."""
    missing = [p for p in PACKAGES if not list(DEBS.glob(f"{p}_*.deb"))]
    if missing:
        return f"no {', '.join(missing)} .deb in {DEBS} (.ci/run downloads them: {download_command()})"
    return None


def stage(dest: Path, base_rootfs: Path) -> Path:
    """The haproxy layer's files in dest/rootfs: the binary at /usr/sbin/haproxy and the libraries it needs that
    the engine image does not hold."""
    reason = unavailable_reason()
    if reason:
        raise LabError(reason)
    unpacked = dest / "unpacked"
    unpacked.mkdir(parents=True, exist_ok=True)
    for package in PACKAGES:
        deb = sorted(DEBS.glob(f"{package}_*.deb"))[-1]
        run(["dpkg-deb", "-x", str(deb), str(unpacked)])
    binary = unpacked / "usr/sbin/haproxy"
    libdirs = sorted({str(p.parent) for p in unpacked.rglob("*.so*")})
    found = subprocess.run(["ldd", str(binary)], capture_output=True, text=True,
                           env={**os.environ, "LD_LIBRARY_PATH": ":".join(libdirs)}, timeout=60)
    if found.returncode or "not found" in found.stdout:
        raise LabError(f"haproxy's libraries are not all found: {found.stdout}{found.stderr}")
    rootfs = dest / "rootfs"
    target = rootfs / "usr/sbin/haproxy"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(binary, target)
    for line in found.stdout.splitlines():
        words = line.split()
        path = words[words.index("=>") + 1] if "=>" in words and len(words) > words.index("=>") + 1 else \
            (words[0] if words else "")  # the loader: "/lib64/ld-linux-x86-64.so.2 (0x...)"
        if not path.startswith("/"):
            continue
        inside = "/" + str(Path(path).relative_to(unpacked)) if path.startswith(str(unpacked)) else path
        copy = rootfs / inside.lstrip("/")
        if not (base_rootfs / inside.lstrip("/")).exists() and not copy.exists():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(path), copy)
    shutil.rmtree(unpacked)
    return dest


def provide(lab: Lab, nodes: list[Node], tag: str) -> str:
    """Make the router image once per lab (in its folder), load it on `nodes` and tag it there as `tag` (the
    image the router's compose file names); returns `tag`."""
    folder = lab.dir
    archive = folder / "router-image.tar"
    if not archive.exists():
        context_dir = folder / "engine-context"
        if not context_dir.exists():
            image.stage_context(context_dir)
        layer_dir = stage(folder / "router-context", context_dir / "rootfs")
        work = folder / "router-layers"
        work.mkdir(exist_ok=True)
        layers = [tar_layer(context_dir / "rootfs", work / "base.tar", "COPY rootfs/ /"),
                  tar_layer(layer_dir / "rootfs", work / "haproxy.tar", f"dpkg-deb -x {' '.join(PACKAGES)}")]
        archive_layers(ROUTER_IMAGE, context_dir / "Dockerfile", layers, archive)
        shutil.rmtree(work)
        shutil.rmtree(layer_dir)
    for node in nodes:
        load_archive(archive, ROUTER_IMAGE, ["docker", "--context", node.context], lab.env, timeout=600)
        lab.docker(node, "tag", ROUTER_IMAGE, tag)
    return tag
