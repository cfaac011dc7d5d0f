"""Stand-in for the `ray` CLI (the console script calls main):

    ray start --head --port=P [--node-ip-address=A] [--num-gpus=N] [--block]
        starts the head's GCS and raylet on P (in the background, or in the foreground with --block)
        and writes A:P to /tmp/ray/ray_current_cluster; returns once they answer, like the real command.
    ray start --address=H:P [--node-ip-address=B] [--num-gpus=N] [--block]
        joins the head at H:P (exit 1 if unreachable within LAB_JOIN_TIMEOUT s) and runs this node's
        raylet, in the foreground with --block.
Other options of the real command (--object-store-memory, --num-cpus, --include-dashboard=...,
--disable-usage-stats, --dashboard-host ...) are accepted and ignored.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable

from labengine.common import Log, integers, join_timeout, on_stop, parse_flags, stay
from ray._cluster import CURRENT_CLUSTER, Head, node_ip, receive, send, serve_raylet

log = Log("ray")
BOOLEAN = {"--head", "--block", "--disable-usage-stats", "--verbose"}
DAEMON = "_LAB_RAY_DAEMON"  # set in the background copy `ray start` leaves running
READY = "/tmp/ray/raylet.ready"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    on_stop(log)
    if not os.environ.get(DAEMON):
        log.start(args)
    if not args or args[0] != "start":
        log.die("only 'ray start' is supported by the lab stand-in")
    flags, _ = parse_flags(args[1:], lambda flag: flag in BOOLEAN)
    ip = flags.get("--node-ip-address") or node_ip()
    gpus = float(flags.get("--num-gpus") or 1)
    if "--head" in flags:
        port = integers(log, port=flags.get("--port", "6379"))["port"]
        if "--block" in flags or os.environ.get(DAEMON):
            return run_head(ip, port, gpus)
        CURRENT_CLUSTER.unlink(missing_ok=True)
        background(args, lambda: CURRENT_CLUSTER.exists() and answers(ip, port))
        log(f"head started on {ip}:{port}")
        return 0
    address = flags.get("--address", "")
    if not address:
        log.die("give --head or --address=HOST:PORT")
    if "--block" in flags or os.environ.get(DAEMON):
        return run_worker(address, ip, gpus)
    background(args, lambda: os.path.exists(READY))
    return 0


def run_head(ip: str, port: int, gpus: float) -> int:
    try:
        head = Head(ip, port, gpus)
    except OSError as err:
        log.die(f"cannot listen on port {port}: {err}")
    if not os.environ.get(DAEMON):
        log(f"head started on {ip}:{port}")
    head.serve_forever()
    return 0


def run_worker(address: str, ip: str, gpus: float) -> int:
    host, _, port = address.rpartition(":")
    if os.environ.get("LAB_FAIL_JOIN"):
        log.die(f"cannot join {address}: {os.environ['LAB_FAIL_JOIN']}")
    deadline = time.monotonic() + join_timeout()
    while True:
        try:
            conn = socket.create_connection((host, int(port)), timeout=3)
            send(conn, {"op": "register", "ip": ip, "hostname": socket.gethostname(), "gpus": gpus})
            reader = conn.makefile()
            reply = receive(reader)
            if reply and "node_id" in reply:
                break
            conn.close()
        except (OSError, ValueError):
            pass
        if time.monotonic() >= deadline:
            log.die(f"cannot reach head at {address} after {join_timeout()}s")
        time.sleep(0.2)
    conn.settimeout(None)
    log(f"joined {address} as node {ip}")
    os.makedirs(os.path.dirname(READY), exist_ok=True)
    with open(READY, "w") as f:
        json.dump({"node_id": reply["node_id"], "head": address}, f)
    return serve_raylet(conn, reader, address)


def background(args: list[str], ready: Callable[[], bool]) -> None:
    """Leave a copy of this command running (the real `ray start` leaves its daemons) and return
    once ready() holds; die with its status if it exits first."""
    os.makedirs("/tmp/ray", exist_ok=True)
    if os.path.exists(READY):
        os.unlink(READY)
    daemon = subprocess.Popen([sys.executable, "-m", "ray.scripts", *args], stdin=subprocess.DEVNULL,
                              env={**os.environ, DAEMON: "1"}, start_new_session=True)
    deadline = time.monotonic() + join_timeout() + 10
    while not ready():
        if daemon.poll() is not None:
            sys.exit(daemon.returncode or 1)
        if time.monotonic() >= deadline:
            log.die("the Ray daemon did not start")
        time.sleep(0.05)


def answers(ip: str, port: int) -> bool:
    try:
        socket.create_connection((ip, port), timeout=1).close()
        return True
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
