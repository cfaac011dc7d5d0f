"""doctor's reachability check: every node connects to every other's fabric address over TCP (a listener container
on one node, a connector container on the other, bounded in time)."""

from __future__ import annotations

import random
import time

from generator.cluster.probe import LABEL, NodeFacts, ProbeError
from generator.deploy.docker import Docker, reason
from generator.deploy.findings import Finding, Severity
from generator.deploy.targets import each
from generator.resolve.model import Cluster, Node

OK, WARNING, ERROR = Severity.OK, Severity.WARNING, Severity.ERROR
CONNECT_SECONDS = 3
READY_SECONDS = 15
LISTEN_SECONDS = 60  # a listener container ends by itself after this, should recipegen die


_LISTEN = r"""
listen() { if command -v nc >/dev/null 2>&1; then nc -l -p "$1" </dev/null >/dev/null 2>&1
  elif command -v python3 >/dev/null 2>&1; then python3 -c 'import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("", int(sys.argv[1])))
s.listen(4); c, _ = s.accept(); c.close()' "$1"
  else echo "NO-TOOL"; fi; }
for p in $PORTS; do listen "$p" & done
i=0
while [ $i -lt 100 ]; do
  t=$(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null); ok=1
  for p in $PORTS; do h=$(printf ':%04X ' "$p"); case "$t" in *"$h"*) ;; *) ok=0 ;; esac; done
  [ $ok = 1 ] && break; i=$((i+1)); sleep 0.1
done
echo READY
sleep "$HOLD"
"""

# Each target is tried at once; a try exits non-zero when the connection fails and prints why on one line (the
# python3 fallback exits with its own status: no pipe, whose status would be the last command's).
_CONNECT = r"""
try() { if command -v nc >/dev/null 2>&1; then nc -w "$WAIT" "$1" "$2" </dev/null 2>&1 >/dev/null
  elif command -v python3 >/dev/null 2>&1; then python3 -c 'import socket,sys
try: socket.create_connection((sys.argv[1], int(sys.argv[2])), float(sys.argv[3])).close()
except OSError as e: print(e); sys.exit(1)' "$1" "$2" "$WAIT" 2>&1
  else echo "no nc or python3 in the image"; return 2; fi; }
for t in $TARGETS; do
  ( a=${t%:*}; p=${t##*:}; if err=$(try "$a" "$p"); then echo "OK $t"; else echo "FAIL $t $err"; fi ) &
done
wait
"""


def check_reach(cluster: Cluster, facts: dict[str, NodeFacts], timeout: float = 60) -> list[Finding]:
    """Every answering node connects to every other's fabric address: listeners first, then connectors."""
    nodes = [n for n in cluster.nodes if n.name in facts]
    if len(nodes) < 2:
        return []
    base = random.randint(20000, 28000) * 2
    port = {(a.name, b.name): base + i * len(nodes) + j for i, a in enumerate(nodes)
            for j, b in enumerate(nodes) if a is not b}  # (listener, connector) -> port
    tag = f"recipegen-doctor-{base}"

    def listen(node: Node) -> bool:
        ports = " ".join(str(port[(node.name, other.name)]) for other in nodes if other is not node)
        docker = Docker(node.context)
        docker.run("run", "-d", "--rm", "--pull", "never", "--label", LABEL, "--name", f"{tag}-{node.name}",
                   "--network", "host", "-e", f"PORTS={ports}", "-e", f"HOLD={LISTEN_SECONDS}", "--entrypoint", "sh",
                   facts[node.name].image, "-c", _LISTEN, timeout=30)
        deadline = time.monotonic() + READY_SECONDS
        while time.monotonic() < deadline:
            logs = docker.run("logs", f"{tag}-{node.name}", timeout=10)
            if "NO-TOOL" in logs:
                raise ProbeError(f"the image {facts[node.name].image} has neither nc nor python3 to listen with")
            if "READY" in logs:
                return True
            time.sleep(0.2)
        raise ProbeError(f"the listener did not start within {READY_SECONDS}s")

    out: list[Finding] = []
    try:
        ready = each(nodes, listen)
        listening = [n for n in nodes if ready[n.name] is True]
        for n in nodes:
            if not isinstance(got := ready[n.name], bool):
                out.append(Finding(n.name, WARNING, "reach", f"could not start a listener: {reason(got)}",
                                   "pass --image with an image that has sh and nc (busybox)"))

        def connect(node: Node) -> str:
            targets = " ".join(f"{o.address}:{port[(o.name, node.name)]}" for o in listening if o is not node)
            if not targets:
                return ""
            return Docker(node.context).run(
                "run", "--rm", "--pull", "never", "--label", LABEL, "--network", "host", "-e", f"TARGETS={targets}",
                "-e", f"WAIT={CONNECT_SECONDS}", "--entrypoint", "sh", facts[node.name].image, "-c", _CONNECT,
                timeout=min(timeout, 30 + CONNECT_SECONDS * len(nodes)))

        results = each(nodes, connect)
    finally:  # every node, not only those known to have started one: a timed-out `run -d` may still have
        each(nodes, lambda n: Docker(n.context).run("rm", "-f", f"{tag}-{n.name}", timeout=20))
    by_addr = {n.address: n for n in nodes}
    for node in nodes:
        result = results[node.name]
        if isinstance(result, BaseException):
            out.append(Finding(node.name, WARNING, "reach", f"connector did not run: {reason(result)}", ""))
            continue
        for line in result.splitlines():
            word, _, rest = line.partition(" ")
            target, _, why = rest.partition(" ")
            other = by_addr.get(target.rpartition(":")[0])
            if other is None:
                continue
            if word == "OK":
                out.append(Finding(node.name, OK, "reach", f"reaches {other.name} at {target}"))
            elif word == "FAIL":
                head = " (the head)" if other is cluster.nodes[0] else ""
                why = " ".join(why.split()) or "failed"
                out.append(Finding(node.name, ERROR, "reach",
                                   f"cannot reach {other.name}{head} at {target} over TCP: {why}",
                                   f"check the cable and link of both fabric ports, that {other.address} is on the "
                                   f"same subnet as {node.address}, and no firewall drops the fabric"))
    return out



