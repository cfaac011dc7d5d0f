"""The stand-in Ray cluster: the head's GCS, each node's raylet, and the wire between them.

The wire is one JSON object a line over TCP to the head's --port. A raylet registers with
{"op": "register", "ip", "hostname", "gpus"} and keeps its connection: the head knows it alive as
long as that connection is open, and sends "worker processes" to start down it. A client (ray.init)
asks {"op": "nodes"} or {"op": "start_worker", "node_id", "env", "rank"} on a connection of its own.

A "worker process" is what vLLM's Ray executor makes on every node: it starts with the environment
of its node's raylet (that node's `ray start`), then applies what the driver sends, as vLLM's
update_environment_variables does. The raylet writes the result to WORKER_ENV in its own container
and logs it, so a test can see what a real worker on that node would run with.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

# Real Ray writes the address of the cluster last started on this machine there: ray.init("auto")
# and a bare ray.init() read it.
CURRENT_CLUSTER = Path("/tmp/ray/ray_current_cluster")
WORKER_ENV = Path("/tmp/vllm/worker-env.json")
FABRIC_ENV = ("NCCL_", "GLOO_", "VLLM_HOST_IP", "MASTER_ADDR")


def say(message: str, stream: Any = None) -> None:
    print(f"[ray] {message}", file=stream or sys.stdout, flush=True)


def send(conn: socket.socket, message: dict[str, Any]) -> None:
    conn.sendall((json.dumps(message) + "\n").encode())


def receive(reader: Any) -> dict[str, Any] | None:
    line = reader.readline()
    return json.loads(line) if line else None


def request(address: str, message: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
    """One request on a connection of its own; ConnectionError if the head does not answer."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as conn:
        send(conn, message)
        reply = receive(conn.makefile())
    if reply is None:
        raise ConnectionError(f"the Ray head at {address} closed the connection")
    if "error" in reply:
        raise RuntimeError(reply["error"])
    return reply


def node_ip() -> str:
    """This node's address when --node-ip-address is not given: the first non-loopback IPv4
    address of an interface (real Ray asks the routing table; the lab has no default route)."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))  # SIOCGIFADDR
            except OSError:
                continue
            address = socket.inet_ntoa(packed[20:24])
            if not address.startswith("127."):
                return address
    return "127.0.0.1"


def node_info(node_id: str, ip: str, hostname: str, gpus: float, alive: bool) -> dict[str, Any]:
    """An entry of ray.nodes(), with the keys launch scripts read."""
    return {"NodeID": node_id, "Alive": alive, "NodeManagerAddress": ip, "NodeManagerHostname": hostname,
            "NodeName": ip, "Resources": {"CPU": float(os.cpu_count() or 1), "GPU": gpus}}


def start_worker(update: dict[str, str], rank: int) -> dict[str, str]:
    """Start a "worker process" here: this raylet's environment, updated as vLLM's worker does
    (utils.update_environment_variables; CUDA_VISIBLE_DEVICES is replaced without a warning)."""
    env = dict(os.environ)
    if "CUDA_VISIBLE_DEVICES" in update:
        env.pop("CUDA_VISIBLE_DEVICES", None)
    for name, value in update.items():
        if name in env and env[name] != value:
            say(f"worker {rank}: Overwriting environment variable {name} from '{env[name]}' to '{value}'")
        env[name] = value
    WORKER_ENV.parent.mkdir(parents=True, exist_ok=True)
    WORKER_ENV.write_text(json.dumps(env, indent=1, sort_keys=True))
    for name in sorted(env):
        if name.startswith(FABRIC_ENV):
            say(f"worker {rank} env: {name}={env[name]}")
    return env


class Raylet:
    """A registered node as the head sees it."""

    def __init__(self, ip: str, hostname: str, gpus: float, conn: socket.socket | None):
        self.id = uuid.uuid4().hex
        self.ip, self.hostname, self.gpus = ip, hostname, gpus
        self.conn = conn  # None: the head's own raylet, in the head's process
        self.reader = conn.makefile() if conn else None
        self.lock = threading.Lock()

    def alive(self) -> bool:
        if self.conn is None:
            return True
        try:
            return self.conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
        except BlockingIOError:
            return True  # open, nothing to read
        except OSError:
            return False

    def start_worker(self, env: dict[str, str], rank: int) -> dict[str, str]:
        if self.conn is None:
            return start_worker(env, rank)
        with self.lock:
            send(self.conn, {"op": "start_worker", "env": env, "rank": rank})
            reply = receive(self.reader)
        if reply is None:
            raise RuntimeError(f"the raylet of {self.ip} is gone")
        return dict(reply["env"])


class Head:
    """The head's GCS (and its own raylet) on --port: keeps the node table, relays worker starts."""

    def __init__(self, ip: str, port: int, gpus: float):
        self.address = f"{ip}:{port}"
        self.server = socket.create_server(("", port))
        self.nodes = [Raylet(ip, socket.gethostname(), gpus, None)]
        CURRENT_CLUSTER.parent.mkdir(parents=True, exist_ok=True)
        CURRENT_CLUSTER.write_text(self.address)

    def serve_forever(self) -> None:
        while True:
            conn, _ = self.server.accept()
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            message = receive(conn.makefile())
            if message is None:
                conn.close()
                return
            op = message.get("op")
            if op == "register":  # the connection now belongs to the raylet: not closed here
                node = Raylet(message["ip"], message.get("hostname", ""), float(message.get("gpus", 1)), conn)
                self.nodes.append(node)
                say(f"node {node.ip} joined the cluster")
                send(conn, {"node_id": node.id})
                return
            with conn:
                send(conn, self._answer(op, message))
        except (OSError, ValueError) as err:
            say(f"a connection failed: {err}", sys.stderr)

    def _answer(self, op: str | None, message: dict[str, Any]) -> dict[str, Any]:
        if op == "nodes":
            return {"nodes": [node_info(n.id, n.ip, n.hostname, n.gpus, n.alive()) for n in self.nodes]}
        if op == "start_worker":
            node = next((n for n in self.nodes if n.id == message["node_id"]), None)
            if node is None:
                return {"error": f"no node {message['node_id']}"}
            try:
                return {"env": node.start_worker(message["env"], message["rank"])}
            except (OSError, RuntimeError) as err:
                return {"error": str(err)}
        return {"error": f"unknown request {op!r}"}


def serve_raylet(conn: socket.socket, reader: Any, head: str) -> int:
    """A worker node's raylet after it registered: start the workers the head sends, until the
    head goes away (real raylets exit when they lose the GCS)."""
    while (message := receive(reader)) is not None:
        if message.get("op") == "start_worker":
            send(conn, {"env": start_worker(message["env"], message["rank"])})
    say(f"error: lost the head at {head}", sys.stderr)
    return 1
