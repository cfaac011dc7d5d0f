"""`recipegen images` node to node: the image streams from the source's engine through every target's engine in a
chain over the fabric addresses, as `recipegen models` moves weights, so none of its bytes pass through the
deploying machine. Through this machine (generator/transfer/images.py) only where a node cannot take part.

The chicken-and-egg of copying an image with containers: a target cannot run a helper of the image it lacks. So
each node's helper runs an image that node already has and that has python3, chosen here and probed: on the
source the image itself first; on a target the image's own (drifted) copy, other tags of its repository, images
of containers recipegen ran, then any other local image. The helpers speak the Docker Engine API over the node's
socket, bind-mounted in (engine images have python3, not a docker CLI): GET /images/get on the source, POST
/images/load on each target, fed while the stream passes on to the next target.

Mounting the engine's socket gives a helper no power recipegen does not already have: recipegen drives that same
engine through the node's context (it starts privileged-enough containers, mounts host folders, loads images).
The helper holds it for seconds, runs recipegen's own agent, and is removed on any failure or Ctrl-C.
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass

from generator.deploy.docker import reason, run_command
from generator.deploy.names import LOCK_IMAGE
from generator.deploy.targets import OnNode, Target, each
from generator.plan.types import LABEL_PREFIX
from generator.transfer.images import fan_out
from generator.transfer.helpers import Helpers, Proc, follow, last_line

# Where the node's engine socket appears inside a helper.
SOCKET_IN_HELPER = "/run/recipegen-engine.sock"
# An ssh:// context runs `docker system dial-stdio` on the node, which talks to the engine's default socket.
SSH_SOCKET = "/var/run/docker.sock"
PROBE_TIMEOUT = 20.0
MAX_PROBES = 4  # images tried per node before it goes through this machine: each try starts a container
COPY_TIMEOUT = 3600.0


@dataclass(frozen=True)
class Helper:
    """What runs a node's part of the chain: the image it runs, and the engine socket on that node."""

    node: OnNode
    image: str
    socket: str


@dataclass(frozen=True)
class Copied:
    """One target's copy: how it went (node to node, or through this machine and why), its error, its size."""

    how: str
    error: str | None
    bytes: int = 0
    seconds: float = 0.0


# --- choosing the helpers ----------------------------------------------------------------------------------

def engine_socket(endpoint: str) -> tuple[str | None, str]:
    """The engine's socket on the node a context endpoint reaches, or None and why there is none to mount."""
    if endpoint.startswith("unix://"):
        path = endpoint[len("unix://"):]
        if path.startswith("/"):
            return path, ""  # a unix socket is on the machine that runs the engine: the path is the node's path
        return None, f"its context endpoint {endpoint} is not an absolute socket path"
    if endpoint.startswith("ssh://"):
        return SSH_SOCKET, ""
    return None, (f"its context endpoint {endpoint or '(none)'} is not a unix socket or ssh, so there is no "
                  "engine socket to give a helper")


def context_endpoint(context: str) -> str:
    return run_command(["docker", "context", "inspect", context, "--format", "{{.Endpoints.docker.Host}}"],
                       timeout=15).strip()


def repository(image: str) -> str:
    """An image reference without its tag or digest (a registry port's colon is not a tag)."""
    name = image.split("@", 1)[0]
    colon = name.rfind(":")
    return name[:colon] if colon > name.rfind("/") else name


def tagged(image: str) -> str:
    return image if "@" in image or repository(image) != image else f"{image}:latest"


def candidates(image: str, local: list[tuple[str, str]], ran: list[str], limit: int = MAX_PROBES) -> list[str]:
    """The images to try, in order, for a helper on a node holding `local` (name, id), newest first as `docker
    images` lists them; `ran` are the images of recipegen's containers there. One name per image id (the lab's
    and a real node's aliases of one engine image are one candidate), at most `limit`."""
    want, repo = tagged(image), repository(image)
    named = [(tagged(n), i) for n, i in local if "<none>" not in n and n != LOCK_IMAGE]
    ran_tagged = {tagged(r) for r in ran}
    order = ([x for x in named if x[0] == want] + [x for x in named if repository(x[0]) == repo]
             + [x for x in named if x[0] in ran_tagged] + named)
    chosen: dict[str, str] = {}
    for name, image_id in order:
        chosen.setdefault(image_id, name)
    return list(chosen.values())[:limit]


