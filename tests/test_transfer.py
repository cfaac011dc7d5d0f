"""The transfer agent and the HF cache logic, offline: the agent runs as local processes between loopback
addresses (127.0.0.2, .3 ... stand for the nodes' fabric addresses), temp folders stand for the nodes' caches."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from generator.transfer import hf

AGENT = str(Path(hf.__file__).parent / "agent.py")
REPO = "models--org--tiny"
COMMIT = "c0ffee" + "0" * 34


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def make_model(root: Path, weights: bytes, config: bytes = b'{"model_type": "tiny"}') -> dict[str, bytes]:
    """An HF cache holding one repo: an LFS blob named by its sha256, a small file named by its git blob id."""
    repo = root / "hub" / REPO
    blobs = {hashlib.sha256(weights).hexdigest(): weights, git_blob_id(config): config}
    (repo / "blobs").mkdir(parents=True)
    for name, data in blobs.items():
        (repo / "blobs" / name).write_bytes(data)
    snap = repo / "snapshots" / COMMIT
    (snap / "sub").mkdir(parents=True)
    (snap / "model.safetensors").symlink_to(f"../../blobs/{hashlib.sha256(weights).hexdigest()}")
    (snap / "sub" / "config.json").symlink_to(f"../../../blobs/{git_blob_id(config)}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return blobs


def scan(root: Path) -> dict:
    done = subprocess.run([sys.executable, AGENT, "scan", str(root), REPO], capture_output=True, check=True)
    return json.loads(done.stdout)


def state(root: Path) -> hf.RepoState:
    return hf.RepoState.from_scan(scan(root)["repos"][REPO])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def connect(port: int) -> socket.socket:
    for _ in range(100):
        try:
            return socket.create_connection(("127.0.0.2", port), timeout=10)
        except OSError:
            time.sleep(0.1)
    raise TimeoutError("the receiver never listened")




def agent_without(*names: str) -> list[str]:
    """The agent as an engine image with an older Python runs it: these functions of `os` missing."""
    gone = "; ".join(f"del os.{name}" for name in names)
    return [sys.executable, "-c", f"import os, runpy, sys; {gone}; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')", AGENT]


# Python 3.7 to 3.9: no os.splice, so bytes go through a buffer; 3.6: no os.preadv either.
WITHOUT_SPLICE = agent_without("splice")
PYTHON_36 = agent_without("splice", "preadv")
# A file system splice(2) cannot write to (EINVAL since Linux 5.9): splicing into the pipe works, into a file not.
NO_SPLICE_WRITES = [sys.executable, "-c", "import errno, os, runpy, sys\nreal = os.splice\n"
                    "def splice(src, dst, count, offset_src=None, offset_dst=None, flags=0):\n"
                    "    if offset_dst is not None: raise OSError(errno.EINVAL, 'Invalid argument')\n"
                    "    return real(src, dst, count, offset_src, offset_dst, flags)\n"
                    "os.splice = splice; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')",
                    AGENT]
AGENTS = pytest.mark.parametrize("agent", [None, WITHOUT_SPLICE, PYTHON_36, NO_SPLICE_WRITES],
                                 ids=["splice", "no-splice", "python-3.6", "no-splice-writes"])


def receivers(targets: list[Path], port: int, agent: list[str] | None = None,
              limits: dict[int, int] | None = None) -> list[subprocess.Popen[bytes]]:
    """A receiver per target, chained. `limits`: a file size limit (RLIMIT_FSIZE) for the receiver at that
    index, so its writes fail with EFBIG part way, as on a full disk."""
    procs = []
    for i, root in enumerate(targets):
        nxt = [f"127.0.0.{i + 3}", str(port)] if i + 1 < len(targets) else []
        limit = (limits or {}).get(i)
        procs.append(subprocess.Popen([*(agent or [sys.executable, AGENT]), "recv", str(root), f"127.0.0.{i + 2}",
                                       str(port), *nxt],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      preexec_fn=None if limit is None else lambda limit=limit: _limit_files(limit),
                                      env={**os.environ, "RECIPEGEN_ACCEPT_TIMEOUT": "30"}))
    return procs


def _limit_files(size: int) -> None:
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


def copy(source: Path, targets: list[Path], agent: list[str] | None = None,
         limits: dict[int, int] | None = None) -> tuple[dict, list[dict]]:
    """What `recipegen models` does, without containers: scan, plan, chain. The sender's and receivers' last
    JSON lines."""
    entries = hf.manifest(state(source), REPO, None)
    plan = hf.stream_plan(entries, [state(t) for t in targets])
    port = free_port()
    procs = receivers(targets, port, agent, limits)
    send = subprocess.run([sys.executable, AGENT, "send", "127.0.0.2", str(port)], capture_output=True,
                          input=json.dumps({"root": str(source), "entries": plan}).encode(), timeout=60)
    assert send.returncode == 0, send.stderr.decode()
    lasts = []
    for i, proc in enumerate(procs):
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == (1 if i in (limits or {}) else 0), err.decode()
        lasts.append(json.loads(out.splitlines()[-1]))
    return json.loads(send.stdout.splitlines()[-1]), lasts


def tree(root: Path) -> dict[str, object]:
    """Every file's bytes and every link's target under the repo."""
    found: dict[str, object] = {}
    for path in sorted((root / "hub" / REPO).rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path))
        elif path.is_file():
            found[rel] = path.read_bytes()
    return found


@pytest.fixture
def caches(tmp_path: Path) -> tuple[Path, list[Path], dict[str, bytes]]:
    source = tmp_path / "a"
    blobs = make_model(source, os.urandom(3 << 20) + b"tail")
    targets = [tmp_path / "b", tmp_path / "c"]
    for t in targets:
        t.mkdir()
    return source, targets, blobs


@AGENTS
def test_chain_makes_targets_identical_and_second_run_copies_nothing(caches, agent) -> None:
    source, targets, blobs = caches
    sent, lasts = copy(source, targets, agent)
    assert sent["sent"] == sum(len(b) for b in blobs.values())
    for target, last in zip(targets, lasts):
        assert tree(target) == tree(source)
        assert last["wrote"] == sent["sent"] and last["errors"] == []
    link = targets[1] / "hub" / REPO / "snapshots" / COMMIT / "sub" / "config.json"
    config_id = git_blob_id(b'{"model_type": "tiny"}')
    assert os.readlink(link) == f"../../../blobs/{config_id}"
    assert (targets[1] / "hub" / REPO / "refs" / "main").read_text() == COMMIT
    entries = hf.manifest(state(source), REPO, None)
    assert all(hf.complete(entries, state(t)) for t in targets)
    assert hf.stream_bytes(hf.stream_plan(entries, [state(t) for t in targets])) == 0
    sent, lasts = copy(source, targets)
    assert sent["sent"] == 0 and [last["changed"] for last in lasts] == [0, 0]


def partial_of(root: Path, blobs: dict[str, bytes], cut: int, data: bytes | None = None) -> Path:
    name = max(blobs, key=lambda n: len(blobs[n]))
    path = root / "hub" / REPO / "blobs" / (name + ".recipegen-partial")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if data is not None else blobs[name][:cut])
    return path


def test_resume_sends_only_the_missing_tail(caches) -> None:
    source, targets, blobs = caches
    partial_of(targets[0], blobs, 1 << 20)
    sent, lasts = copy(source, targets[:1])
    assert sent["sent"] == sum(len(b) for b in blobs.values()) - (1 << 20)
    assert tree(targets[0]) == tree(source)


def test_chain_starts_from_the_target_holding_least(caches) -> None:
    """One target has half of the big blob: the stream carries it whole for the other, and the first writes
    only its missing half."""
    source, targets, blobs = caches
    partial_of(targets[0], blobs, 2 << 20)
    sent, lasts = copy(source, targets)
    assert sent["sent"] == sum(len(b) for b in blobs.values())
    assert lasts[0]["wrote"] == sent["sent"] - (2 << 20) and lasts[1]["wrote"] == sent["sent"]
    assert tree(targets[0]) == tree(source) == tree(targets[1])


def test_a_target_holding_a_file_whole_passes_it_on(caches) -> None:
    """The first target already has the big blob, the second has nothing: the stream carries it, the first
    passes it on without writing it, the second ends identical."""
    source, targets, blobs = caches
    big = max(blobs, key=lambda n: len(blobs[n]))
    whole = targets[0] / "hub" / REPO / "blobs" / big
    whole.parent.mkdir(parents=True)
    whole.write_bytes(blobs[big])
    sent, lasts = copy(source, targets)
    assert sent["sent"] == sum(len(b) for b in blobs.values())
    assert lasts[0]["wrote"] == sent["sent"] - len(blobs[big]) and lasts[1]["wrote"] == sent["sent"]
    assert tree(targets[0]) == tree(source) == tree(targets[1])


@AGENTS
def test_a_target_failing_midway_still_passes_the_stream_on(caches, agent) -> None:
    """The first target's writes fail 1 MiB into the big blob (EFBIG, as a full disk fails them): it reports
    the error, keeps a partial that never looks complete and shows no snapshot, while every byte still reaches
    the next target, which ends identical to the source. The next run resumes the first from its partial."""
    source, targets, blobs = caches
    big = max(blobs, key=lambda n: len(blobs[n]))
    sent, lasts = copy(source, targets, agent, limits={0: 1 << 20})
    assert tree(targets[1]) == tree(source) and lasts[1]["errors"] == []
    assert any(big in error for error in lasts[0]["errors"]), lasts[0]
    failed = state(targets[0])
    assert f"{REPO}/blobs/{big}" in failed.partial and f"{REPO}/blobs/{big}" not in failed.files
    assert not failed.links and not failed.refs
    sent, lasts = copy(source, targets)
    assert sent["sent"] == len(blobs[big]) - failed.partial[f"{REPO}/blobs/{big}"]
    assert tree(targets[0]) == tree(source)


def test_a_full_size_partial_is_verified_and_renamed_not_taken_as_whole(caches) -> None:
    """A run cut after the last byte but before the rename (Ctrl-C while the hash catches up) leaves a partial
    of full size: the next run counts the node incomplete, and its receiver verifies and renames the file."""
    source, targets, blobs = caches
    big = max(blobs, key=lambda n: len(blobs[n]))
    partial_of(targets[0], blobs, len(blobs[big]))
    entries = hf.manifest(state(source), REPO, None)
    assert not hf.complete(entries, state(targets[0]))
    sent, lasts = copy(source, targets[:1])
    assert sent["sent"] == sum(len(b) for n, b in blobs.items() if n != big)
    assert tree(targets[0]) == tree(source) and hf.complete(entries, state(targets[0]))
    assert (targets[0] / "hub" / REPO / "snapshots" / COMMIT / "model.safetensors").read_bytes() == blobs[big]


def test_an_empty_file_is_created(caches) -> None:
    """An empty file (an empty __init__.py) has no bytes to carry but must still appear under its name."""
    source, targets, _ = caches
    empty = git_blob_id(b"")
    (source / "hub" / REPO / "blobs" / empty).write_bytes(b"")
    (source / "hub" / REPO / "snapshots" / COMMIT / "__init__.py").symlink_to(f"../../blobs/{empty}")
    copy(source, targets)
    for target in targets:
        assert tree(target) == tree(source)
        assert (target / "hub" / REPO / "snapshots" / COMMIT / "__init__.py").read_bytes() == b""


def test_a_receiver_that_cannot_listen_says_so_in_one_line(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.2", port))
        taken.listen(1)
        done = subprocess.run([sys.executable, AGENT, "recv", str(tmp_path), "127.0.0.2", str(port)],
                              capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [f"cannot listen on 127.0.0.2:{port}: Address already in use"]


def test_wrong_bytes_are_never_renamed_complete(caches) -> None:
    """A partial file holding other bytes than the source's: the hash of the result does not match the blob's
    name, so nothing is renamed, no snapshot link appears, and the partial is dropped for the next run."""
    source, targets, blobs = caches
    bad = partial_of(targets[0], blobs, 0, data=b"\0" * (1 << 20))
    entries = hf.manifest(state(source), REPO, None)
    plan = hf.stream_plan(entries, [state(targets[0])])
    port = free_port()
    [proc] = receivers(targets[:1], port)
    subprocess.run([sys.executable, AGENT, "send", "127.0.0.2", str(port)], check=True, capture_output=True,
                   input=json.dumps({"root": str(source), "entries": plan}).encode(), timeout=60)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "hash" in " ".join(json.loads(out.splitlines()[-1])["errors"])
    assert not bad.exists() and not bad.with_name(bad.name.removesuffix(".recipegen-partial")).exists()
    assert not (targets[0] / "hub" / REPO / "snapshots").exists()
    copy(source, targets[:1])  # the next run starts that file over and succeeds
    assert tree(targets[0]) == tree(source)


def test_a_stream_cut_midway_leaves_a_partial_that_resumes(caches) -> None:
    """The upstream dies after part of the big blob: the receiver keeps the bytes as a partial file (never
    under the final name), shows no snapshot, and the next run sends only the rest."""
    source, targets, blobs = caches
    entries = hf.manifest(state(source), REPO, None)
    plan = hf.stream_plan(entries, [state(targets[0])])
    big = max(blobs, key=lambda n: len(blobs[n]))
    port = free_port()
    [proc] = receivers(targets[:1], port)
    head = json.dumps({"root": str(source), "entries": plan}).encode()
    files = [blobs[e["path"].rsplit("/", 1)[1]] for e in plan if e["kind"] == "file"]
    cut = sum(len(f) for f in files[:files.index(blobs[big])]) + (1 << 20)
    with connect(port) as s:  # a sender that dies 1 MiB into the big blob
        s.sendall(struct.pack(">Q", len(head)) + head + b"".join(files)[:cut])
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    st = state(targets[0])
    assert st.partial and not st.links and not st.refs
    assert all(size == len(blobs[p.rsplit("/", 1)[1]]) for p, size in st.files.items())  # only whole files
    resumed = sum(st.partial.values())
    sent, _ = copy(source, targets[:1])
    assert sent["sent"] == sum(len(b) for b in blobs.values()) - resumed - sum(st.files.values())
    assert tree(targets[0]) == tree(source)


def test_manifest_of_an_incomplete_source_says_what_is_missing(caches) -> None:
    source, _, blobs = caches
    big = max(blobs, key=lambda n: len(blobs[n]))
    (source / "hub" / REPO / "blobs" / big).unlink()
    with pytest.raises(hf.Incomplete, match="missing blob"):
        hf.manifest(state(source), REPO, None)
    with pytest.raises(hf.Incomplete, match="no revision 'v2'"):
        hf.manifest(state(source), REPO, "v2")


def test_revision_by_commit_has_no_ref_and_refs_name_commits(caches) -> None:
    source, _, _ = caches
    by_commit = hf.manifest(state(source), REPO, COMMIT)
    assert [e.kind for e in by_commit].count("ref") == 0 and len(by_commit) == 4
    by_ref = hf.manifest(state(source), REPO, None)
    assert by_ref[-1] == hf.Entry("ref", f"{REPO}/refs/main", text=COMMIT)


def test_links_leaving_the_repo_are_refused(caches) -> None:
    source, _, _ = caches
    link = source / "hub" / REPO / "snapshots" / COMMIT / "evil"
    link.symlink_to("../../../../etc/passwd")
    with pytest.raises(hf.Incomplete, match="outside"):
        hf.manifest(state(source), REPO, None)


def test_scan_reports_an_unwritable_cache() -> None:
    """As root, mode 0500 stops nothing: the agent then runs as an unprivileged user (setpriv, as the corpus's
    permission cases do; .ci/run creates recipegen-ci), so this runs in CI too. The lab covers a read-only mount."""
    import shutil
    import tempfile

    from helpers.unprivileged import drop_root, interpreter, open_to_all

    base = Path(tempfile.mkdtemp(prefix="recipegen-scan-"))  # not tmp_path: its 0700 base stops another user
    try:
        cache = base / "cache"
        cache.mkdir()
        cache.chmod(0o555)
        base.chmod(0o755)
        # The agent runs from a copy: the unprivileged user may not reach the checkout (a clone under 0700).
        agent = base / "agent.py"
        shutil.copyfile(AGENT, agent)
        open_to_all(agent)
        as_user = drop_root("test_scan_reports_an_unwritable_cache")
        # The venv's own python may lie in the checkout: the user runs its base interpreter (the agent needs only
        # the standard library).
        python = sys.executable if as_user is None else str(interpreter())
        command = [*(as_user or []), python, str(agent), "scan", str(cache), REPO]
        done = subprocess.run(command, capture_output=True, check=True, cwd=base)
        found = json.loads(done.stdout)
    finally:
        (base / "cache").chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)
    assert found["writable"] is False and found["error"]
