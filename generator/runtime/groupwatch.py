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

The head's watch also ends the group when its engine is wedged: alive and answering /health, yet producing no token
(a frozen engine core keeps /health at 200 and /metrics at its last values). Whenever the engine's token counters
have not moved since the last look, it sends a one-token completion with a deadline (`--wedge` seconds), and a
second one at once when the first gets no answer: two misses are a wedge.

Only the group's own ranks are heard: the head listens on its fabric address alone, takes connections only from
the other ranks' addresses (`--peers`), and, when the deploying shell gave RECIPEGEN_GROUP_KEY (recipegen up does),
each side proves it holds the key (HMAC over a nonce) before a word of the group counts. A connection that says
nothing, too much, or not JSON is closed without a word; none of them holds up the group.

Before a group meets again after a failed boot, it waits (bounded) for the node's available memory to come back
near its level before the first boot: an engine's memory is not always free the moment its process ends. As PID 1 it
reaps the zombies of orphaned helpers. Standard library only, Python 3.8+ (it runs in the engine's image), shipped as
a config file (no host path, no socket of Docker's).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import hmac
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
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Deque, Dict, List, Optional, Set, Tuple

PING, SILENT = 2.0, 20.0  # seconds between pings; a peer silent for SILENT seconds is lost
GATHER = 600.0  # how long a rank waits for its group before the wait itself counts as a failed start
HALT_TELL = 60.0  # how long a halted head stays to tell the ranks that come why
HEALTH_EVERY, HEALTH_TIMEOUT, HEALTH_FAILS = 5.0, 10.0, 3  # /health: asked this often, lost after 3 misses in a row
NOT_YET_EVERY = 300.0  # while /health has never answered, the watch says so this often (with the error)
BOOT_EVERY = 1.0  # /health until it first answers: asked every second (a loading engine refuses at once, which costs
# nothing), so that the watch sees a ready engine within a second, not up to 5 s later; the same 10 s timeout, since
# a slow first answer (SGLang's /health runs a generation) must not leave the group unwatched
WEDGE_EVERY = 5.0  # seconds between looks at the engine's token counters (a probe when they stand still): with
# the look that still sees the last tokens before a freeze, a wedge is decided within 2 x 5 s + 2 x `--wedge`
MEMORY_WAIT, MEMORY_SLACK = 120.0, 0.05  # after a failed boot: wait this long at most for memory to come back
MEMORY_PLATEAU = 20.0  # ... and no longer than this once it stops rising (another workload may hold the rest)
HELLO_WAIT, PENDING_MAX, LINE_MAX = 5.0, 32, 4096  # a newcomer's hello: its time, how many wait, its bytes
KEY_ENV = "RECIPEGEN_GROUP_KEY"  # the group's key, given by the deploying shell (never in a generated file)
KEY_MISMATCH = {  # whether the head holds a key -> why this rank, which holds the other, cannot join
    True: "the head holds a group key and this rank holds none: deploy every rank the same way (recipegen up gives "
          "the key; a plain docker compose up does not)",
    False: "the head holds no group key and this rank holds one: deploy every rank the same way (recipegen up gives "
           "the key; a plain docker compose up does not)"}
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
        self.peers = [a for a in pairs.get("--peers", "").split(",") if a]  # every rank's address, rank order
        self.address = self.peers[self.rank] if len(self.peers) > self.rank else ""
        self.model, self.wedge = pairs.get("--model", ""), float(pairs.get("--wedge", "0"))
        self.boot = float(pairs.get("--boot", "0"))  # /health must first answer within this (0: no bound)
        self.key = os.environ.pop(KEY_ENV, "").encode()  # the engine does not inherit it
        self.me = "rank %d (%s)" % (self.rank, self.node)

    def mac(self, *words: object) -> str:
        """The proof that a message comes from a holder of the group's key ("" without a key)."""
        if not self.key:
            return ""
        text = "\0".join(str(w) for w in (self.group, *words)).encode()
        return hmac.new(self.key, text, hashlib.sha256).hexdigest()

    def proven(self, mac: object, *words: object) -> bool:
        return not self.key or (isinstance(mac, str) and hmac.compare_digest(mac, self.mac(*words)))


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

    def restart(self, reason: str, rank: int, node: str, line: str, served: bool, opts: Options,
                cause: str = "exited", at: Optional[float] = None) -> None:
        entry = {"time": at if at is not None else time.time(), "reason": reason, "rank": rank, "node": node,
                 "line": line, "served": served, "cause": cause}
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
                         opts.node, "", bool(self.data.pop("served_once", False)), opts, "killed")
        self.data["running"] = now
        self.save()


class Peer:
    """One TCP connection to another rank's watch: newline-delimited JSON objects both ways."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf, self.heard, self.rank, self.node = sock, b"", time.monotonic(), -1, "?"
        self.nonce = ""  # the one it sent when it said hello: the head's answers are proven over it

    def send(self, **message: Any) -> bool:
        """Whether it went out: a peer gone is its reader's to find out."""
        try:
            self.sock.sendall((json.dumps(message) + "\n").encode())
        except OSError:
            return False
        return True

    def read(self, limit: int = 65536) -> Optional[List[Dict[str, Any]]]:
        """Messages now readable; None when the peer closed, or said what no watch says (a line over limit bytes,
        or one that is not a JSON object)."""
        try:
            data = self.sock.recv(65536)
        except OSError:
            data = b""
        if not data:  # closed, or reset
            return None
        self.heard = time.monotonic()
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        if len(self.buf) > limit or any(len(line) > limit for line in lines):
            return None
        try:
            messages = [json.loads(line) for line in lines if line.strip()]
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
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


class Newcomer:
    """A connection to the head's port that has not yet proven itself a rank of this group: it gets a nonce, and
    HELLO_WAIT seconds to answer with a hello of at most LINE_MAX bytes."""

    def __init__(self, sock: socket.socket, keyed: bool) -> None:
        self.peer, self.nonce = Peer(sock), os.urandom(16).hex()
        self.deadline = time.monotonic() + HELLO_WAIT
        sock.setblocking(False)
        self.peer.send(nonce=self.nonce, keyed=keyed)


class Watch:
    def __init__(self, opts: Options) -> None:
        self.opts, self.state = opts, State(opts.state)
        self.peers: List[Peer] = []
        self.newcomers: List[Newcomer] = []
        self.listener: Optional[socket.socket] = None  # the head's, from its first meeting on
        self.engine: Optional[Engine] = None
        self.stopping, self.served = False, False  # served: this group answered once since it met
        self.reaped, self.said_away = 0.0, -1e9
        signal.signal(signal.SIGTERM, self._term)
        signal.signal(signal.SIGINT, self._term)

    def _term(self, signum: int, frame: Any) -> None:  # docker stop, or the node shutting down
        self.stopping = True

    def run(self) -> int:
        try:
            return self._run()
        except Exception as err:  # a port taken, a broken network ...: recorded, so that the bound still holds
            return self.fail("%s: the group watch failed: %s: %s" % (self.opts.me, type(err).__name__, err), 1,
                             cause="watch")

    def _run(self) -> int:
        self.state.running(self.opts, False)
        halted = self.state.data.get("halted")
        reason = str(halted.get("reason")) if isinstance(halted, dict) else self.state.halt_reason(self.opts)
        if reason:
            self.state.halt(reason)
            say("stopped for good at its restart bound (%s); `recipegen down` then `up` starts afresh" % reason)
            return self.tell_halt(reason) if self.opts.rank == 0 else 0
        if self.opts.ranks > 1 and not self.opts.key:
            say("%s: no %s given (recipegen up gives one): only the ranks' addresses are checked" % (
                self.opts.me, KEY_ENV))
        self.wait_for_memory()
        verdict = self.gather()
        if verdict is not None:
            return verdict
        say("%s: the group of %d is here; starting the engine" % (self.opts.me, self.opts.ranks))
        self.state.running(self.opts, True)
        self.engine = Engine(self.opts.command)
        return self.serve()

    def wait_for_memory(self) -> None:
        """Before the group meets again after a failed boot: wait, MEMORY_WAIT seconds at most, for the node's
        available memory to come back within MEMORY_SLACK of its level before the first boot (GB10's memory is
        unified: an engine's is not always free the moment its process ends), and no longer once it has stopped
        rising for MEMORY_PLATEAU seconds (what another recipe took since is not ours to wait for). The first start
        records the level."""
        baseline, now = self.state.data.get("memory_before"), available_memory()
        if now is None:
            return
        if not isinstance(baseline, (int, float)) or not self.state.data["restarts"]:
            self.state.data["memory_before"] = max(now, baseline if isinstance(baseline, (int, float)) else 0)
            self.state.save()
            return
        want, start = baseline * (1 - MEMORY_SLACK), time.monotonic()
        if now < want:
            say("%s: waiting up to %gs for memory: %.1f of %.1f GiB available before the first boot" % (
                self.opts.me, MEMORY_WAIT, now / 2**30, baseline / 2**30))
        best, rose = now, time.monotonic()  # the level stops rising: what is left is not this recipe's to wait for
        while now is not None and now < want and time.monotonic() - start < MEMORY_WAIT and not self.stopping \
                and time.monotonic() - rose < MEMORY_PLATEAU:
            time.sleep(2)
            now = available_memory()
            if now is not None and now > best + (256 << 20):
                best, rose = now, time.monotonic()
        waited = time.monotonic() - start
        self.state.data["memory_wait"] = {"time": time.time(), "waited": round(waited, 1), "available": now,
                                          "before": baseline, "back": now is not None and now >= want}
        self.state.save()
        if waited >= 2:
            say("%s: memory %s after %.0fs (%.1f GiB available)" % (
                self.opts.me, "back" if now is not None and now >= want else "still short", waited,
                (now or 0) / 2**30))

    def gather(self) -> Optional[int]:
        """Meet the group; None to start the engine, else the exit status."""
        deadline = time.monotonic() + GATHER
        if self.opts.ranks == 1:
            return None  # a group of one: nothing to meet, and no port to take on the node
        if self.opts.rank == 0:
            self.listener = self.listen(deadline)
            if self.listener is None:
                if self.stopping:
                    return self.fail("%s stopped while its group met" % self.opts.me, 143, cause="node-stopped")
                return self.fail("%s could not listen on %s:%d within %gs" % (
                    self.opts.me, self.opts.address or self.opts.head, self.opts.port, GATHER), 1, cause="gather")
            while len({p.rank for p in self.peers}) < self.opts.ranks - 1:
                if self.stopping:
                    return self.fail("%s stopped while its group met" % self.opts.me, 143, cause="node-stopped")
                if time.monotonic() > deadline:
                    missing = sorted(set(range(1, self.opts.ranks)) - {p.rank for p in self.peers})
                    return self.fail("rank(s) %s did not join within %gs" % (missing, GATHER), 1, cause="gather")
                self.hear_newcomers(1.0)
                ready, _, _ = select.select([p.sock for p in self.peers], [], [], 0)
                self.peers = [p for p in self.peers if p.sock not in ready or p.read() is not None]  # gone: drop
            for peer in self.peers:
                peer.send(go=True, mac=self.opts.mac("go", peer.rank, peer.nonce))
            return None
        while not self.stopping:
            if time.monotonic() > deadline:
                return self.fail("the head (%s:%d) did not gather the group within %gs"
                                 % (self.opts.head, self.opts.port, GATHER), 1, cause="gather")
            done, verdict = self.join(deadline)
            if done:
                return verdict
        return self.fail("%s stopped while its group met" % self.opts.me, 143, cause="node-stopped")

    def join(self, deadline: float) -> Tuple[bool, Optional[int]]:
        """One attempt of a worker to join the head: (True, None) to start the engine, (True, status) when told to
        halt, (False, None) to try again."""
        try:
            source = (self.opts.address, 0) if self.opts.address else None
            sock = socket.create_connection((self.opts.head, self.opts.port), timeout=2, source_address=source)
        except OSError:
            time.sleep(1)
            return False, None
        peer, mine = Peer(sock), os.urandom(16).hex()
        peer.rank, peer.node = 0, "the head"
        nonce, why = None, "the head closed the connection before saying go (a rank of another group or key?)"
        while not self.stopping and time.monotonic() < deadline:
            ready, _, _ = select.select([sock], [], [], 1.0)
            messages = peer.read() if ready else []
            if messages is None:
                break  # the head went away, or turned this rank away: try again
            for message in messages:
                if nonce is None and isinstance(message.get("nonce"), str):
                    if bool(message.get("keyed")) != bool(self.opts.key):
                        why = KEY_MISMATCH[bool(message.get("keyed"))]
                        break
                    nonce = message["nonce"]
                    peer.send(hello=self.opts.rank, node=self.opts.node, group=self.opts.group, nonce=mine,
                              mac=self.opts.mac("hello", self.opts.rank, nonce))
                elif nonce is not None and "halt" in message and self.opts.proven(
                        message.get("mac"), "halt", mine, message["halt"]):
                    self.state.halt(str(message["halt"]))
                    say("stopping for good: the head says: %s" % message["halt"])
                    return True, 0
                elif nonce is not None and message.get("go") and self.opts.proven(
                        message.get("mac"), "go", self.opts.rank, mine):
                    self.peers = [peer]
                    return True, None
                elif nonce is not None and ("go" in message or "halt" in message):
                    why = "the head's word was not proven with this rank's group key"
            else:
                continue
            break
        sock.close()
        self.say_once("%s: not joined: %s" % (self.opts.me, why))
        time.sleep(1)  # never a busy loop against a head that turns this rank away
        return False, None

    def say_once(self, text: str) -> None:
        """Say why a rank could not join, once a minute at most (a stranger could fill the log otherwise)."""
        if time.monotonic() - self.said_away > 60:
            self.said_away = time.monotonic()
            say(text)

    def listen(self, deadline: float) -> Optional[socket.socket]:
        """The head's port, on its fabric address alone. After a reboot the address may come up later than the
        container (a direct link waits for its peer): tried again until deadline, as a rank not yet come is waited
        for; None at the deadline or when stopped."""
        said = False
        while not self.stopping:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                listener.bind((self.opts.address or self.opts.head, self.opts.port))
            except OSError as err:
                listener.close()
                if time.monotonic() > deadline:
                    return None
                if not said:
                    say("%s: waiting for %s:%d to be had (%s)" % (
                        self.opts.me, self.opts.address or self.opts.head, self.opts.port, err))
                    said = True
                time.sleep(1)
                continue
            listener.listen(64)
            listener.setblocking(False)
            return listener
        return None

    def hear_newcomers(self, timeout: float) -> Optional[Peer]:
        """Take waiting connections (from the ranks' addresses only) and the hellos now readable, within timeout,
        never waiting on one connection; a proven rank of this very group (recipe and inputs) joins the peers,
        replacing an older one of the same rank, and is returned. The rest are closed without a word."""
        assert self.listener is not None
        socks = [self.listener] + [n.peer.sock for n in self.newcomers]
        ready, _, _ = select.select(socks, [], [], timeout)
        if self.listener in ready:
            self.take_connections()
        joined = None
        for newcomer in list(self.newcomers):
            rank = self.hello_of(newcomer) if newcomer.peer.sock in ready else None
            if rank is None and time.monotonic() < newcomer.deadline and newcomer.peer.sock.fileno() >= 0:
                continue
            self.newcomers.remove(newcomer)
            if type(rank) is int:  # not False (bool is an int too)
                newcomer.peer.sock.setblocking(True)
                self.peers = [p for p in self.peers if p.rank != rank] + [newcomer.peer]
                joined = newcomer.peer
            else:
                newcomer.peer.sock.close()
                if rank is False:
                    self.say_once("%s: turned away a connection that did not prove itself a rank of this group "
                                  "(another group, or another or no group key)" % self.opts.me)
        return joined

    def take_connections(self) -> None:
        """Up to PENDING_MAX waiting connections per call: a flood cannot keep the serve loop from its pings."""
        assert self.listener is not None
        for _ in range(PENDING_MAX):
            try:
                sock, (address, _) = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if self.opts.peers and address not in self.opts.peers[1:]:
                sock.close()  # not a rank's address
                continue
            self.newcomers.append(Newcomer(sock, bool(self.opts.key)))
            while len(self.newcomers) > PENDING_MAX:  # the oldest silent one makes room
                self.newcomers.pop(0).peer.sock.close()

    def hello_of(self, newcomer: Newcomer) -> Any:
        """The rank a newcomer proved to be; None while its hello is not complete; False when it never will be."""
        messages = newcomer.peer.read(LINE_MAX)
        if messages is None:
            return False
        if not messages:
            return None
        first = messages[0]
        rank = first.get("hello")
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 < rank < self.opts.ranks \
                or first.get("group") != self.opts.group or not isinstance(first.get("nonce"), str) \
                or not self.opts.proven(first.get("mac"), "hello", rank, newcomer.nonce):
            return False
        newcomer.peer.rank, newcomer.peer.node = rank, str(first.get("node", "?"))[:100]
        newcomer.peer.nonce = first["nonce"][:64]
        return rank

    def tell_halt(self, reason: str) -> int:
        """A halted head answers each rank that comes within HALT_TELL seconds with why, then exits 0: at once
        when every rank has been told (a told rank exits 0 and is not restarted, so no one else is coming)."""
        if self.opts.ranks > 1:  # the port not to be had: the workers stop at their own bound instead
            self.listener = self.listen(time.monotonic() + HALT_TELL)
        deadline = time.monotonic() + HALT_TELL
        told = set()  # type: Set[int]
        while self.listener is not None and time.monotonic() < deadline and not self.stopping \
                and len(told) < self.opts.ranks - 1:
            peer = self.hear_newcomers(1.0)
            if peer is not None:
                if peer.send(halt=reason, mac=self.opts.mac("halt", peer.nonce, reason)):
                    told.add(peer.rank)
        return 0

    def serve(self) -> int:
        assert self.engine is not None
        listener, last_ping = self.listener, 0.0
        health = Health(self.opts.health, self.opts.address) if self.opts.health else None
        wedge = Wedge(self.opts, self.engine.proc.args) if health is not None and self.opts.wedge > 0 else None
        while True:
            if health is not None and health.answered and not self.served:
                self.served = self.state.data["served_once"] = True
                self.state.save()
                if wedge is not None:
                    wedge.start(health.base())
            if self.stopping:
                return self.fail("%s stopped (SIGTERM: docker stop, or its node shutting down)" % self.opts.me, 143,
                                 cause="node-stopped")
            if self.engine.exited():  # a peer's failure often ends this engine too: the peer's word is the cause
                cause = self.message_within(1.0)
                if cause is not None:
                    return self.fail(str(cause[1]["failed"]), FOLLOWED, str(cause[1].get("line", "")), cause[0],
                                     str(cause[1].get("cause", "exited")))
                return self.fail("%s: the engine exited with status %s" % (self.opts.me, self.engine.status), 1,
                                 self.engine.last_line())
            if health is not None and health.never(self.opts.boot):
                return self.fail("%s: the engine has not answered /health within %gs of its start "
                                 "(health_start_period): %s" % (self.opts.me, self.opts.boot, health.error), 1,
                                 self.engine.last_line(), cause="health-lost")
            if health is not None and health.lost():
                return self.fail("%s: the engine stopped answering %s (%s)" % (self.opts.me, health.url, health.error),
                                 1, self.engine.last_line(), cause="health-lost")
            if wedge is not None and wedge.wedged:
                return self.fail("%s: the engine is wedged: %s" % (self.opts.me, wedge.wedged), 1,
                                 self.engine.last_line(), cause="wedged")
            if time.monotonic() - last_ping > PING:
                for peer in self.peers:
                    peer.send(ping=True, serving=self.served)
                last_ping = time.monotonic()
            self.reap()
            newcomer = self.hear_newcomers(0) if listener is not None else None
            if newcomer is not None:  # a rank met again while the group ran: it restarted on its own
                return self.fail("rank %d (%s) restarted" % (newcomer.rank, newcomer.node), FOLLOWED,
                                 origin=newcomer, cause="restarted")
            socks: List[Any] = [p.sock for p in self.peers] + ([listener] if listener else [])
            socks += [n.peer.sock for n in self.newcomers]
            ready, _, _ = select.select(socks, [], [], 0.5)
            for peer in self.peers:
                messages = peer.read() if peer.sock in ready else []
                who = "the head" if self.opts.rank else "rank %d (%s)" % (peer.rank, peer.node)
                if messages is None or time.monotonic() - peer.heard > SILENT:
                    return self.fail("lost %s (its watch went silent)" % who, FOLLOWED, cause="lost-peer")
                for message in messages:
                    if message.get("serving") and not self.served:  # the head served: this group works
                        self.served = self.state.data["served_once"] = True
                        self.state.save()
                    if "failed" in message:
                        return self.fail(str(message["failed"]), FOLLOWED, str(message.get("line", "")), peer,
                                         str(message.get("cause", "exited")))

    def reap(self) -> None:
        """As PID 1, wait for the zombies of orphaned processes (an engine's helpers whose parent died), every few
        seconds; never the engine's own process, whose status its Popen collects."""
        if os.getpid() != 1 or time.monotonic() - self.reaped < 5:
            return
        self.reaped = time.monotonic()
        engine = self.engine.proc.pid if self.engine is not None else -1
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in (1, engine):
                continue
            try:
                with open("/proc/%s/stat" % entry) as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if len(fields) > 1 and fields[0] == "Z" and fields[1] == "1":
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(int(entry), os.WNOHANG)

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

    def fail(self, reason: str, status: int, line: str = "", origin: Optional[Peer] = None,
             cause: str = "exited") -> int:
        """Tell the group why, stop the engine, record the restart, and exit with status. The record's time is the
        decision's, before the engine's stop grace: what ps and the detection figures mean by when it failed."""
        decided = time.time()
        rank, node = (origin.rank, origin.node) if origin else (self.opts.rank, self.opts.node)
        for peer in self.peers:
            if peer is not origin:
                peer.send(failed=reason, line=line, cause=cause)
        if self.engine is not None:
            self.engine.stop(self.opts.grace)
        self.state.data["running"] = False
        self.state.data.pop("served_once", None)
        self.state.restart(reason, rank, node, line, self.served, self.opts, cause, decided)
        say("group restart (%s): %s%s" % (cause, reason, (": " + line) if line else ""))
        return status


def available_memory() -> Optional[int]:
    """The node's MemAvailable in bytes (a container sees the host's /proc/meminfo), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def opener() -> Any:
    """urllib for the engine's own loopback: no proxy, TLS without a name to check (its own address)."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))


class Health:
    """The head's /health, asked on a thread: lost after HEALTH_FAILS misses in a row once it has answered; and
    "never" when it has not answered within the boot bound (the recipe's health_start_period) of the engine's start.

    Until it first answers, it is asked every BOOT_EVERY seconds. An engine that froze before
    the watch saw its first answer (the lab froze one a second after it answered a client, while the watch asked
    every 5 s) was never watched for a wedge: it is now seen within a second, and one that never answers ends the
    group at the boot bound. When the URL names the loopback (the engine listens on every address) and the node's
    fabric address is known, that address is asked too whenever the loopback gets no answer, and the one that
    answers is the one watched."""

    def __init__(self, url: str, fabric: str = "") -> None:
        self.url, self.answered, self.misses, self.error = url, False, 0, ""
        self.urls = [u for u in (url, fabric_url(url, fabric)) if u]
        self.started = self.told = time.monotonic()  # told: when the watch last said /health has not answered yet
        threading.Thread(target=self._ask, daemon=True).start()

    def _ask(self) -> None:
        ask = opener()
        while True:
            errors = []
            for url in (self.urls if not self.answered else [self.url]):
                try:
                    ask.open(url, timeout=HEALTH_TIMEOUT).close()
                except Exception as err:  # refused, HTTP 5xx, timeout: a miss here
                    errors.append("%s: %s" % (url, str(err)[:200]))
                    continue
                if errors:  # the fabric address answers where the loopback does not: say so
                    say("the engine answers %s and not %s; watched there" % (url, "; ".join(errors)))
                self.url, self.misses = url, 0
                self.answered = True  # last: the serve loop reads lost() from answered and misses
                break
            else:
                self.misses, self.error = self.misses + 1, "; ".join(errors)[:400]
                if not self.answered and time.monotonic() - self.told >= NOT_YET_EVERY:  # a long load, or worse
                    self.told = time.monotonic()
                    say("the engine has not answered /health yet (%s)" % self.error)
            time.sleep(BOOT_EVERY if not self.answered else HEALTH_EVERY)

    def lost(self) -> bool:
        return self.answered and self.misses >= HEALTH_FAILS

    def never(self, bound: float) -> bool:
        """No answer yet, `bound` seconds after the engine started (a boot hung at NCCL's init, or a freeze before
        the first answer): a failed boot, which the restart bound counts."""
        return bound > 0 and not self.answered and time.monotonic() - self.started >= bound

    def base(self) -> str:
        """The engine's API root where /health last answered."""
        return self.url.rsplit("/health", 1)[0]


def fabric_url(url: str, address: str) -> str:
    """url with its loopback host replaced by the node's fabric address; "" when it names another host."""
    parts = urllib.parse.urlsplit(url)
    if not address or parts.hostname not in ("127.0.0.1", "::1"):
        return ""
    host = "[%s]" % address if ":" in address else address
    return urllib.parse.urlunsplit(parts._replace(netloc="%s:%d" % (host, parts.port) if parts.port else host))


# The engines' counters of work done, and their gauges of work in hand (vLLM's; SGLang's with --enable-metrics).
PROGRESS = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total", "sglang:generation_tokens_total",
            "sglang:prompt_tokens_total")
