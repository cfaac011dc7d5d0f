"""The group watch: PID 1 of every rank's container, so that a recipe's ranks live and restart as one group, as a
Kubernetes LeaderWorkerSet group does (RecreateGroupOnPodRestart), with Docker's own restart machinery and no operator.

Each rank's watch meets the head's on the cluster's `group_port` before its engine starts (the head says "go" once
every rank of the same group is there), keeps that connection while the engines run, and, when any rank's engine
exits, its node stops (SIGTERM) or goes silent, or the serving head stops answering /health, stops its engine and
exits non-zero: Docker's `restart: on-failure` starts every container again (a rebooted node's too: 143) and the
group meets afresh. It stops for good, exiting 0 (which `on-failure` does not restart), after `limit` restarts within
`window` seconds, or after `limit` restarts in a row with the group never serving in between (a boot that always
fails, a node that never comes back, however slowly each attempt fails). The record is kept in the container's own
files (`--state`). It never touches a peer: no Docker socket, no SSH. docs/self-healing.md says why it is built so.
Standard library only, Python 3.8+ (it runs in the engine's image), shipped as `python3 -c` (no host path, no config).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import select
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any, Deque, Dict, List, Optional, Tuple

PING, SILENT = 2.0, 20.0  # seconds between pings; a peer silent for SILENT seconds is lost
GATHER = 600.0  # how long a rank waits for its group before the wait itself counts as a failed start
HALT_TELL = 60.0  # how long a halted head stays to tell the ranks that come why
HEALTH_EVERY, HEALTH_FAILS = 15.0, 4  # the head's /health: asked this often, lost after this many misses in a row
# Exit statuses, each non-zero one restarted by Docker's on-failure: this rank's own end (1), this rank stopping
# because another rank of its group ended (FOLLOWED: `up` names the rank that did not), its node stopping (143).
FAILED, FOLLOWED = 1, 2


def say(text: str) -> None:
    print("recipegen-group: " + text, file=sys.stderr, flush=True)


class Options:
    def __init__(self, argv: List[str]) -> None:
        split = argv.index("--")
        pairs, self.command = dict(zip(argv[:split:2], argv[1:split:2])), argv[split + 1:]
        self.rank, self.ranks = int(pairs["--rank"]), int(pairs["--ranks"])
        self.node, self.head, self.port = pairs["--node"], pairs["--head"], int(pairs["--port"])
        self.limit, self.window, self.grace = int(pairs["--limit"]), float(pairs["--window"]), float(pairs["--grace"])
        self.health, self.state, self.group = pairs.get("--health", ""), pairs["--state"], pairs["--group"]
        self.me = "rank %d (%s)" % (self.rank, self.node)


class State:
    """The restarts this container saw, kept in its own files (a restarted container keeps them)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.data: Dict[str, Any] = {"restarts": [], "halted": None}
        with contextlib.suppress(OSError, ValueError):  # none yet (a new container), or damaged: start afresh
            with open(path) as f:
                found = json.load(f)
            if isinstance(found, dict) and isinstance(found.get("restarts"), list):
                self.data.update(found)

    def save(self) -> None:
        with open(self.path + ".new", "w") as f:
            json.dump(self.data, f)
        os.replace(self.path + ".new", self.path)  # whole or not at all, even under kill -9

    def restart(self, reason: str, rank: int, node: str, line: str, served: bool, opts: Options) -> None:
        entry = {"time": time.time(), "reason": reason, "rank": rank, "node": node, "line": line, "served": served}
        self.data["restarts"], self.data["bound"] = (self.data["restarts"] + [entry])[-100:], [opts.limit, opts.window]
        self.save()

    def halt_reason(self, opts: Options) -> Optional[str]:
        """Why the group must stop for good now, or None."""
        restarts = [r for r in self.data["restarts"] if isinstance(r, dict)]
        recent = [r for r in restarts if r.get("time", 0) >= time.time() - opts.window]
        streak = 0
        for entry in reversed(restarts):
            if entry.get("served"):
                break
            streak += 1
        if len(recent) >= opts.limit:
            return "%d restarts within %gs; the last: %s" % (len(recent), opts.window, recent[-1].get("reason"))
        if streak >= opts.limit:
            return "%d restarts in a row without serving; the last: %s" % (streak, restarts[-1].get("reason"))
        return None

    def halt(self, reason: str) -> None:
        self.data["halted"] = {"time": time.time(), "reason": reason}
        self.save()

    def running(self, opts: Options, now: bool) -> None:
        """Mark the engine running (now) or not; a mark found at start is an end nobody recorded: a kill -9."""
        if not now and self.data.pop("running", None):
            self.restart("%s: its container ended unrecorded (SIGKILL, or the OOM killer)" % opts.me, opts.rank,
                         opts.node, "", bool(self.data.pop("served_once", False)), opts)
        self.data["running"] = now
        self.save()


