"""A rebuild with nothing changed costs what reading costs: `build` and `build --check` first ask whether the last
successful run with the same command saw the same inputs and left out/ as it is now; then they say what that run
said, compiling nothing.

The record (one small JSON per project, out/ and command, in a per-user folder of the temp dir: never in out/,
which is committed) holds:
- a digest of every input: each file under recipes/ (recipes, parents, mods, Dockerfiles) and the cluster file,
  by content; templates/ and schema/ by content; the package's own files and the libraries that shape the output
  (Jinja, PyYAML, the schema validators) by their stat (path, size, mtime, inode: as Python's own .pyc check), the
  Python version, and the environment variables that say where the Hugging Face cache is;
- what the compile read beyond those (`watched`): a parent recipe or mod folder outside recipes/ (by content), and
  each recipe's model folder in the local Hugging Face cache, which the fit rules read (by stat of its refs/ and
  snapshots/). A recipe whose model is a mounted folder is not recorded: the next run compiles;
- out/ as the run left it: every entry, with each file's inode, size, mtime and ctime (a write, a rename, a
  `touch`, a copy over it all change the ctime: an edited file is never taken for ours); a file changed within
  two seconds of the record, also by content (file times come from a coarse clock: an edit in the same tick
  could keep every stat, as git's "racy" entries);
- the lines it printed on stderr (warnings), and its counts.

A mismatch anywhere, or a record that cannot be read, means a full compile: the record only ever skips work.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

VERSION = 1
_LIBRARIES = ("jinja2", "markupsafe", "yaml", "jsonschema", "jsonschema_rs")
_HF_ENV = ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME")
_KEEP = 256  # records kept in the folder; the oldest go first
RACY_NS = 2 * 10**9  # a file changed this close to its record is also checked by content
PACKAGE = Path(__file__).resolve().parent.parent  # generator/: its code shapes the output
DISABLE_ENV = "RECIPEGEN_NO_BUILD_RECORD"  # set (to anything): always compile (benchmarks time a full rebuild)


@dataclass
class Record:
    digest: str  # of the inputs
    watched: list[list[str]]  # [kind, path]: "tree" (by content) or "stats" (by stat), beyond the inputs
    watched_digest: str
    outputs: dict[str, list[int] | None]  # out/'s entries: a file's [ino, size, mtime_ns, ctime_ns]; None: a folder
    stderr: list[str] = field(default_factory=list)
    files: int = 0
    recipes: int = 0
    # Files changed less than RACY_NS before the record was taken, by content: the kernel stamps times from a
    # coarse clock (a jiffy, or a second on some filesystems), so a same-size rewrite in that tick keeps every stat.
    racy: dict[str, str] = field(default_factory=dict)


def _folder() -> Path | None:
    """recipegen's per-user folder in the temp dir: made 0700, owned by this user, not a link; else None."""
    folder = Path(tempfile.gettempdir()) / f"recipegen-builds-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None  # another user's, or a link: never read or written
    return folder


def key(root: Path, cluster: Path, out: Path, refs: tuple[str, ...], strict: bool) -> str:
    """Which run a record is for: the same project, cluster file, out/, recipes named and --strict."""
    said = json.dumps([VERSION, str(root.resolve()), str(cluster.absolute()), str(out.absolute()), list(refs),
                       strict, os.getcwd() if refs else ""])
    return hashlib.sha256(said.encode()).hexdigest()[:32]


def _add_tree(digest: "hashlib._Hash", top: Path, by_content: bool) -> None:
    """Every entry under `top` (sorted, links followed for content), by content or by stat."""
    if not top.exists():
        digest.update(b"missing\0" + str(top).encode())
        return
    if top.is_file():
        digest.update(str(top).encode() + b"\0" + (_content(str(top)) if by_content else _stat_of(top)) + b"\0")
        return
    for folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            path = os.path.join(folder, name)
            digest.update(path.encode() + b"\0")
            try:
                if by_content:
                    digest.update(_content(path))
                else:
                    digest.update(_stat_of(Path(path)))
            except OSError as exc:
                digest.update(f"unreadable {exc.errno}".encode())


def _content(path: str) -> bytes:
    """A file's sha256, read in pieces: a mod may be gigabytes (docs/recipe-format.md promises any size)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for piece in iter(lambda: fh.read(1 << 20), b""):
            digest.update(piece)
    return digest.digest()


def _stat_of(path: Path) -> bytes:
    try:
        info = os.stat(path)
    except OSError:
        return b"missing"
    return f"{info.st_size} {info.st_mtime_ns} {info.st_ino}".encode()


def _data_dir(name: str) -> Path:
    from generator.read.resources import data_dir

    return data_dir(name)


def inputs_digest(root: Path, cluster: Path) -> str:
    from importlib.util import find_spec

    digest = hashlib.sha256(json.dumps([VERSION, sys.version, [os.environ.get(n) for n in _HF_ENV]]).encode())
    _add_tree(digest, root / "recipes", True)
    _add_tree(digest, cluster, True)
    for name in ("templates", "schema"):
        _add_tree(digest, _data_dir(name), True)
    _add_tree(digest, PACKAGE, False)
    for library in _LIBRARIES:
        spec = find_spec(library)
        digest.update(library.encode() + _stat_of(Path(spec.origin)) if spec and spec.origin else b"-")
    return digest.hexdigest()


def watched_digest(watched: list[list[str]]) -> str:
    digest = hashlib.sha256()
    for kind, path in watched:
        _add_tree(digest, Path(path), kind == "tree")
    return digest.hexdigest()


def out_state(out: Path) -> dict[str, list[int] | None]:
    found: dict[str, list[int] | None] = {}

    def walk(folder: str, prefix: str) -> None:
        with os.scandir(folder) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                rel = prefix + entry.name
                if stat.S_ISDIR(info.st_mode):
                    found[rel + "/"] = None
                    walk(entry.path, rel + "/")
                else:  # a link or anything else is recorded by its own stat: a change there shows
                    found[rel] = [info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_mode]

    try:
        walk(str(out), "")
    except OSError:
        return {"?": None}  # cannot be listed: never equal to a record
    return found


def recall(run: str, digest: str, out: Path) -> Record | None:
    """The record of the same run, when the inputs, what it watched and out/ are all as it left them."""
    folder = _folder()
    if folder is None or os.environ.get(DISABLE_ENV):
        return None
    try:
        record = Record(**json.loads((folder / f"{run}.json").read_text("utf-8")))
    except (OSError, ValueError, TypeError):
        return None
    if record.digest != digest or record.outputs != out_state(out):
        return None
    if watched_digest(record.watched) != record.watched_digest:
        return None
    if record.racy:
        if any(_sha256(out / rel) != want for rel, want in record.racy.items()):
            return None
        remember(run, record, out)  # proven by content: the next run need only stat them, once they are old
    return record


def _sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def remember(run: str, record: Record, out: Path) -> None:
    """Keep what this successful run saw (out/ as it is now); a record that cannot be written is not kept."""
    folder = _folder()
    if folder is None or os.environ.get(DISABLE_ENV):
        return
    now = time.time_ns()
    record.outputs = out_state(out)
    record.watched_digest = watched_digest(record.watched)
    record.racy = {rel: _sha256(out / rel) for rel, info in record.outputs.items()
                   if info is not None and max(info[2], info[3]) > now - RACY_NS}
    target = folder / f"{run}.json"
    try:
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(record)), "utf-8")
        tmp.replace(target)
        kept = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
        for old in kept[:-_KEEP]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
