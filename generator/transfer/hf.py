"""The Hugging Face cache layout, read from a node's scan: which revision a node has, whether it is complete,
what a copy must carry and what each target still lacks.

hub/models--org--name/ holds blobs/<hash> (the bytes; LFS files named by their sha256), snapshots/<commit>/<file>
(relative symlinks into ../../blobs) and refs/<branch> (a commit). A revision is complete on a node when its
snapshot has files and every snapshot link reaches a whole blob.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from generator.resolve.modelid import read_model

COMMIT = re.compile(r"[0-9a-f]{40}")


class Incomplete(Exception):
    """The node does not hold the revision whole; the message says what is missing."""


@dataclass(frozen=True)
class RepoState:
    """One repo as one node's scan saw it; paths relative to the cache's hub/ folder."""

    files: dict[str, int] = field(default_factory=dict)
    partial: dict[str, int] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_scan(cls, data: dict[str, Any]) -> "RepoState":
        return cls(dict(data["files"]), dict(data["partial"]), dict(data["links"]), dict(data["refs"]))


@dataclass(frozen=True)
class Entry:
    kind: str  # "file", "link" or "ref"
    path: str  # relative to hub/
    size: int = 0
    target: str = ""  # a link's target, as written (relative)
    text: str = ""  # a ref's commit

    def as_json(self, start: int = 0) -> dict[str, Any]:
        if self.kind == "file":
            return {"kind": "file", "path": self.path, "size": self.size, "start": start}
        if self.kind == "link":
            return {"kind": "link", "path": self.path, "target": self.target}
        return {"kind": "ref", "path": self.path, "text": self.text}


def repo_folder(model: str) -> str:
    """The cache folder of a Hugging Face id (generator.resolve.modelid reads which models are ids)."""
    folder = read_model(model).cache_folder
    if folder is None:
        raise ValueError(f"{model} is a path in the container, not a Hugging Face id")
    return folder


def commit_of(state: RepoState, repo: str, revision: str | None) -> str | None:
    """The commit a revision names on this node: a ref's content, or the revision itself when it is a commit
    whose snapshot is there."""
    rev = revision or "main"
    if rev in state.refs:
        return state.refs[rev]
    prefix = f"{repo}/snapshots/{rev}/"
    if COMMIT.fullmatch(rev) and any(p.startswith(prefix) for p in (*state.links, *state.files)):
        return rev
    return None


def manifest(state: RepoState, repo: str, revision: str | None) -> list[Entry]:
    """What a copy of the revision carries: blobs first, then snapshot links and files, the ref last.
    Raises Incomplete when this node cannot be the source."""
    rev = revision or "main"
    commit = commit_of(state, repo, revision)
    if commit is None:
        raise Incomplete(f"no revision '{rev}' (no refs/{rev} and no snapshot of that name)")
    prefix = f"{repo}/snapshots/{commit}/"
    files: dict[str, int] = {}
    links: list[Entry] = []
    for path, target in sorted(state.links.items()):
        if not path.startswith(prefix):
            continue
        blob = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
        if target.startswith("/") or not blob.startswith(f"{repo}/blobs/"):
            raise Incomplete(f"{path} links to {target}, outside the repo's blobs")
        if blob not in state.files:
            raise Incomplete(f"{path} links to a missing blob ({posixpath.basename(blob)})")
        files[blob] = state.files[blob]
        links.append(Entry("link", path, target=target))
    snapshot_files = {p: s for p, s in state.files.items() if p.startswith(prefix)}
    if not links and not snapshot_files:
        raise Incomplete(f"the snapshot {commit} is empty")
    entries = [Entry("file", p, size=s) for p, s in sorted({**files, **snapshot_files}.items())]
    entries += links
    if rev in state.refs:
        entries.append(Entry("ref", f"{repo}/refs/{rev}", text=commit))
    return entries


def have(entry: Entry, state: RepoState) -> int:
    """How many leading bytes of a file entry a node already holds (its size when complete)."""
    if state.files.get(entry.path) == entry.size:
        return entry.size
    partial = state.partial.get(entry.path, 0)
    return partial if partial <= entry.size else 0


def whole(entry: Entry, state: RepoState) -> bool:
    """The file is under its final name at its full size (renamed only once verified). A partial file of full
    size is not whole: its hash is unchecked and it has no final name, so the engine cannot see it."""
    return state.files.get(entry.path) == entry.size


def complete(entries: list[Entry], state: RepoState) -> bool:
    for entry in entries:
        if entry.kind == "file" and not whole(entry, state):
            return False
        if entry.kind == "link" and state.links.get(entry.path) != entry.target:
            return False
        if entry.kind == "ref" and state.refs.get(entry.path.rsplit("/refs/", 1)[1]) != entry.text:
            return False
    return True


def missing_bytes(entries: list[Entry], state: RepoState) -> int:
    return sum(e.size - have(e, state) for e in entries if e.kind == "file")


def stream_plan(entries: list[Entry], states: list[RepoState]) -> list[dict[str, Any]]:
    """The entries of one chain: each file from the fewest bytes any of its targets holds (a receiver with more
    passes the bytes it has over); files whole on every target are left out. A file some target lacks goes even
    with no bytes to carry (an empty file, or a partial of full size that a cut run never verified and renamed):
    the receiver then checks and renames what it has. Links and refs always go: a receiver leaves one that is
    already right alone."""
    plan = []
    for entry in entries:
        if entry.kind != "file":
            plan.append(entry.as_json())
            continue
        if not all(whole(entry, s) for s in states):
            plan.append(entry.as_json(min(have(entry, s) for s in states)))
    return plan


def stream_bytes(plan: list[dict[str, Any]]) -> int:
    return sum(e["size"] - e["start"] for e in plan if e["kind"] == "file")