class Peer:
    """One TCP connection to another rank's watch: newline-delimited JSON objects both ways."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf, self.heard, self.rank, self.node = sock, b"", time.monotonic(), -1, "?"

    def send(self, **message: Any) -> None:
        with contextlib.suppress(OSError):  # gone: its reader finds out
            self.sock.sendall((json.dumps(message) + "\n").encode())

    def read(self) -> Optional[List[Dict[str, Any]]]:
        """Messages now readable; None when the peer closed, or said what no watch says."""
        try:
            data = self.sock.recv(65536)
        except OSError:
            data = b""
        if not data:  # closed, or reset
            return None
        self.heard = time.monotonic()
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        try:
            messages = [json.loads(line) for line in lines if line.strip()]
        except ValueError:
            return None
        return messages if all(isinstance(m, dict) for m in messages) else None


class Engine:
    """The rank's own command as a child in a session of its own; its output passed on, its last lines kept."""

    def __init__(self, command: List[str]) -> None:
        self.tail: Deque[str] = collections.deque(maxlen=30)
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self.status: Optional[int] = None
        for pipe, out in ((self.proc.stdout, sys.stdout), (self.proc.stderr, sys.stderr)):
            threading.Thread(target=self._pass, args=(pipe, out), daemon=True).start()

    def _pass(self, pipe: Any, out: Any) -> None:
        for raw in iter(pipe.readline, b""):
            out.buffer.write(raw)
            self.tail.append(raw.decode("utf-8", "replace").rstrip())
            out.flush()

    def exited(self) -> bool:
        if self.status is None and self.proc.poll() is not None:
            self.status = self.proc.returncode
        return self.status is not None

    def last_line(self) -> str:
        lines = [line for line in self.tail if line.strip()]
        errors = [line for line in lines if "Error" in line or "error" in line or "rror:" in line]
        return (errors or lines or [""])[-1][-300:]

    def stop(self, grace: float) -> None:
        """SIGTERM to the engine's whole session (its children too, when its main process is gone already), SIGKILL
        to what is left after grace seconds."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 0.0)):
            with contextlib.suppress(OSError):  # nothing left in the session
                os.killpg(self.proc.pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and not self.exited():
                time.sleep(0.1)


class Watch:
    def __init__(self, opts: Options) -> None:
        self.opts, self.state = opts, State(opts.state)
        self.peers: List[Peer] = []
        self.listener: Optional[socket.socket] = None  # the head's, from its first meeting on
        self.engine: Optional[Engine] = None
        self.stopping, self.served = False, False  # served: this group answered once since it met
        signal.signal(signal.SIGTERM, self._term)
        signal.signal(signal.SIGINT, self._term)

    def _term(self, signum: int, frame: Any) -> None:  # docker stop, or the node shutting down
        self.stopping = True

    def run(self) -> int:
        try:
            return self._run()
        except Exception as err:  # a port taken, a broken network ...: recorded, so that the bound still holds
            return self.fail("%s: the group watch failed: %s: %s" % (self.opts.me, type(err).__name__, err), 1)

    def _run(self) -> int:
        self.state.running(self.opts, False)
        halted = self.state.data.get("halted")
        reason = str(halted.get("reason")) if isinstance(halted, dict) else self.state.halt_reason(self.opts)
        if reason:
            self.state.halt(reason)
            say("stopped for good at its restart bound (%s); `recipegen down` then `up` starts afresh" % reason)
            return self.tell_halt(reason) if self.opts.rank == 0 else 0
        verdict = self.gather()
        if verdict is not None:
            return verdict
        say("%s: the group of %d is here; starting the engine" % (self.opts.me, self.opts.ranks))
        self.state.running(self.opts, True)
        self.engine = Engine(self.opts.command)
        return self.serve()

    def gather(self) -> Optional[int]:
        """Meet the group; None to start the engine, else the exit status."""
        deadline = time.monotonic() + GATHER
        if self.opts.ranks == 1:
            return None  # a group of one: nothing to meet, and no port to take on the node
        if self.opts.rank == 0:
            listener = self.listener = self.listen()
            while len({p.rank for p in self.peers}) < self.opts.ranks - 1:
                if self.stopping:
                    return self.fail("%s stopped while its group met" % self.opts.me, 143)
                if time.monotonic() > deadline:
                    missing = sorted(set(range(1, self.opts.ranks)) - {p.rank for p in self.peers})
                    return self.fail("rank(s) %s did not join within %gs" % (missing, GATHER), 1)
                self.accept(listener, 1.0)
                ready, _, _ = select.select([p.sock for p in self.peers], [], [], 0)
                self.peers = [p for p in self.peers if p.sock not in ready or p.read() is not None]  # gone: drop
            for peer in self.peers:
                peer.send(go=True)
            return None
        while not self.stopping:
            if time.monotonic() > deadline:
                return self.fail("the head (%s:%d) did not gather the group within %gs"
                                 % (self.opts.head, self.opts.port, GATHER), 1)
            try:
                sock = socket.create_connection((self.opts.head, self.opts.port), timeout=2)
            except OSError:
                time.sleep(1)
                continue
            peer = Peer(sock)
            peer.rank, peer.node = 0, "the head"
            peer.send(hello=self.opts.rank, node=self.opts.node, group=self.opts.group)
            while not self.stopping and time.monotonic() < deadline:
                ready, _, _ = select.select([sock], [], [], 1.0)
                messages = peer.read() if ready else []
                if messages is None:
                    break  # the head went away while the group met: try again
                for message in messages:
                    if "halt" in message:
                        self.state.halt(str(message["halt"]))
                        say("stopping for good: the head says: %s" % message["halt"])
                        return 0
                    if message.get("go"):
                        self.peers = [peer]
                        return None
            sock.close()
        return self.fail("%s stopped while its group met" % self.opts.me, 143)

    def listen(self) -> socket.socket:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("0.0.0.0", self.opts.port))
        listener.listen(64)
        return listener

    def accept(self, listener: socket.socket, timeout: float) -> Optional[Peer]:
        """Take one connection and its hello (within timeout), from a rank of this very group (recipe and inputs):
        a leftover container of another shape of it is turned away. It replaces an older one of the same rank."""
        ready, _, _ = select.select([listener], [], [], timeout)
        if not ready:
            return None
        sock, _ = listener.accept()
        sock.settimeout(5)
        peer = Peer(sock)
        first = (peer.read() or [{}])[0]
        sock.settimeout(None)
        rank = first.get("hello")
        if not isinstance(rank, int) or not 0 < rank < self.opts.ranks or first.get("group") != self.opts.group:
            sock.close()
            return None
        peer.rank, peer.node = rank, str(first.get("node", "?"))
        self.peers = [p for p in self.peers if p.rank != peer.rank] + [peer]
        return peer

    def tell_halt(self, reason: str) -> int:
        """A halted head answers each rank that comes within HALT_TELL seconds with why, then exits 0."""
        listener = None
        if self.opts.ranks > 1:
            with contextlib.suppress(OSError):  # the port taken: the workers stop at their own bound instead
                listener = self.listen()
        deadline = time.monotonic() + HALT_TELL
        while listener is not None and time.monotonic() < deadline and not self.stopping:
            for peer in filter(None, [self.accept(listener, 1.0)]):
                peer.send(halt=reason)
        return 0

    def serve(self) -> int:
        assert self.engine is not None
        listener, last_ping = self.listener, 0.0
        health = Health(self.opts.health) if self.opts.health else None
        while True:
            if health is not None and health.answered and not self.served:
                self.served = self.state.data["served_once"] = True
                self.state.save()
            if self.stopping:
                return self.fail("%s stopped (SIGTERM: docker stop, or its node shutting down)" % self.opts.me, 143)
            if self.engine.exited():  # a peer's failure often ends this engine too: the peer's word is the cause
                cause = self.message_within(1.0)
                if cause is not None:
                    return self.fail(str(cause[1]["failed"]), FOLLOWED, str(cause[1].get("line", "")), cause[0])
                return self.fail("%s: the engine exited with status %s" % (self.opts.me, self.engine.status), 1,
                                 self.engine.last_line())
            if health is not None and health.lost():
                return self.fail("%s: the engine stopped answering %s (%s)" % (self.opts.me, health.url, health.error),
                                 1, self.engine.last_line())
            if time.monotonic() - last_ping > PING:
                for peer in self.peers:
                    peer.send(ping=True, serving=self.served)
                last_ping = time.monotonic()
            socks: List[Any] = [p.sock for p in self.peers] + ([listener] if listener else [])
            ready, _, _ = select.select(socks, [], [], 0.5)
            newcomer = self.accept(listener, 0) if listener is not None and listener in ready else None
            if newcomer is not None:  # a rank met again while the group ran: it restarted on its own
                return self.fail("rank %d (%s) restarted" % (newcomer.rank, newcomer.node), FOLLOWED)
            for peer in self.peers:
                messages = peer.read() if peer.sock in ready else []
                who = "the head" if self.opts.rank else "rank %d (%s)" % (peer.rank, peer.node)
                if messages is None or time.monotonic() - peer.heard > SILENT:
                    return self.fail("lost %s (its watch went silent)" % who, FOLLOWED)
                for message in messages:
                    if message.get("serving") and not self.served:  # the head served: this group works
                        self.served = self.state.data["served_once"] = True
                        self.state.save()
                    if "failed" in message:
                        return self.fail(str(message["failed"]), FOLLOWED, str(message.get("line", "")), peer)

    def message_within(self, seconds: float) -> Optional[Tuple[Peer, Dict[str, Any]]]:
        """A peer's `failed` message arriving within seconds, with its peer."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([p.sock for p in self.peers], [], [], max(0.0, deadline - time.monotonic()))
            for peer in self.peers:
                for message in (peer.read() or []) if peer.sock in ready else []:
                    if "failed" in message:
                        return peer, message
            if not ready:
                return None
        return None

    def fail(self, reason: str, status: int, line: str = "", origin: Optional[Peer] = None) -> int:
        """Tell the group why, stop the engine, record the restart, and exit with status."""
        rank, node = (origin.rank, origin.node) if origin else (self.opts.rank, self.opts.node)
        for peer in self.peers:
            if peer is not origin:
                peer.send(failed=reason, line=line)
        if self.engine is not None:
            self.engine.stop(self.opts.grace)
        self.state.data["running"] = False
        self.state.data.pop("served_once", None)
        self.state.restart(reason, rank, node, line, self.served, self.opts)
        say("group restart: %s%s" % (reason, (": " + line) if line else ""))
        return status


class Health:
    """The head's /health, asked on a thread: lost after HEALTH_FAILS misses in a row once it has answered."""

    def __init__(self, url: str) -> None:
        self.url, self.answered, self.misses, self.error = url, False, 0, ""
        threading.Thread(target=self._ask, daemon=True).start()

    def _ask(self) -> None:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # its own loopback: no name to check
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(
            context=context))
        while True:
            try:
                opener.open(self.url, timeout=10).close()
                self.answered, self.misses = True, 0
            except Exception as err:  # refused, HTTP 5xx, timeout: a miss
                self.misses, self.error = self.misses + 1, str(err)[:200]
            time.sleep(HEALTH_EVERY)

    def lost(self) -> bool:
        return self.answered and self.misses >= HEALTH_FAILS


if __name__ == "__main__":
    sys.exit(Watch(Options(sys.argv[1:])).run())
