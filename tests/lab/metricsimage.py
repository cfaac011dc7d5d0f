"""The lab's metrics images: Debian's prometheus (2.42), prometheus-node-exporter (1.5) and
prometheus-blackbox-exporter, tagged as the images the generated metrics compose files name.

No image can be pulled here (/work/shared/LAB.md), so the official images are stood in for by Debian's builds: the
.debs `apt-get download`ed into the lab's cache folder by `.ci/run` (tests run offline), unpacked with `dpkg-deb -x`,
each binary put where the official image has it (/bin/prometheus, /bin/node_exporter, /bin/blackbox_exporter) and
made its image's entrypoint, as there. The binaries link only libc: the layer is libc, the loader and a static
busybox (a shell for Grafana's start line). Grafana is not packaged: its stand-in is that shell's /run.sh, which
only sleeps, so the generated start line (password check, dashboard stripped of its header) runs for real before it.
One image is made and loaded once per node; each role's tag is a `docker commit` of it with that role's entrypoint
(instant: no layer is added).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from .image import BUSYBOX
from .layers import archive, load as load_archive, tar_layer
from .sysutil import LabError, run

if TYPE_CHECKING:
    from .netlab import Lab, Node

METRICS_IMAGE = "recipegen-lab/metrics:latest"
PACKAGES = ("prometheus", "prometheus-node-exporter", "prometheus-blackbox-exporter")
DEBS = Path(os.environ.get("RECIPEGEN_LAB_DEBS") or Path.home() / ".cache" / "recipegen-lab" / "debs")
# Debian's binary -> where the official image has it (its entrypoint), by the role in the metrics compose file.
BINARIES = {"prometheus": ("usr/bin/prometheus", "/bin/prometheus"),
            "node_exporter": ("usr/bin/prometheus-node-exporter", "/bin/node_exporter"),
            "blackbox": ("usr/bin/prometheus-blackbox-exporter", "/bin/blackbox_exporter")}
LIBC = ("/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2")
APPLETS = ("sh", "grep", "mkdir", "sleep", "cat", "ls", "rm", "mv")
GRAFANA_STANDIN = "#!/bin/sh\n# The lab's Grafana stand-in: Grafana is not packaged by Debian.\nexec sleep 2147483647\n"


def download_command() -> str:
    return f"cd {DEBS} && apt-get download {' '.join(PACKAGES)}"


def unavailable_reason() -> str | None:
    """Why the metrics images cannot be made here (no cached .debs), or None."""
    missing = [p for p in PACKAGES if not list(DEBS.glob(f"{p}_*.deb"))]
    if missing:
        return f"no {', '.join(missing)} .deb in {DEBS} (.ci/run downloads them: {download_command()})"
    return None


def stage(dest: Path) -> Path:
    """The layer's files in dest/rootfs."""
    reason = unavailable_reason()
    if reason:
        raise LabError(reason)
    unpacked = dest / "unpacked"
    unpacked.mkdir(parents=True, exist_ok=True)
    for package in PACKAGES:
        run(["dpkg-deb", "-x", str(sorted(DEBS.glob(f"{package}_*.deb"))[-1]), str(unpacked)])
    rootfs = dest / "rootfs"
    for source, target in BINARIES.values():
        (rootfs / target.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(unpacked / source, rootfs / target.lstrip("/"))
    for lib in LIBC:
        (rootfs / lib.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(lib), rootfs / lib.lstrip("/"))
    shutil.copy2(BUSYBOX, rootfs / "bin/busybox")
    for applet in APPLETS:
        os.symlink("busybox", rootfs / "bin" / applet)
    (rootfs / "run.sh").write_text(GRAFANA_STANDIN)
    (rootfs / "run.sh").chmod(0o755)
    for folder in ("tmp", "prometheus", "etc/prometheus", "var/lib/grafana"):
        (rootfs / folder).mkdir(parents=True, exist_ok=True)
        os.chmod(rootfs / folder, 0o1777)
    shutil.rmtree(unpacked)
    return dest


def provide(lab: Lab, nodes: list[Node], tags: dict[str, str]) -> None:
    """Make the image once per lab (in its folder), load it on `nodes`, and tag each role's image there as `tags`
    names it (role -> the image the metrics compose files name: prometheus, node_exporter, blackbox, grafana)."""
    archived = lab.dir / "metrics-image.tar"
    if not archived.exists():
        layer_dir = stage(lab.dir / "metrics-context")
        (layer_dir / "Dockerfile").write_text("FROM scratch\nCOPY rootfs/ /\nENV PATH=/bin\nWORKDIR /\n")
        layer = tar_layer(layer_dir / "rootfs", lab.dir / "metrics-layer.tar", f"dpkg-deb -x {' '.join(PACKAGES)}")
        archive(METRICS_IMAGE, layer_dir / "Dockerfile", [layer], archived)
        layer.tar.unlink()
        shutil.rmtree(layer_dir)
    entry = {role: target for role, (_, target) in BINARIES.items()} | {"grafana": "/run.sh"}
    for node in nodes:
        load_archive(archived, METRICS_IMAGE, ["docker", "--context", node.context], lab.env, timeout=600)
        for role, tag in tags.items():
            made = f"recipegen-lab-metrics-{role}"
            lab.docker(node, "rm", "-f", made, check=False)
            lab.docker(node, "create", "--name", made, METRICS_IMAGE, "/bin/sh")
            lab.docker(node, "commit", "--change", f'ENTRYPOINT ["{entry[role]}"]', "--change", "CMD []", made, tag)
            lab.docker(node, "rm", made)
