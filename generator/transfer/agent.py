"""The program the helper containers run: stdlib only, shipped as `python3 -c <this file> MODE ...`, so nothing
has to exist on a node but the engine image (vLLM, NGC and SGLang images have python3, rarely nc or rsync).

Modes (ROOT is the Hugging Face cache folder as the container sees it; repos live under ROOT/hub):
  scan ROOT REPO...                      JSON on stdout: free bytes, writable, and each repo's files, partial
                                         files, symlinks and refs.
  send HOST PORT                         the plan (JSON) on stdin; stream it and the bytes it names to HOST:PORT.
  recv ROOT BIND PORT [NEXT_HOST NEXT_PORT]
                                         take one stream on BIND:PORT, pass every byte on to NEXT (the chain)
                                         while writing this node's copy; progress as JSON lines on stdout.
  image-ping SOCKET                      the engine at SOCKET answers (`recipegen images` probes a helper image).
  image-send SOCKET IMAGE HOST PORT      `recipegen images`: stream IMAGE out of the engine at SOCKET (its API's
                                         GET /images/get) to HOST:PORT (see the section at the end).
  image-recv SOCKET BIND PORT [NEXT_HOST NEXT_PORT]
                                         take that stream on BIND:PORT, pass it on to NEXT, load it into the
                                         engine at SOCKET (POST /images/load); its result as JSON on stdout.

The stream: 8-byte big-endian length, the plan as JSON, then for each "file" entry its bytes [start, size).
A receiver writes only the bytes beyond what it already has (`.recipegen-partial` files resume), and renames a
file to its final name only once complete and, for blobs named by their hash (LFS sha256, git blob sha1),
once the hash of the bytes written matches the name. Snapshot symlinks come after every blob and refs last:
an interrupted copy never shows the engine a model that looks complete.

The data path of a receiver, per chunk of a file it writes: splice(2) from the socket into its partial file (no
copy through Python), then sendfile(2) of that range to the next node and a read back from the page cache into
the hash, each on a thread of its own. So what a node passes on is what it wrote, and on a CPU shared with the
network stack (every node of the lab; a Spark's cores also serve a 200 Gb/s link) the copy costs little more than
the network itself. The hash is what remains: sha256 runs at 1.5 to 2.5 GB/s per core.
"""

import errno
import fcntl
import hashlib
import json
import os
import queue
import re
import resource
import socket
import struct
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional

PARTIAL = ".recipegen-partial"
CHUNK = 4 << 20
SYNC_EVERY = 64 << 20
STALL = 600  # seconds a socket may move nothing before the copy is given up
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # the constant is in fcntl from Python 3.10
SPLICE = hasattr(os, "splice")  # Python 3.10+
PREADV = hasattr(os, "preadv")  # Python 3.7+
HEX64 = re.compile(r"[0-9a-f]{64}")
HEX40 = re.compile(r"[0-9a-f]{40}")


def say(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


# --- scan ----------------------------------------------------------------------------------------------------

def scan(root: str, repos: List[str]) -> None:
    hub = os.path.join(root, "hub")
    out: Dict[str, Any] = {"free": None, "writable": False, "error": None, "repos": {}}
    try:
        os.makedirs(hub, exist_ok=True)
        probe = os.path.join(hub, ".recipegen-write-test-%d" % os.getpid())
        with open(probe, "wb") as f:
            f.write(b"x")
        os.unlink(probe)
        out["writable"] = True
    except OSError as exc:
        out["error"] = "%s: %s" % (getattr(exc, "filename", None) or hub, exc.strerror or exc)
    try:
        st = os.statvfs(hub if os.path.isdir(hub) else root)
        out["free"] = st.f_bavail * st.f_frsize
    except OSError:
        pass
    for repo in repos:
        files, partial, links, refs = {}, {}, {}, {}
        base = os.path.join(hub, repo)
        for folder, dirs, names in os.walk(base):
            dirs.sort()
            for name in sorted(names) + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
                full = os.path.join(folder, name)
                rel = os.path.relpath(full, hub)
                if os.path.islink(full):
                    links[rel] = os.readlink(full)
                elif rel.startswith(repo + "/refs/"):
                    with open(full, encoding="utf-8", errors="replace") as f:
                        refs[rel[len(repo) + 6:]] = f.read().strip()
                elif name.endswith(PARTIAL):
                    partial[rel[: -len(PARTIAL)]] = os.path.getsize(full)
                elif ".recipegen-tmp" not in name:
                    files[rel] = os.path.getsize(full)
        out["repos"][repo] = {"files": files, "partial": partial, "links": links, "refs": refs}
    say(**out)


# --- send ----------------------------------------------------------------------------------------------------

def connect(host: str, port: int, wait: float = 120.0) -> socket.socket:
    deadline = time.monotonic() + wait
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=30)
            sock.settimeout(STALL)
            return sock
        except OSError as exc:
            if time.monotonic() > deadline:
                raise SystemExit("cannot reach the next node at %s:%d after %.0fs: %s" % (host, port, wait, exc))
            time.sleep(0.2)


