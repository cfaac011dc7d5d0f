"""The engine stand-in image: staging its build context and putting it on the lab's nodes."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import tarfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .sysutil import LabError, each, run

IMAGE = "recipegen-lab/engine:latest"
ENGINE_DIR = Path(__file__).parent / "engine"
BUSYBOX = Path("/bin/busybox")
# Debian's own python3, not whatever python3 comes first on PATH (pyenv, a venv): its standard
# library sits where the binary expects it (/usr/lib/python3.X), and ldd names its libraries.
PYTHON = Path("/usr/bin/python3")
# /bin/sh is dash, as in the Debian and Ubuntu images engines build on. Not busybox's ash: its
# `command -v` answers for every applet compiled in, linked or not, so a script's "is nc there?"
# would be told yes in an image without nc.
DASH = Path("/bin/dash")
# Applets real engine images lack (they have python3 and tar, rarely nc, wget or rsync): the
# stand-ins and the generator's helper containers must do without them, as on a real Spark.
MISSING_APPLETS = frozenset({"nc", "wget", "httpd", "telnet", "telnetd", "ftpget", "ftpput", "tftp",
                             "ssl_client"})
# Parts of the standard library nothing in an engine image runs: leaving them out keeps the image
# small (config-3.X-*/ alone is the 25 MB static libpython). Bytecode is compiled on first import.
STDLIB_SKIP = ("test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "config-3.*",
               "__pycache__", "_test*.so", "xxlimited*.so", "_xxtestfuzz*.so")


def stage_context(dest: Path) -> Path:
    """Stage the build context in dest: engine/Dockerfile and rootfs/ (the stand-ins, the host's
    Debian python3 with its standard library and shared libraries, dash as /bin/sh, the host's
    static busybox and its applet links but those of MISSING_APPLETS).

    The binaries are copied at run time rather than committed; the links are made here so that
    the Dockerfile has no RUN step.
    """
    rootfs = dest / "rootfs"
    python = python_layout()
    shutil.copytree(ENGINE_DIR / "bin", rootfs / "usr/local/bin")
    for script in (rootfs / "usr/local/bin").iterdir():
        script.chmod(0o755)  # whatever mode the checkout gave them
    # Where pip puts packages in Debian-based engine images: the stand-in ray, sglang and their
    # shared code are importable by the image's python3 as the real packages are.
    shutil.copytree(ENGINE_DIR / "python", rootfs / python.site.lstrip("/"),
                    ignore=shutil.ignore_patterns("__pycache__", ".*"))  # no caches a checkout grew
    shutil.copy2(ENGINE_DIR / "Dockerfile", dest / "Dockerfile")
    _stage_python(python, rootfs)
    bindir = rootfs / "bin"
    bindir.mkdir()
    shutil.copy2(BUSYBOX, bindir / "busybox")
    shutil.copy2(DASH, bindir / "dash")
    (bindir / "sh").symlink_to("dash")
    for applet in _applets():
        if applet not in ("busybox", "sh", "ash") and applet not in MISSING_APPLETS:
            os.symlink("busybox", bindir / applet)
    (rootfs / "tmp").mkdir(mode=0o1777)
    os.chmod(rootfs / "tmp", 0o1777)  # mkdir's mode is filtered by the umask
    (rootfs / "root").mkdir()
    (rootfs / "etc").mkdir()
    (rootfs / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (rootfs / "etc/group").write_text("root:x:0:\n")
    return dest


@dataclass(frozen=True)
class PythonLayout:
    """Where the host's Debian python3 keeps its parts (absolute paths, as inside the image)."""

    binary: str  # the real file /usr/bin/python3 links to, e.g. /usr/bin/python3.11
    stdlib: str  # /usr/lib/python3.11
    site: str  # /usr/local/lib/python3.11/dist-packages: where pip installs in Debian images


def python_layout() -> PythonLayout:
    """Ask the host's Debian python3 where its parts are; LabError if it has none."""
    if not PYTHON.exists():
        raise LabError(f"no Debian python3 at {PYTHON} (apt-get install -y python3)")
    out = run([str(PYTHON), "-I", "-c", "import os, site, sys, sysconfig; "
               "print(os.path.realpath(sys.executable)); print(sysconfig.get_path('stdlib')); "
               "print(site.getsitepackages()[0])"]).stdout.split("\n")
    return PythonLayout(binary=out[0], stdlib=out[1], site=out[2])


