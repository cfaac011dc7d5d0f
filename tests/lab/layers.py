"""Images of more than one layer, written as `docker save` writes them: the engine image's rootfs as the base layer,
then one layer per addition (a real Ray, a real vLLM), so that every node loads the same bytes and gets the same
image id. Shared by rayimage.py and vllmimage.py."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from .image import _dockerfile_config, _shared_libraries
from .sysutil import LabError


@dataclass(frozen=True)
class Layer:
    """One layer: a tar file of paths as in the image, its sha256 (the diff id) and what made it."""

    tar: Path
    diff_id: str
    history: str


def tar_layer(rootfs: Path, path: Path, history: str) -> Layer:
    """Tar rootfs's children into path (owned by root, as the image's files are)."""
    with tarfile.open(path, "w") as tar:
        for child in sorted(rootfs.iterdir()):
            tar.add(child, arcname=child.name, filter=_as_root)
    return Layer(path, file_sha256(path), history)


def _as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def archive(name: str, dockerfile: Path, layers: list[Layer], out: Path) -> Path:
    """The image `name` as `docker save` writes it, into the file out: the layers in order, the Dockerfile's ENV and
    WORKDIR as its config. The layers' tar files are read, not moved."""
    env, workdir = _dockerfile_config(dockerfile)
    config = json.dumps({
        "architecture": {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine),
        "os": "linux", "created": "1970-01-01T00:00:00Z", "config": {"Env": env, "WorkingDir": workdir},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer.diff_id}" for layer in layers]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": f"recipegen lab: {layer.history}"}
                    for layer in layers],
    }, sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [name],
                            "Layers": [f"{layer.diff_id}/layer.tar" for layer in layers]}]).encode()
    with tarfile.open(out, "w") as tar:
        for layer in layers:
            tar.add(layer.tar, arcname=f"{layer.diff_id}/layer.tar")
        for member, data in ((config_name, config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def load(path: Path, name: str, docker: list[str], env: dict[str, str], timeout: float = 900) -> None:
    """`docker load` the archive file (streamed, not read into memory)."""
    with path.open("rb") as f:
        done = subprocess.run([*docker, "load", "-q"], env=env, stdin=f, capture_output=True, timeout=timeout)
    if done.returncode:
        raise LabError(f"docker load of {name} failed: {done.stderr.decode(errors='replace').strip()}")


def copy_libraries(objects: list[str], rootfs: Path, base_rootfs: Path, own: Path) -> None:
    """Copy into rootfs every shared library ldd names for objects that neither the base image holds nor lies under
    own (the packages' own libraries, found beside them)."""
    for lib in _shared_libraries(objects):
        if lib.startswith(str(own)):
            continue
        target = rootfs / lib.lstrip("/")
        if not (base_rootfs / lib.lstrip("/")).exists() and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(lib), target)


def shared_objects(folder: Path, *names: str) -> list[str]:
    """The ELF shared objects under folder (by name: *.so, *.so.N) and the named executables."""
    return [str(p) for p in folder.rglob("*") if p.is_file() and not p.is_symlink()
            and (p.suffix == ".so" or ".so." in p.name or p.name in names)]