def header(plan: Dict[str, Any]) -> bytes:
    data = json.dumps(plan).encode()
    return struct.pack(">Q", len(data)) + data


def send(host: str, port: str) -> None:
    plan = json.load(sys.stdin)
    root = plan["root"]
    sock = connect(host, int(port))
    sock.sendall(header(plan))
    sent, last = 0, 0.0
    for entry in plan["entries"]:
        if entry["kind"] != "file":
            continue
        path = os.path.join(root, "hub", entry["path"])
        offset, size = entry["start"], entry["size"]
        with open(path, "rb") as f:
            if os.path.getsize(path) != size:
                raise SystemExit("%s changed size on the source (%d, expected %d)"
                                 % (entry["path"], os.path.getsize(path), size))
            while offset < size:
                # socket.sendfile, not os.sendfile: the socket has a timeout, so its fd is non-blocking
                n = sock.sendfile(f, offset, min(size - offset, 64 << 20))
                if n == 0:
                    raise SystemExit("%s: unexpected end of file" % entry["path"])
                offset += n
                sent += n
                if time.monotonic() - last > 0.5:
                    say(sent=sent)
                    last = time.monotonic()
    sock.shutdown(socket.SHUT_WR)
    sock.recv(1)  # the first receiver closes once it has every byte: the copy is not lost in a socket buffer
    sock.close()
    say(sent=sent, done=True)


# --- recv ----------------------------------------------------------------------------------------------------

def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise SystemExit("the upstream node closed the stream early")
        buf += part
    return bytes(buf)


def fill(sock: socket.socket, buf: memoryview, n: int, what: str) -> bytes:
    """The next n bytes of the stream as one chunk (for bytes this node does not write but passes on)."""
    pos = 0
    while pos < n:
        got = sock.recv_into(buf[pos:n])
        if not got:
            raise SystemExit("the upstream node closed the stream early (%s)" % what)
        pos += got
    return bytes(buf[:n])


def blocking(sock: socket.socket, seconds: int) -> None:
    """Blocking mode with a kernel timeout: splice(2) and sendfile(2) on a socket Python has put in timeout mode
    (non-blocking underneath) fail with EAGAIN, and a dead peer must still not hang the copy forever."""
    sock.settimeout(None)
    limit = struct.pack("ll", seconds, 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, limit)


