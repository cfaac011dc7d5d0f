"""A model's own description, read from disk: its config.json and the size of its weights (the safetensors index's
`metadata.total_size`, or the safetensors headers), for the `fit` rules' memory estimate.

Where from, in order: files the user names (`recipegen fit RECIPE --config FILE|DIR`), a model folder (a recipe
`model` that is a path, reached through an [[extra_mounts]] whose host folder exists here), or the local Hugging
Face cache, laid out as huggingface_hub lays it out (`hub/models--org--name/refs/<revision>` holding a commit,
`snapshots/<commit>/config.json`). The cache is found as huggingface_hub finds it: HF_HUB_CACHE, else
HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (huggingface_hub's constants.py).
Nothing is downloaded: an absent file is an unknown input, said once by the rule, never a failure.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator.resolve.model import Mount, container_target
from generator.resolve.modelid import read_model

INDEX = "model.safetensors.index.json"
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_HEADER_MAX = 100 * 1024 * 1024  # the safetensors format caps its JSON header at 100 MB
# A config.json is a few KB and DeepSeek-V3's index 9 MB: anything larger is not a model's description, and is
# never read whole (a file named like one may be a symlink to /dev/zero, a FIFO or a 2 GiB blob).
_JSON_MAX = 64 * 1024 * 1024
_BYTES_MAX = 1 << 50  # 1 PiB: a checkpoint size beyond this is not a size


@dataclass(frozen=True)
class WeightSizes:
    """Bytes of the checkpoint's tensors. By part only where the safetensors headers were read (the index names
    tensors but not their sizes)."""

    total: int
    source: str  # "model.safetensors.index.json metadata.total_size" or "safetensors headers (N files)"
    embed: int | None = None  # the input embedding (first pipeline stage)
    head: int | None = None  # lm_head (last pipeline stage); 0 when the checkpoint ties it to the embedding
    layers: dict[int, int] = field(default_factory=dict)  # decoder layer index -> bytes
    files: int = 1  # how many safetensors files (shards) hold them


@dataclass(frozen=True)
class ModelFiles:
    config: dict[str, Any]
    where: str  # the folder or file read, for messages
    weights: WeightSizes | None = None


@dataclass(frozen=True)
class NotFound:
    reason: str  # one line: what was looked for, where
    cache_exists: bool = True  # False: no local Hugging Face cache at all, so nothing could be looked up
    files: bool = True  # the model's files are the problem (giving them with --config helps), not a recipe flag


def hub_cache() -> Path:
    """The local Hugging Face hub cache folder, as huggingface_hub's constants.py computes it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def find_model(model: str, revision: str | None, mounts: tuple[Mount, ...] = (),
               caches: tuple[Path, ...] | None = None) -> ModelFiles | NotFound:
    """`model` as the recipe names it (a Hugging Face id or a container path), read from this machine: the hub
    caches in `caches` in turn (default: the one huggingface_hub uses here)."""
    ref = read_model(model)
    if ref.hub_id is None:
        folder = _host_folder(model, mounts)
        if folder is None:
            return NotFound(f"'{model}' is a path in the container that no [[extra_mounts]] maps to a folder here",
                            cache_exists=False)
        return read_folder(folder)
    looked = list(dict.fromkeys(caches or (hub_cache(),)))
    shown = " or ".join(str(c) for c in looked)
    fetch = (f"`hf download {model} config.json {INDEX}{f' --revision {revision}' if revision else ''}` "
             "fetches just the files fit reads")
    present = []
    for cache in looked:
        try:
            if not cache.is_dir():
                continue
            present.append(cache)
            snapshot = _snapshot(cache / (ref.cache_folder or ""), revision)
        except OSError:  # a cache this user may not enter: unknown, as with none (fit never fails a build)
            continue
        if snapshot is not None:
            return read_folder(snapshot)
    if not present:
        return NotFound(f"no local Hugging Face cache at {shown}; {fetch}", cache_exists=False)
    return NotFound(f"no config.json for '{model}'{f' at revision {revision}' if revision else ''} in the local "
                    f"Hugging Face cache ({shown}); {fetch}")


def read_path(path: Path) -> ModelFiles | NotFound:
    """A config.json the user names, or a model folder: the weights are looked for beside the config."""
    if path.is_dir():
        return read_folder(path)
    config = _json(path)
    if not isinstance(config, dict):
        return NotFound(f"{path} is not a readable JSON object (a model's config.json)")
    return ModelFiles(config, str(path), weight_sizes(path.parent))


def read_folder(folder: Path) -> ModelFiles | NotFound:
    config = _json(folder / "config.json")
    if not isinstance(config, dict):
        return NotFound(f"no readable config.json in {folder}")
    return ModelFiles(config, str(folder), weight_sizes(folder))