def _local_images(node: OnNode) -> tuple[list[tuple[str, str]], list[str]]:
    rows = node.docker.json_lines("images", "--format", "{{json .}}", timeout=30)
    local = [(f"{r.get('Repository')}:{r.get('Tag')}", str(r.get("ID"))) for r in rows]
    ran = [str(r.get("Image")) for r in node.docker.containers(f"{LABEL_PREFIX}.recipe", timeout=30)]
    return local, ran


def _mount(path: str) -> tuple[str, ...]:
    # --mount, not -v: -v makes a missing source path as an empty folder on the node; --mount refuses it. The
    # field is CSV-quoted, so a path with a comma stays one field.
    quoted = '"source=' + path.replace('"', '""') + '"'
    return ("--mount", f"type=bind,{quoted},target={SOCKET_IN_HELPER}",
            # the socket is root's (and the docker group's): an image whose USER is someone else could not use it
            "--user", "0")


def helper_command(helpers: Helpers, helper: Helper, role: str, *args: str) -> list[str]:
    return helpers.container(helper.node, role, helper.image, _mount(helper.socket), *args)


def probe(helpers: Helpers, helper: Helper) -> tuple[bool, str]:
    """Whether the agent runs in this image with the engine's socket mounted (python3 there, new enough for the
    agent, the socket reachable); when not, why, and whether another image could do better (a socket missing or
    unreachable fails every image alike)."""
    cmd = helper_command(helpers, helper, "probe", "image-ping", SOCKET_IN_HELPER)
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=PROBE_TIMEOUT)
    except subprocess.TimeoutExpired:
        return False, f"{helper.image}: python3 did not answer within {PROBE_TIMEOUT:.0f}s"
    if done.returncode == 0:
        return True, ""
    said = last_line(done.stderr.decode(errors="replace") + done.stdout.decode(errors="replace"))
    socket_fault = "the engine at" in said or "bind source path does not exist" in said or "mount" in said
    return False, ("socket: " if socket_fault else f"{helper.image}: ") + said


def choose_helper(helpers: Helpers, node: OnNode, image: str) -> Helper | str:
    """The helper for `node`, or why there is none. On the source the image itself comes first (it is there),
    on a target its drifted copy if any."""
    socket, why = engine_socket(context_endpoint(node.docker.context))
    if socket is None:
        return why
    local, ran = _local_images(node)
    tried = candidates(image, local, ran)
    if not tried:
        return "it has no image to run a helper"
    failures = []
    for name in tried:
        helper = Helper(node, name, socket)
        ok, why = probe(helpers, helper)
        if ok:
            return helper
        if why.startswith("socket: "):
            return f"a helper cannot use its engine socket {socket}: {why.removeprefix('socket: ')}"
        failures.append(why)
    return f"no image with python3 to run a helper (tried {', '.join(tried)}: {failures[-1]})"


# --- the chain ---------------------------------------------------------------------------------------------

def leg_error(returncode: int, last: dict[str, object], stderr: str, upstream: str | None,
              send_error: str | None, listened: bool = True) -> str | None:
    """One receiver's error from its exit and its last JSON line (None: loaded). A receiver downstream of a
    broken link failed because of it, and says so rather than repeating a cut-stream message."""
    if returncode == 0 and last.get("done") and not last.get("error"):
        return None
    if last.get("done") and last.get("error"):
        return f"docker load: {last['error']}"
    if not listened:  # it failed on its own before any stream: the others' errors follow from its
        return last_line(stderr) or f"helper exited {returncode}"
    if send_error:
        return f"the source could not send: {send_error}"
    if upstream:
        return f"the stream from {upstream} broke"
    return last_line(stderr) or f"helper exited {returncode}"