class Splicer:
    """Moves stream bytes from the socket into a file inside the kernel (splice(2) through a pipe): the weights
    are never copied into Python, which on a shared or busy CPU is the difference between keeping up with the
    link and not. Python 3.10+ on Linux; without it (older engine images) bytes go through recv and pwrite."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        self.to_files = True
        self.size = 65536
        for size in (CHUNK, 1 << 20):  # a bigger pipe: fewer system calls (root may exceed pipe-max-size)
            try:
                self.size = fcntl.fcntl(self.w, F_SETPIPE_SZ, size)
                break
            except OSError:
                pass

    def into(self, src: int, fd: int, offset: int, n: int, what: str) -> "tuple[int, bytes, Optional[OSError]]":
        """n bytes of the socket written at offset of fd. Returns the bytes written; on a write error also the
        bytes taken off the socket but not written (the caller still owes them downstream) and the error."""
        done = 0
        while done < n:
            if not self.to_files:  # this file system takes no splice writes: through a buffer
                data = os.read(src, min(n - done, CHUNK))
                if not data:
                    raise SystemExit("the upstream node closed the stream early (%s)" % what)
                put, failed = pwrite_all(fd, data, offset + done)
                done += put
                if failed is not None:
                    return done, data[put:], failed
                continue
            got = os.splice(src, self.w, min(n - done, self.size))
            if not got:
                raise SystemExit("the upstream node closed the stream early (%s)" % what)
            left = got
            while left:
                try:
                    put = os.splice(self.r, fd, left, offset_dst=offset + done)
                except OSError as exc:
                    stranded = b""
                    while len(stranded) < left:
                        stranded += os.read(self.r, left - len(stranded))
                    if exc.errno != errno.EINVAL or not self.to_files:
                        return done, stranded, exc
                    # splice(2) cannot write to every file system (since Linux 5.9 one without splice_write
                    # refuses it): write these bytes and the rest of the run through a buffer
                    self.to_files = False
                    put, failed = pwrite_all(fd, stranded, offset + done)
                    done += put
                    if failed is not None:
                        return done, stranded[put:], failed
                    break
                done += put
                left -= put
        return done, b"", None


def pwrite_all(fd: int, data: bytes, offset: int) -> "tuple[int, Optional[OSError]]":
    """Write data at offset: the bytes written, and the error that stopped it short, if any."""
    view, done = memoryview(data), 0
    try:
        while done < len(data):
            done += os.pwrite(fd, view[done:], offset + done)
    except OSError as exc:
        return done, exc
    return done, None


def pwrite_from(sock: socket.socket, buf: memoryview) -> "Callable[[int, int, int, int, str], tuple[int, bytes, Optional[OSError]]]":
    """Splicer.into without splice (Python before 3.10): the bytes go through a buffer."""

    def into(src: int, fd: int, offset: int, n: int, what: str) -> "tuple[int, bytes, Optional[OSError]]":
        data = fill(sock, buf, n, what)
        done, failed = pwrite_all(fd, data, offset)
        return done, data[done:], failed

    return into


class Worker(threading.Thread):
    """Runs `fn(item)` for each queued item on its own thread: forwarding downstream, hashing and syncing all
    release the GIL, so they overlap each other and the receive loop."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.q: "queue.Queue[Any]" = queue.Queue(maxsize=16)
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        while True:
            item = self.q.get()
            if item is None:
                return
            if self.error is not None:
                self.skipped(item)  # drained, so whoever puts is never stuck behind a worker that failed
                continue
            try:
                self.fn(item)
            except Exception as exc:  # reported by whoever owns the worker
                self.error = exc
                self.failed()

    def skipped(self, item: Any) -> None:
        """An item that came after the worker failed."""

    def failed(self) -> None:
        """The worker has just failed."""

    def put(self, item: Any) -> None:
        self.q.put(item)

    def finish(self) -> None:
        self.q.put(None)
        self.join()


class Forwarder(Worker):
    """Passes the stream on to the next node, in order: byte strings as they are, and ranges of this node's own
    copy straight from the page cache with sendfile(2) (written first, so what goes on is what this node wrote,
    and no copy of it is made in Python)."""

    def __init__(self, down: socket.socket) -> None:
        super().__init__(self.send)
        self.down = down
        self.fd = down.fileno()

    def send(self, item: Any) -> None:
        if isinstance(item, bytes):
            self.down.sendall(item)
        elif item[0] == "close":
            os.close(item[1])
        else:
            _, fd, offset, count = item
            while count:
                n = os.sendfile(self.fd, fd, offset, count)
                if not n:
                    raise OSError("%d bytes short of the file's end while forwarding" % count)
                offset += n
                count -= n

    def skipped(self, item: Any) -> None:
        if isinstance(item, tuple) and item[0] == "close":
            os.close(item[1])  # even after an error: the descriptor is the forwarder's alone

    def failed(self) -> None:
        try:  # the next node learns at once that the stream is cut, not after its timeout
            self.down.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def blob_hasher(name: str, size: int) -> Optional[Any]:
    """A hasher whose digest must equal the file's name, or None when the name is not a hash."""
    if HEX64.fullmatch(name):
        return hashlib.sha256()
    if HEX40.fullmatch(name):  # git's blob id of a small (non-LFS) file
        h = hashlib.sha1()
        h.update(b"blob %d\0" % size)
        return h
    return None