def python_version() -> str:
    """The image python3's X.Y: the Ray and vLLM wheels must be built for it."""
    return Path(python_layout().stdlib).name.removeprefix("python")


def _stage_python(python: PythonLayout, rootfs: Path) -> None:
    """Copy the binary (with a python3 link), its standard library and every shared library ldd
    names for it, its extension modules and dash, at the paths the loader looks in."""
    dynload = Path(python.stdlib) / "lib-dynload"
    skip = shutil.ignore_patterns(*STDLIB_SKIP)
    modules = sorted(set(os.listdir(dynload)) - skip(str(dynload), os.listdir(dynload)))
    objects = [str(DASH), python.binary, *(str(dynload / m) for m in modules if m.endswith(".so"))]
    with ThreadPoolExecutor(1) as pool:  # ldd runs the loader once per object: overlap it with the copy
        libraries = pool.submit(_shared_libraries, objects)
        binary = rootfs / python.binary.lstrip("/")
        binary.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(python.binary, binary)
        (binary.parent / "python3").symlink_to(binary.name)
        # symlinks=False: Debian links sitecustomize.py into /etc; the image gets the file itself.
        shutil.copytree(python.stdlib, rootfs / python.stdlib.lstrip("/"), symlinks=False,
                        ignore_dangling_symlinks=True, ignore=skip)
        for lib in libraries.result():
            target = rootfs / lib.lstrip("/")
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(os.path.realpath(lib), target)  # the file, under the name ldd gave


def _shared_libraries(objects: list[str]) -> set[str]:
    """The libraries (and the loader) ldd resolves for objects, as absolute paths."""
    found: set[str] = set()
    for line in run(["ldd", *objects]).stdout.splitlines():
        words = line.split()
        if "=>" in words and len(words) > words.index("=>") + 1:
            path = words[words.index("=>") + 1]
        elif words and words[0].startswith("/") and not words[0].endswith(":"):
            path = words[0]  # the loader: "/lib64/ld-linux-x86-64.so.2 (0x...)"
        else:
            continue  # "linux-vdso.so.1 (0x...)", the "object:" header of each object
        if path.startswith("/"):
            found.add(path)
    return found


def _applets() -> list[str]:
    out = run([str(BUSYBOX), "--list"]).stdout
    return [name for name in out.split() if "/" not in name]


def archive(context_dir: Path) -> bytes:
    """The image as `docker save` writes it (one layer: the staged rootfs; the Dockerfile's ENV and
    WORKDIR as its config), for `docker load` on every node at once. The same bytes give the same
    image id on every node, as a real cluster's nodes should have (recipegen's preflight refuses
    image drift), without a `docker save | load` from node to node; a `docker import` per node
    would give each its own id (its config records the time)."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for child in sorted((context_dir / "rootfs").iterdir()):
            tar.add(child, arcname=child.name)
    layer_bytes = layer.getvalue()
    diff_id = hashlib.sha256(layer_bytes).hexdigest()
    env, workdir = _dockerfile_config(context_dir / "Dockerfile")
    config = json.dumps({
        "architecture": _ARCH.get(os.uname().machine, os.uname().machine), "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {"Env": env, "WorkingDir": workdir},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "recipegen lab: COPY rootfs/ /"}],
    }, sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [IMAGE],
                            "Layers": [f"{diff_id}/layer.tar"]}]).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in ((f"{diff_id}/layer.tar", layer_bytes), (config_name, config),
                           ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


def load(archive_bytes: bytes, dockers: list[list[str]], env: dict[str, str]) -> None:
    """`docker load` the archive on every node at once."""
    each(lambda docker: run([*docker, "load", "-q"], env=env, input=archive_bytes, timeout=300), dockers)


def _dockerfile_config(dockerfile: Path) -> tuple[list[str], str]:
    """The Dockerfile's ENV (as NAME=value words) and WORKDIR; refuse any other instruction but
    `FROM scratch` and `COPY rootfs/ /`, which archive() does itself."""
    env: list[str] = []
    workdir = "/"
    for line in dockerfile.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line in ("FROM scratch", "COPY rootfs/ /"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "ENV" and all("=" in w for w in shlex.split(rest)):
            env += shlex.split(rest)
        elif word.upper() == "WORKDIR":
            workdir = rest.strip()
        else:
            raise LabError(f"{dockerfile}: `{line}` is not made by lab.image.archive; "
                           "use Lab(image_mode='build')")
    return env, workdir


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