def weight_sizes(folder: Path) -> WeightSizes | None:
    """The safetensors headers when the files are here (exact, by tensor), else the index's total_size."""
    files = sorted(folder.glob("*.safetensors"))
    if files:
        sizes = [_header_sizes(f) for f in files]
        if all(s is not None for s in sizes):
            return _by_part({name: size for s in sizes if s for name, size in s.items()}, len(files))
    index = _json(folder / INDEX)
    metadata = index.get("metadata") if isinstance(index, dict) else None
    total = _size(metadata.get("total_size")) if isinstance(metadata, dict) else None
    names = index.get("weight_map") if isinstance(index, dict) else None
    shards = len({str(f) for f in names.values()}) if isinstance(names, dict) else 1
    return WeightSizes(total, f"{INDEX} metadata.total_size", files=max(shards, 1)) if total else None


def _by_part(tensors: dict[str, int], files: int) -> WeightSizes:
    layers: dict[int, int] = {}
    embed = head = 0
    for name, size in tensors.items():
        layer = _LAYER.search(name)
        if layer:
            layers[int(layer[1])] = layers.get(int(layer[1]), 0) + size
        elif "embed_tokens" in name or name.endswith(("wte.weight", "embeddings.weight")):
            embed += size
        elif name.startswith("lm_head") or ".lm_head." in name:
            head += size
    return WeightSizes(sum(tensors.values()), f"safetensors headers ({files} file{'s' if files > 1 else ''})",
                       embed, head, layers, files)


def _header_sizes(path: Path) -> dict[str, int] | None:
    """Each tensor's bytes from a safetensors file's header: an 8-byte little-endian length, then JSON whose
    entries hold `data_offsets` [begin, end] (the safetensors format). Only the header is read; a header that is
    not that shape is not used (None)."""
    start = _read_regular(path, 8, prefix=True)
    if start is None or len(start) < 8:
        return None
    (length,) = struct.unpack("<Q", start)
    raw = _read_regular(path, 8 + length, prefix=True) if length <= _HEADER_MAX else None
    if raw is None or len(raw) < 8 + length:
        return None
    header = _loads(raw[8:8 + length])
    if not isinstance(header, dict):
        return None
    sizes = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_count(v) for v in offsets)
                and offsets[0] <= offsets[1]):
            return None
        sizes[str(name)] = offsets[1] - offsets[0]
    return sizes


def _snapshot(repo: Path, revision: str | None) -> Path | None:
    """The snapshot folder of `revision` (a branch or tag through refs/, or a commit), else refs/main, else the
    only snapshot there is."""
    wanted = revision or "main"
    safe = ".." not in wanted.split("/") and not wanted.startswith("/")
    ref = _read_regular(repo / "refs" / wanted, 256) if safe else None
    commit = ref.decode("utf-8", "replace").strip() if ref is not None else wanted
    if not re.fullmatch(r"[\w.-]+", commit) or commit in (".", ".."):
        return None  # a commit is a folder name in snapshots/, never a path out of it
    if (repo / "snapshots" / commit / "config.json").is_file():
        return repo / "snapshots" / commit
    if revision is None:
        found = [p for p in (repo / "snapshots").glob("*") if (p / "config.json").is_file()]
        if len(found) == 1:
            return found[0]
    return None


def _host_folder(model: str, mounts: tuple[Mount, ...]) -> Path | None:
    """The folder on this machine that an [[extra_mounts]] maps the container path `model` from, if it is here."""
    path = container_target(model)
    for mount in mounts:
        target = container_target(mount.container)
        if path == target or path.startswith(target.rstrip("/") + "/"):
            host = Path(mount.host).expanduser() / path[len(target):].lstrip("/")
            if host.is_dir():
                return host
    return None


def _count(value: object) -> bool:
    """A byte count or offset: an int (not a bool), 0 to 1 PiB."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _BYTES_MAX


def _read_regular(path: Path, cap: int, prefix: bool = False) -> bytes | None:
    """The bytes of a regular file (after symlinks), at most `cap` of them: None for a device, a FIFO, a folder,
    an unreadable file, or (unless `prefix`, which reads just the first `cap` bytes) a file larger than `cap`.
    Opened non-blocking, so a FIFO that appears between the check and the open cannot hang the read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (info.st_size > cap and not prefix):
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(cap)
    except OSError:
        return None
    finally:
        os.close(fd)


def _loads(raw: bytes) -> Any:
    """JSON as the model's files should hold it: no NaN or Infinity, no nesting deep enough to exhaust the stack."""
    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not a number")
    try:
        return json.loads(raw, parse_constant=refuse)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None


def _json(path: Path) -> Any:
    raw = _read_regular(path, _JSON_MAX)
    return None if raw is None else _loads(raw)


def _size(value: object) -> int | None:
    """A checkpoint's byte count (an int, or a whole float, 1 byte to 1 PiB), else None."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    return value if _count(value) and value else None  # type: ignore[return-value]