class FileSink:
    """This node's copy of one file of the stream: written at its offsets, hashed and synced behind the writes
    by a worker that reads the bytes back from the page cache (so the hash is of what was written)."""

    def __init__(self, root: str, entry: Dict[str, Any]) -> None:
        self.final = os.path.join(root, "hub", entry["path"])
        self.partial = self.final + PARTIAL
        self.size, self.start = entry["size"], entry["start"]
        self.hasher = blob_hasher(os.path.basename(self.final), self.size) if "/blobs/" in self.final else None
        self.fd: Optional[int] = None
        self.error: Optional[str] = None
        self.skip, self.unsynced, self.have = False, 0, 0
        self.follower: Optional[Worker] = None
        self.buf = bytearray(CHUNK)
        if os.path.isfile(self.final) and not os.path.islink(self.final) and os.path.getsize(self.final) == self.size:
            self.skip = True  # complete: renamed only after it was verified
            return
        have = os.path.getsize(self.partial) if os.path.isfile(self.partial) else 0
        if have > self.size:
            os.unlink(self.partial)
            have = 0
        if have < self.start:
            self.error = "%s: this node has %d bytes of it but the stream starts at %d" % (entry["path"], have,
                                                                                        self.start)
            return
        os.makedirs(os.path.dirname(self.final), exist_ok=True)
        self.have = have
        # read-write: the hasher and the forwarder read back what was written
        self.fd = os.open(self.partial, os.O_RDWR | os.O_CREAT | (0 if have else os.O_TRUNC), 0o666)
        self.follow((0, have))  # a resumed file's earlier bytes count towards its hash
        self.follower = Worker(self.follow)
        self.follower.start()

    def follow(self, span: "tuple[int, int]") -> None:
        """Hash the bytes just written and push them to disk every SYNC_EVERY: left to itself the kernel starts
        writing back only once a tenth of memory is dirty, so a big blob would hit the disk all at once in the
        final fdatasync, after the network is done, instead of while it streams."""
        assert self.fd is not None
        offset, count = span
        if self.hasher is not None:
            view = memoryview(self.buf)
            while count:
                if PREADV:
                    n = os.preadv(self.fd, [view[:min(count, CHUNK)]], offset)
                    data = view[:n]
                else:  # Python 3.6: a new bytes object per read
                    data = memoryview(os.pread(self.fd, min(count, CHUNK), offset))
                    n = len(data)
                if not n:
                    raise OSError("%s: shorter on disk than written" % self.partial)
                self.hasher.update(data)
                offset += n
                count -= n
        self.unsynced += span[1]
        if self.unsynced >= SYNC_EVERY:
            os.fdatasync(self.fd)
            self.unsynced = 0

    def abandon(self) -> None:
        """Stop writing; the partial file stays for the next run."""
        if self.follower is not None:
            self.follower.finish()
            self.follower = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def close(self) -> int:
        """Sync, check the hash, and give the file its final name. The bytes this node wrote."""
        if self.fd is None:
            return 0
        failed = None
        if self.follower is not None:
            self.follower.finish()
            failed = self.follower.error
            self.follower = None
        if failed is None:
            os.fdatasync(self.fd)
        self.abandon()
        if failed is not None:
            raise ValueError("%s: %s" % (self.final, failed))
        name = os.path.basename(self.final)
        if self.hasher is not None and self.hasher.hexdigest() != name:
            os.unlink(self.partial)  # wrong bytes: the next run starts this file over
            raise ValueError("%s: the bytes received hash to %s, not to its name"
                             % (self.final, self.hasher.hexdigest()))
        os.replace(self.partial, self.final)
        return int(self.size - self.have)