def chain(helpers: Helpers, source: Helper, targets: list[Helper], image: str, port: int) -> dict[str, Copied]:
    """Stream the image from source through every target in turn."""
    procs: list[Proc] = []
    threads = []
    for i, target in enumerate(targets):
        nxt = targets[i + 1].node.node.address if i + 1 < len(targets) else None
        args = ["image-recv", SOCKET_IN_HELPER, target.node.node.address, str(port),
                *([nxt, str(port)] if nxt else [])]
        proc = Proc(target.node, subprocess.Popen(helper_command(helpers, target, "image-recv", *args),
                                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                   stdin=subprocess.DEVNULL))
        procs.append(proc)
        threads.append(follow(proc, lambda line: None))
    sender = Proc(source.node, subprocess.Popen(
        helper_command(helpers, source, "image-send", "image-send", SOCKET_IN_HELPER, image,
                       targets[0].node.node.address, str(port)),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    threads.append(follow(sender, lambda line: None))
    sender.popen.wait()
    if sender.popen.returncode != 0:
        time.sleep(1)  # a source that cannot send leaves the receivers waiting for a stream that will not come
        helpers.remove_all()
    for proc in procs:
        proc.popen.wait()
    for thread in threads:
        thread.join(timeout=10)
    send_error = last_line(sender.stderr) if sender.popen.returncode != 0 else None
    results: dict[str, Copied] = {}
    upstream: str | None = None
    how = f"copied from {source.node.name} node to node"
    for proc, target in zip(procs, targets):
        error = leg_error(proc.popen.returncode or 0, proc.last, proc.stderr, upstream, send_error, proc.listened)
        results[target.node.name] = Copied(f"{how} (helper image {target.image})", error,
                                           int(str(proc.last.get("got", 0))), float(str(proc.last.get("seconds", 0))))
        if error and not proc.last.get("done") or proc.last.get("forward_error"):
            upstream = upstream or target.node.name
    return results


# --- the whole copy ----------------------------------------------------------------------------------------

def copy_image(source: Target, targets: list[Target], image: str, port: int) -> dict[str, Copied]:
    """The image from source to every target: node to node where both ends can run a helper, through this
    machine for the others and for any node-to-node copy that failed. Any exception (Ctrl-C too) removes every
    helper container before it goes on up."""
    with Helpers() as helpers:
        return _copy(helpers, source, targets, image, port)


def _copy(helpers: Helpers, source: Target, targets: list[Target], image: str, port: int) -> dict[str, Copied]:
    found = each([source, *targets], lambda t: choose_helper(helpers, t, image))
    chosen = {n: h if isinstance(h, (Helper, str)) else f"choosing a helper failed: {reason(h)}"
              for n, h in found.items()}
    sender = chosen[source.name]
    if isinstance(sender, str):
        why = {t.name: f"{source.name} cannot send node to node: {sender}" for t in targets}
        return through_here(source, targets, image, why)
    legs = [h for t in targets if isinstance(h := chosen[t.name], Helper)]
    why = {t.name: f"{t.name} cannot receive node to node: {w}" for t in targets if isinstance(w := chosen[t.name], str)}
    results: dict[str, Copied] = {}

    def meanwhile() -> None:
        try:
            results.update(through_here(source, [t for t in targets if t.name in why], image, why))
        except Exception as exc:  # noqa: BLE001 - each such target is reported failed, the chain goes on
            results.update({n: Copied(f"copied from {source.name} through this machine ({w})", reason(exc))
                            for n, w in why.items()})
    # The targets that must go through this machine do so while the chain runs: the source serves both.
    side = threading.Thread(target=meanwhile, daemon=True)
    if why:
        side.start()
    done = chain(helpers, sender, legs, image, port) if legs else {}
    if why:
        side.join()
    failed = {n: f"node to node failed: {c.error}" for n, c in done.items() if c.error}
    results.update({n: c for n, c in done.items() if not c.error})
    if failed:
        try:
            results.update(through_here(source, [t for t in targets if t.name in failed], image, failed))
        except Exception as exc:  # noqa: BLE001 - reported per target, like the side path above
            results.update({n: Copied(f"copied from {source.name} through this machine ({w})", reason(exc))
                            for n, w in failed.items()})
    return results


def through_here(source: Target, targets: list[Target], image: str, why: dict[str, str]) -> dict[str, Copied]:
    """The fallback: one `docker save` read here once, fanned out to every target's `docker load`."""
    if not targets:
        return {}
    total = [0]
    began = time.monotonic()
    errors = fan_out(source, targets, image, COPY_TIMEOUT, lambda n: total.__setitem__(0, total[0] + n))
    took = time.monotonic() - began
    return {t.name: Copied(f"copied from {source.name} through this machine ({why[t.name]})", errors[t.name],
                           total[0], took) for t in targets}

