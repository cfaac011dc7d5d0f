"""The lab's Ray engine image: the engine stand-in image plus a layer holding a real Ray from PyPI.

Real Ray is ~260 MB installed: it is a second image (RAY_IMAGE), made and loaded only when a test asks for it
(Lab.provide_ray_image), so a lab start that runs no Ray test does not pay for it. Its wheels come from a cache
folder that `.ci/run` fills (`pip download`, see WHEELS); nothing is fetched while tests run.

The layer: `pip install --target` of the cached wheels into the image python3's dist-packages (where pip puts
packages in Debian-based engine images), the `ray` console script with the image's /usr/bin/python3 as its
shebang, and the shared libraries `ldd` names for Ray's extension modules and binaries (libstdc++, libgcc_s ...).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from generator.engines import rayoptions

from .image import IMAGE, _dockerfile_config, _shared_libraries, python_layout
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


def python_version() -> str:
    """The image python3's X.Y (the wheels must be built for it)."""
    return Path(python_layout().stdlib).name.removeprefix("python")


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
    objects = [str(p) for p in site.rglob("*") if p.is_file() and (p.suffix == ".so" or ".so." in p.name
                                                                    or p.name in ("raylet", "gcs_server"))]
    for lib in _shared_libraries(objects):
        if lib.startswith(str(site)):
            continue  # Ray's own libraries, found beside it
        target = rootfs / lib.lstrip("/")
        if not (base_rootfs / lib.lstrip("/")).exists() and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(lib), target)
    return dest


def _layer(rootfs: Path, path: Path) -> str:
    """Tar rootfs's children into path; its sha256 (the layer's diff id)."""
    with tarfile.open(path, "w") as tar:
        for child in sorted(rootfs.iterdir()):
            tar.add(child, arcname=child.name)
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def archive(context_dir: Path, ray_dir: Path, out: Path) -> Path:
    """The Ray image as `docker save` writes it, into the file out: the engine image's layer, then Ray's (the
    engine image's ENV and WORKDIR as its config)."""
    work = out.parent / (out.name + ".layers")
    work.mkdir(exist_ok=True)
    layers = [(work / "base.tar", context_dir / "rootfs"), (work / "ray.tar", ray_dir / "rootfs")]
    ids = [_layer(rootfs, path) for path, rootfs in layers]
    env, workdir = _dockerfile_config(context_dir / "Dockerfile")
    config = json.dumps({
        "architecture": {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine),
        "os": "linux", "created": "1970-01-01T00:00:00Z", "config": {"Env": env, "WorkingDir": workdir},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{i}" for i in ids]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": f"recipegen lab: {what}"}
                    for what in ("COPY rootfs/ /", f"pip install ray=={RAY_VERSION}")],
    }, sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [RAY_IMAGE],
                            "Layers": [f"{i}/layer.tar" for i in ids]}]).encode()
    with tarfile.open(out, "w") as tar:
        for i, (path, _) in zip(ids, layers):
            tar.add(path, arcname=f"{i}/layer.tar")
        for name, data in ((config_name, config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    shutil.rmtree(work)
    return out


def load(path: Path, docker: list[str], env: dict[str, str]) -> None:
    """`docker load` the archive file (streamed, not read into memory)."""
    with path.open("rb") as f:
        done = subprocess.run([*docker, "load", "-q"], env=env, stdin=f, capture_output=True, timeout=600)
    if done.returncode:
        raise LabError(f"docker load of {RAY_IMAGE} failed: {done.stderr.decode(errors='replace').strip()}")


__all__ = ["IMAGE", "LIGHT_RAY", "RAY_IMAGE", "RAY_VERSION", "WHEELS", "archive", "load", "stage", "unavailable_reason"]