def place_link(root: str, entry: Dict[str, Any]) -> bool:
    path = os.path.join(root, "hub", entry["path"])
    target = entry["target"]
    if os.path.isabs(target) or os.path.normpath(os.path.join(os.path.dirname(entry["path"]), target)).startswith(".."):
        raise ValueError("%s: link target %s leaves the cache" % (entry["path"], target))
    if os.path.islink(path) and os.readlink(path) == target:
        return False
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".recipegen-tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, path)
    return True


def place_text(root: str, entry: Dict[str, Any]) -> bool:
    path = os.path.join(root, "hub", entry["path"])
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            if f.read().strip() == entry["text"]:
                return False
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".recipegen-tmp", "w", encoding="utf-8") as f:
        f.write(entry["text"])
    os.replace(path + ".recipegen-tmp", path)
    return True


class Progress:
    """Bytes of the stream received and of this node's copy written; a JSON line on stdout twice a second."""

    def __init__(self) -> None:
        self.got, self.wrote, self.last = 0, 0, 0.0

    def tick(self, got: int) -> None:
        self.got += got
        if time.monotonic() - self.last > 0.5:
            say(got=self.got, wrote=self.wrote)
            self.last = time.monotonic()


def receive_file(root: str, entry: Dict[str, Any], up: socket.socket, buf: memoryview,
                 splicer: Optional[Splicer], forward: Optional[Forwarder], progress: Progress) -> Optional[str]:
    """One file's bytes off the stream: the ones this node lacks written into its copy (then passed on from
    there), the others passed on as they came. The error that keeps this node's copy from being whole, if any."""
    error: Optional[str] = None
    sink: Optional[FileSink] = None
    try:
        sink = FileSink(root, entry)
        error = sink.error
    except OSError as exc:
        error = "%s: %s" % (entry["path"], exc)
    own = os.dup(sink.fd) if forward and sink and sink.fd is not None else None  # the forwarder's, closed by it
    pos, size, what = entry["start"], entry["size"], entry["path"]

    def pass_on(n: int) -> None:
        chunk = fill(up, buf, n, what)
        if forward:
            forward.put(chunk)

    while pos < size:
        # this node writes from the end of what it has; the bytes before that, or all of them when it writes
        # nothing of this file, only pass through
        writes_from = sink.have if sink is not None and sink.fd is not None and error is None else size
        n = min(CHUNK, size - pos) if pos >= writes_from else min(CHUNK, writes_from - pos)
        if pos < writes_from or sink is None or sink.fd is None:
            pass_on(n)
        else:
            write = splicer.into if splicer is not None else pwrite_from(up, buf)
            wrote, stranded, failed = write(up.fileno(), sink.fd, pos, n, what)
            if wrote and sink.follower is not None:
                sink.follower.put((pos, wrote))
            if forward and wrote:
                forward.put(("file", own, pos, wrote))
            if forward and stranded:
                forward.put(stranded)
            if n - wrote - len(stranded):
                pass_on(n - wrote - len(stranded))
            if failed is not None:
                error = "%s: %s" % (what, failed.strerror or failed)
                sink.abandon()  # the partial keeps what was written: the next run resumes it
        pos += n
        progress.tick(n)
    if forward and own is not None:
        forward.put(("close", own))
    if sink is None or sink.fd is None:
        return error
    try:
        progress.wrote += sink.close()
    except (OSError, ValueError) as exc:
        return str(exc)
    return None


def listen_once(bind: str, port: str) -> socket.socket:
    """The one connection from upstream, on BIND:PORT."""
    server = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind((bind, int(port)))
    except OSError as exc:
        raise SystemExit("cannot listen on %s:%s: %s" % (bind, port, exc.strerror or exc))
    server.listen(1)
    wait = float(os.environ.get("RECIPEGEN_ACCEPT_TIMEOUT", "300"))
    server.settimeout(wait)
    say(listening=True)
    try:
        up, _ = server.accept()
    except socket.timeout:
        raise SystemExit("no stream arrived on %s:%s within %.0fs" % (bind, port, wait))
    server.close()
    up.settimeout(STALL)
    return up