IN_HAND = ("vllm:num_requests_running", "vllm:num_requests_waiting", "sglang:num_running_reqs",
           "sglang:num_queue_reqs")
BUSY_WINDOW = 300.0  # counters standing still while requests are in hand: a long prefill may, this long


class Wedge:
    """The head's engine, watched for work on a thread once it has served. Every WEDGE_EVERY seconds it reads the
    token counters on /metrics. When they moved, the engine works. When they stood still and no request is in hand
    (an idle engine, or one frozen before its requests came: a frozen core keeps its gauges), a one-token
    completion must come back within `--wedge` seconds; a miss is asked again at once, and a second miss is a
    wedge. When requests are in hand (a long prompt's prefill counts only when it ends, and a full batch makes the
    probe queue), or /metrics cannot tell (SGLang without --enable-metrics), the counters must stand still for
    BUSY_WINDOW (or 15 x `--wedge`) before the probe asks: slower to see, never a restart of a busy engine. An
    engine that refuses the probe (4xx: a key it wants, a name it does not serve) is not judged."""

    def __init__(self, opts: Options, command: Any) -> None:
        self.metrics, self.completions, self.deadline = "", "", opts.wedge
        self.model, self.key = opts.model, api_key(list(command) if isinstance(command, list) else [])
        self.busy_window = max(BUSY_WINDOW, 15 * opts.wedge)
        self.wedged = ""
        self.last: Optional[float] = None
        self.ask = opener()

    def start(self, base: str) -> None:
        """Watch the engine whose API root is base (where its /health answered)."""
        self.metrics, self.completions = base + "/metrics", base + "/v1/completions"
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        still = time.monotonic()  # since when the counters stood still
        while not self.wedged:
            time.sleep(min(WEDGE_EVERY, self.deadline))
            moved, busy = self.look()
            if moved:
                still = time.monotonic()
                continue
            if busy and time.monotonic() - still < self.busy_window:
                continue
            missed = self.probe()
            if missed is None:
                say("the wedge probe is refused by the engine; wedge detection is off for this boot")
                return
            if missed and self.probe():
                self.wedged = ("no answer to a one-token completion within %gs, twice, and no token counted for "
                               "%.0fs" % (self.deadline, time.monotonic() - still))
            self.look()  # the probe's own tokens are not the engine's work

    def look(self) -> Tuple[bool, bool]:
        """(the token counters moved since the last look, requests are in hand or /metrics cannot tell). A /metrics
        that does not answer within the deadline tells nothing of requests in hand: the probe asks at once."""
        try:
            with self.ask.open(self.metrics, timeout=self.deadline) as answer:
                text = answer.read(8 << 20).decode("utf-8", "replace")
        except urllib.error.HTTPError:
            return False, True  # no /metrics here (SGLang without --enable-metrics): it cannot tell
        except Exception:
            return False, False  # no answer at all: nothing says it works, so the probe asks
        total, in_hand, seen = 0.0, 0.0, False
        for line in text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in PROGRESS or name in IN_HAND:
                with contextlib.suppress(ValueError, IndexError):
                    value = float(line.rsplit(" ", 1)[1])
                    seen = seen or name in PROGRESS
                    total += value if name in PROGRESS else 0.0
                    in_hand += value if name in IN_HAND else 0.0
        moved = self.last is None or total > self.last  # a first look knows nothing yet: not still
        self.last = total
        return moved, in_hand > 0 or not seen

    def probe(self) -> Optional[bool]:
        """True when the one-token completion got no answer in time, False when it did, None when the engine
        refused it (4xx). A 5xx is an answer: an engine that fails requests is not frozen (a dead one loses
        /health)."""
        body = json.dumps({"model": self.model, "prompt": "1", "max_tokens": 1, "temperature": 0}).encode()
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = "Bearer " + self.key
        request = urllib.request.Request(self.completions, body, headers)
        try:
            self.ask.open(request, timeout=self.deadline).close()
            return False
        except urllib.error.HTTPError as err:
            return None if 400 <= err.code < 500 else False
        except Exception:
            return True


def api_key(command: List[str]) -> str:
    """The key the engine asks for: its last `--api-key`, else VLLM_API_KEY (vLLM reads it too)."""
    found = os.environ.get("VLLM_API_KEY", "")
    for i, word in enumerate(command):
        if word == "--api-key" and i + 1 < len(command):
            found = command[i + 1]
        elif word.startswith("--api-key="):
            found = word.split("=", 1)[1]
    return found


if __name__ == "__main__":
    sys.exit(Watch(Options(sys.argv[1:])).run())
