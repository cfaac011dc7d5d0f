"""The lab's Ray engine image: the engine stand-in image plus a layer holding a real Ray from PyPI.

Real Ray is ~260 MB installed: it is a second image (RAY_IMAGE), made and loaded only when a test asks for it
(Lab.provide_ray_image), so a lab start that runs no Ray test does not pay for it. Its wheels come from a cache
folder that `.ci/run` fills (`pip download`, see WHEELS); nothing is fetched while tests run.

The layer: `pip install --target` of the cached wheels into the image python3's dist-packages (where pip puts
packages in Debian-based engine images), the `ray` console script with the image's /usr/bin/python3 as its
shebang, and the shared libraries `ldd` names for Ray's extension modules and binaries (libstdc++, libgcc_s ...).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from generator.engines import rayoptions

from .image import IMAGE, python_layout, python_version
from .layers import archive as archive_layers, copy_libraries, load as load_archive, shared_objects, tar_layer
from .sysutil import LabError, run

RAY_IMAGE = "recipegen-lab/engine-ray:latest"
# The Ray of the lab: the one generator/data/ray_options.json is read from, the release vLLM images ship (vLLM asks
# only ray[cgraph]>=2.48.0, so an image gets the newest Ray of its build date; 2.60.0 as this is written).
RAY_VERSION = rayoptions.release()
# `ray start` options that keep a lab node's Ray light on the shared 2-core machine: one CPU, Ray's smallest object
# store (75 MiB), no usage-stats prompt. The lab's cluster files give them as ray_args.
LIGHT_RAY = ("--num-cpus=1", "--object-store-memory=78643200", "--disable-usage-stats")
WHEELS = Path(os.environ.get("RECIPEGEN_LAB_WHEELS") or Path.home() / ".cache" / "recipegen-lab" / "wheels")
PLATFORM = ("--only-binary=:all:", "--platform", "manylinux2014_x86_64", "--implementation", "cp")
RAY_SCRIPT = "#!/usr/bin/python3\n# The `ray` console script, as pip writes it.\nimport sys\n\nfrom ray.scripts.scripts import main\n\nsys.exit(main())\n"


def download_command() -> list[str]:
    return [sys.executable, "-m", "pip", "download", "-q", *PLATFORM, "--python-version", python_version(),
            "-d", str(WHEELS), f"ray=={RAY_VERSION}"]


def unavailable_reason() -> str | None:
    """Why the Ray image cannot be made here (no cached wheels), or None."""
    if not list(WHEELS.glob(f"ray-{RAY_VERSION}-*.whl")):
        return f"no Ray {RAY_VERSION} wheel in {WHEELS} (.ci/run downloads it: {' '.join(download_command())})"
    return None


def stage(dest: Path, base_rootfs: Path) -> Path:
    """Stage the Ray layer's files in dest/rootfs (paths as in the image); base_rootfs is the engine image's, whose
    libraries are not copied again."""
    reason = unavailable_reason()
    if reason:
        raise LabError(reason)
    python = python_layout()
    rootfs = dest / "rootfs"
    site = rootfs / python.site.lstrip("/")
    run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index", "--find-links",
         str(WHEELS), "--target", str(site), *PLATFORM, "--python-version", python_version(), f"ray=={RAY_VERSION}"],
        timeout=900)
    shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts with this machine's interpreter as shebang
    script = rootfs / "usr/local/bin/ray"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(RAY_SCRIPT)
    script.chmod(0o755)
    copy_libraries(shared_objects(site, "raylet", "gcs_server"), rootfs, base_rootfs, own=site)
    return dest


def archive(context_dir: Path, ray_dir: Path, out: Path) -> Path:
    """The Ray image as `docker save` writes it, into the file out: the engine image's layer, then Ray's (the
    engine image's ENV and WORKDIR as its config)."""
    work = out.parent / (out.name + ".layers")
    work.mkdir(exist_ok=True)
    layers = [tar_layer(context_dir / "rootfs", work / "base.tar", "COPY rootfs/ /"),
              tar_layer(ray_dir / "rootfs", work / "ray.tar", f"pip install ray=={RAY_VERSION}")]
    archive_layers(RAY_IMAGE, context_dir / "Dockerfile", layers, out)
    shutil.rmtree(work)
    return out


def load(path: Path, docker: list[str], env: dict[str, str]) -> None:
    """`docker load` the archive file (streamed, not read into memory)."""
    load_archive(path, RAY_IMAGE, docker, env, timeout=600)


__all__ = ["IMAGE", "LIGHT_RAY", "RAY_IMAGE", "RAY_VERSION", "WHEELS", "archive", "load", "stage", "unavailable_reason"]