def recv(root: str, bind: str, port: str, next_host: Optional[str] = None,
         next_port: Optional[str] = None) -> None:
    up = listen_once(bind, port)
    blocking(up, STALL)
    raw = recv_exact(up, 8)
    head = recv_exact(up, struct.unpack(">Q", raw)[0])
    plan = json.loads(head)
    forward: Optional[Forwarder] = None
    down: Optional[socket.socket] = None
    if next_host and next_port:
        down = connect(next_host, int(next_port))
        blocking(down, STALL)
        down.sendall(raw + head)
        forward = Forwarder(down)
        forward.start()
    # the clock starts once the chain is joined: the wait for later nodes' helpers to start is not the copy's
    began = time.monotonic()
    errors: List[str] = []
    progress = Progress()
    buf = memoryview(bytearray(CHUNK))
    splicer = Splicer() if SPLICE else None
    for entry in plan["entries"]:
        if entry["kind"] == "file":
            error = receive_file(root, entry, up, buf, splicer, forward, progress)
            if error:
                errors.append(error)
    wrote, got = progress.wrote, progress.got
    changed = 0
    if not errors:  # the links only once every blob is whole; the refs last
        for kind in ("link", "ref"):
            for entry in plan["entries"]:
                if entry["kind"] == kind:
                    try:
                        changed += (place_link if kind == "link" else place_text)(root, entry)
                    except (OSError, ValueError) as exc:
                        errors.append(str(exc))
    forward_error = None
    if forward and down:
        forward.finish()
        if forward.error is None:
            down.shutdown(socket.SHUT_WR)
            try:
                down.recv(1)
            except OSError as exc:
                forward.error = exc
        forward_error = forward.error and str(forward.error)
        down.close()
    up.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    say(got=got, wrote=wrote, changed=changed, done=True, errors=errors, forward_error=forward_error,
        seconds=round(time.monotonic() - began, 3), cpu=round(usage.ru_utime + usage.ru_stime, 3))
    if errors:
        raise SystemExit(1)


def main(argv: List[str]) -> None:
    try:
        run_mode(argv[0], argv[1:])
    except OSError as exc:  # one line, not a traceback: it is what the person running recipegen reads
        if exc.errno in (errno.EAGAIN, errno.ETIMEDOUT) or isinstance(exc, socket.timeout):
            raise SystemExit("%s: the stream stalled: nothing moved for %ds (%s)" % (argv[0], STALL, exc))
        raise SystemExit("%s: %s" % (argv[0], exc))


def run_mode(mode: str, args: List[str]) -> None:
    if mode == "scan":
        scan(args[0], args[1:])
    elif mode == "send":
        send(*args)
    elif mode == "recv":
        recv(*args)
    elif mode == "image-ping":
        ping(*args)
        say(ok=True)
    elif mode == "image-send":
        image_send(*args)
    elif mode == "image-recv":
        image_recv(*args)
    else:
        raise SystemExit("unknown mode %s" % mode)


# --- image-send / image-recv (`recipegen images`, node to node) --------------------------------------------
#
# The image goes from the source engine to each target engine without passing through the deploying machine:
# the helpers talk to their node's engine API over its unix socket (bind-mounted in) rather than through a
# docker CLI, which engine images do not carry. The stream: header({"image": ...}), then frames of a 4-byte
# big-endian length and that many bytes of the `docker save` tar, a zero-length frame, then a trailer
# header({"bytes": N, "error": ...}). The frames and the trailer are there because a sender that dies closes its
# socket just as one that finished does: without them a cut stream would reach `docker load` as a whole one.

import http.client  # noqa: E402 - this section's own; the sections above do not need it
from urllib.parse import quote  # noqa: E402

