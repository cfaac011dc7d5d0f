"""Who listens on a TCP port of a node: asked of the node itself, by a short-lived helper container on the host's
network and pid namespace. The head's engine listens on the host network, so a port another process already holds
means the readiness wait would hear that process, not this recipe's engine: `up` refuses it in preflight, naming
the holder, and checks at the end that the answer came from this recipe's own head.

The helper reads the node's listening sockets (/proc/net/tcp, tcp6), finds the process holding the socket
(/proc/PID/fd) and its container (the 64-hex id in /proc/PID/cgroup); python3 only, any engine image has it.
Reading another process's fds needs CAP_SYS_PTRACE (and, under AppArmor's docker-default profile, unconfined):
where even that is refused, the port is still known to be taken, by a process it could not name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from generator.deploy.docker import DockerError, reason
from generator.deploy.names import RANK_LABEL, RECIPE_LABEL
from generator.deploy.targets import OnNode
from generator.plan.types import LABEL_PREFIX

_FIND = r'''
import json, os, re, sys
port, inodes = int(sys.argv[1]), set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        rows = open(table).read().splitlines()[1:]
    except OSError:
        continue
    for row in rows:
        f = row.split()
        if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
            inodes.add("socket:[%s]" % f[9])
found = {"listening": bool(inodes)}
me = str(os.getpid())
for pid in (p for p in os.listdir("/proc") if inodes and p.isdigit() and p != me):
    try:
        fds = os.listdir("/proc/%s/fd" % pid)
    except OSError:
        continue
    hit = False
    for fd in fds:
        try:
            hit = os.readlink("/proc/%s/fd/%s" % (pid, fd)) in inodes
        except OSError:
            pass
        if hit:
            break
    if hit:
        def text(name):
            try:
                return open("/proc/%s/%s" % (pid, name), "rb").read().decode("utf-8", "replace")
            except OSError:
                return ""
        ids = re.findall(r"[0-9a-f]{64}", text("cgroup"))
        found.update(pid=int(pid), comm=text("comm").strip(), container=ids[-1] if ids else "")
        break
print(json.dumps(found))
'''


@dataclass(frozen=True)
class PortHolder:
    """A process listening on the port: its container (name, recipe label, rank) when it runs in one."""

    pid: int = 0
    command: str = ""  # the process's name (/proc/PID/comm)
    container_id: str = ""
    container: str = ""
    recipe: str = ""
    rank: str = ""

    def describe(self) -> str:
        if self.container:
            of = f" of recipe '{self.recipe}'" if self.recipe else ""
            return f"container '{self.container}'{of} (process {self.command or '?'}, pid {self.pid})"
        if self.container_id:
            return f"process {self.command or '?'} (pid {self.pid}) in container {self.container_id[:12]}"
        if self.pid:
            return f"process {self.command or '?'} (pid {self.pid}), not in a container of this engine"
        return "a process recipegen could not name (reading other processes' sockets was refused)"


def port_holder(node: OnNode, image: str, port: int) -> PortHolder | None:
    """Who listens on `port` on the node, or None when nobody does. `image`: one present on the node with
    python3. Raises DockerError when the helper cannot run."""
    said = node.docker.run("run", "--rm", "--pull", "never", "--network", "host", "--pid", "host",
                           "--cap-add", "SYS_PTRACE", "--security-opt", "apparmor=unconfined", "--user", "0",
                           "--label", f"{LABEL_PREFIX}.helper=port", "--entrypoint", "python3", image,
                           "-c", _FIND, str(port), timeout=120)
    found = json.loads(said.strip().splitlines()[-1]) if said.strip() else {}
    if not isinstance(found, dict) or not found.get("listening"):
        return None
    holder = PortHolder(int(found.get("pid") or 0), str(found.get("comm") or ""), str(found.get("container") or ""))
    if not holder.container_id:
        return holder
    try:
        info = node.docker.inspect_container(holder.container_id)
    except DockerError:
        info = None
    if info is None:
        return holder
    config = info.get("Config")
    labels = config.get("Labels") if isinstance(config, dict) else None
    labels = labels if isinstance(labels, dict) else {}
    return PortHolder(holder.pid, holder.command, holder.container_id, str(info.get("Name", "")).lstrip("/"),
                      str(labels.get(RECIPE_LABEL, "")), str(labels.get(RANK_LABEL, "")))


def holder_or_reason(node: OnNode, image: str, port: int) -> PortHolder | None | str:
    """`port_holder`, or why the helper could not ask (a str)."""
    try:
        return port_holder(node, image, port)
    except (DockerError, ValueError) as exc:
        return reason(exc)