IMAGE_FRAME = struct.Struct(">I")
IMAGE_CHUNK = 1 << 20  # the engine writes its save stream in small chunks; 1 MiB frames keep the loops short
LOAD_TIMEOUT = 3600.0  # the engine answers a load once it has registered every layer: minutes for big images


class EngineAPI(http.client.HTTPConnection):
    """The Docker Engine API over its unix socket (http.client speaks HTTP over any connected socket, and reads
    the engine's chunked answers itself)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
        except OSError as exc:
            sock.close()
            raise SystemExit("cannot reach the engine at %s: %s" % (self.unix_path, exc))
        self.sock = sock


def engine_messages(body: bytes) -> List[Dict[str, Any]]:
    """The JSON objects of an engine answer: one object, or a stream of them (a load's progress), with or
    without newlines between them. Text that is not JSON becomes {"error": text}."""
    text = body.decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    found: List[Dict[str, Any]] = []
    pos = 0
    while pos < len(text):
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            break
        try:
            item, pos = decoder.raw_decode(text, pos)
        except ValueError:
            found.append({"error": text[pos:].strip()[:500]})
            break
        if isinstance(item, dict):
            found.append(item)
    return found


def load_result(status: int, body: bytes) -> Dict[str, Any]:
    """What a POST /images/load answered: the images it loaded and the error, if any. The engine can answer 200
    and still fail (the error is then one of the streamed messages), so both count."""
    loaded: List[str] = []
    errors: List[str] = []
    for item in engine_messages(body):
        detail = item.get("errorDetail")
        if item.get("error") or (isinstance(detail, dict) and detail.get("message")):
            errors.append(str(item.get("error") or detail["message"]))  # type: ignore[index]
        elif status != 200 and item.get("message"):
            errors.append(str(item["message"]))
        stream = str(item.get("stream", "")).strip()
        if stream.startswith("Loaded image"):
            loaded.append(stream.split(":", 1)[1].strip())
    if status != 200 and not errors:
        errors.append("the engine answered %d" % status)
    return {"loaded": loaded, "error": "; ".join(errors) or None}


class ImageLoad:
    """One POST /images/load fed as the bytes arrive (Transfer-Encoding: chunked: the size is not known ahead)."""

    def __init__(self, path: str) -> None:
        self.api = EngineAPI(path, LOAD_TIMEOUT)
        self.api.putrequest("POST", "/images/load?quiet=1")
        self.api.putheader("Content-Type", "application/x-tar")
        self.api.putheader("Transfer-Encoding", "chunked")
        self.api.endheaders()

    def write(self, chunk: bytes) -> None:
        # three sends, not one joined copy of the chunk: a unix socket has no Nagle delay to avoid
        self.api.send(b"%x\r\n" % len(chunk))
        self.api.send(chunk)
        self.api.send(b"\r\n")

    def finish(self, write_error: Optional[BaseException]) -> Dict[str, Any]:
        """The engine's answer. After a failed write the engine may still have said why (it stopped reading
        because the tar was bad): its answer is the better message."""
        try:
            if write_error is None:
                self.api.send(b"0\r\n\r\n")
            answer = self.api.getresponse()
            return load_result(answer.status, answer.read())
        except (OSError, http.client.HTTPException) as exc:
            return {"loaded": [], "error": "loading into the engine: %s" % (write_error or exc)}
        finally:
            self.api.close()

    def abort(self) -> None:
        """Close without the final chunk: the engine sees a cut body and loads nothing of it."""
        self.api.close()


def ping(sock_path: str) -> None:
    api = EngineAPI(sock_path, 30)
    try:
        api.request("GET", "/_ping")
        answer = api.getresponse()
        answer.read()
        status = answer.status
    except (OSError, http.client.HTTPException) as exc:
        raise SystemExit("the engine at %s did not answer: %s" % (sock_path, exc))
    finally:
        api.close()
    if status != 200:
        raise SystemExit("the engine at %s answered /_ping with %d" % (sock_path, status))


def image_send(sock_path: str, image: str, host: str, port: str) -> None:
    api = EngineAPI(sock_path, STALL)
    try:
        api.request("GET", "/images/get?names=" + quote(image, safe=""))
        answer = api.getresponse()
    except (OSError, http.client.HTTPException) as exc:
        raise SystemExit("the engine at %s did not answer: %s" % (sock_path, exc))
    if answer.status != 200:
        messages = engine_messages(answer.read())
        raise SystemExit("the engine cannot save %s: %s" % (
            image, "; ".join(str(m.get("message") or m.get("error")) for m in messages) or answer.status))
    sock = connect(host, int(port))
    sock.sendall(header({"image": image}))
    sender = Worker(sock.sendall)  # reading the engine and sending overlap
    sender.start()
    sent, error, last = 0, None, 0.0
    try:
        while True:
            chunk = answer.read(IMAGE_CHUNK)
            if not chunk or sender.error is not None:  # the first receiver is gone: no use reading the rest
                break
            sender.put(IMAGE_FRAME.pack(len(chunk)) + chunk)
            sent += len(chunk)
            if time.monotonic() - last > 0.5:
                say(sent=sent)
                last = time.monotonic()
    except (OSError, http.client.HTTPException) as exc:
        error = "reading %s from the engine: %s" % (image, exc)
    sender.put(IMAGE_FRAME.pack(0) + header({"bytes": sent, "error": error}))
    sender.finish()
    if sender.error is not None:
        raise SystemExit("sending to %s:%s: %s" % (host, port, sender.error))
    sock.shutdown(socket.SHUT_WR)
    sock.recv(1)  # the first receiver closes once it has every byte
    sock.close()
    say(sent=sent, done=True, error=error)
    if error:
        raise SystemExit(1)


def image_recv(sock_path: str, bind: str, port: str, next_host: Optional[str] = None,
               next_port: Optional[str] = None) -> None:
    ping(sock_path)  # an engine this helper cannot reach fails it now, not once the stream is under way
    up = listen_once(bind, port)
    began = time.monotonic()
    raw = recv_exact(up, 8)
    head = raw + recv_exact(up, struct.unpack(">Q", raw)[0])
    down: Optional[socket.socket] = None
    forward: Optional[Worker] = None
    if next_host and next_port:
        down = connect(next_host, int(next_port))
        down.sendall(head)
        forward = Worker(down.sendall)
        forward.start()
    load = ImageLoad(sock_path)
    loader = Worker(load.write)  # the engine takes this node's copy while the next node gets its own
    loader.start()
    progress = Progress()
    buf = memoryview(bytearray(IMAGE_CHUNK))
    while True:
        size = IMAGE_FRAME.unpack(recv_exact(up, IMAGE_FRAME.size))[0]
        if not size:
            break
        chunk = fill(up, buf, size, "image") if size <= IMAGE_CHUNK else recv_exact(up, size)
        if forward:
            forward.put(IMAGE_FRAME.pack(size) + chunk)
        loader.put(chunk)
        progress.tick(size)
    raw = recv_exact(up, 8)
    tail = raw + recv_exact(up, struct.unpack(">Q", raw)[0])
    up.close()  # every byte is here: the sender may go
    trailer = json.loads(tail[8:])
    forward_error = None
    if forward and down:
        forward.put(IMAGE_FRAME.pack(0) + tail)
        forward.finish()
        if forward.error is None:
            down.shutdown(socket.SHUT_WR)  # the next node's load runs while this one's finishes
        else:
            forward_error = str(forward.error)
    loader.finish()
    error = trailer.get("error")
    if error is None and trailer.get("bytes") != progress.got:
        error = "the stream carried %d bytes, the source sent %s" % (progress.got, trailer.get("bytes"))
    if error is None:
        result = load.finish(loader.error)
    else:
        load.abort()
        result = {"loaded": [], "error": "the source failed: %s" % error}
    if forward and down:
        if forward_error is None:
            try:
                down.recv(1)  # the next node closes once it has every byte
            except OSError as exc:
                forward_error = str(exc)
        down.close()
    say(got=progress.got, done=True, loaded=result["loaded"], error=result["error"], forward_error=forward_error,
        seconds=round(time.monotonic() - began, 3))
    if result["error"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
