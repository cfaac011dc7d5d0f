"""What runs on a node: the probe container (`SCRIPT`, in a small image found there), the GPU trial and the memlock
trial, through the node's Docker context (`generator.deploy.docker.Docker`). No SSH: the context is the only way in.
"""

from __future__ import annotations

from typing import Any
import re
import time

from generator.deploy import findings as codes
from generator.deploy.docker import Docker, DockerError, Failure, Refusal, refusal
from generator.deploy.names import LOCK_IMAGE
from generator.cluster.probe.facts import GpuInfo, NodeFacts
from generator.cluster.probe.parse import facts_from_sections, parse_nvidia_smi, parse_sections

LABEL = "recipegen.probe=1"

# What the probe container runs: only sh builtins, cat and ls. Each section starts with a marker line. /proc/meminfo
# is the host's: Docker does not scope it to the container.
SCRIPT = r"""
s() { echo "@@recipegen:$1@@"; }
s hostname; cat /proc/sys/kernel/hostname
s net
for d in /sys/class/net/*; do for a in operstate address mtu carrier type; do
  printf '%s:' "$d/$a"; cat "$d/$a" 2>/dev/null || echo; done; done
s net_kinds
ls -d /sys/class/net/*/device /sys/class/net/*/wireless /sys/class/net/*/phy80211 /sys/class/net/*/bridge \
  /sys/class/net/*/brport 2>/dev/null
s route; cat /proc/net/route
s fib_trie; cat /proc/net/fib_trie
s ip_addr; ip -o -4 addr 2>/dev/null
s infiniband
for d in /sys/class/infiniband/*/device/net; do [ -d "$d" ] && { echo "$d:"; ls "$d"; echo; }; done
s gids
for f in /sys/class/infiniband/*/ports/*/gids/[0-9] /sys/class/infiniband/*/ports/*/gids/1[0-5] \
  /sys/class/infiniband/*/ports/*/gid_attrs/types/[0-9] /sys/class/infiniband/*/ports/*/gid_attrs/types/1[0-5]; do
  [ -e "$f" ] && { printf '%s:' "$f"; cat "$f" 2>/dev/null || echo; }; done
s limits; cat /proc/self/limits
s meminfo; cat /proc/meminfo
s end
"""
GPU_SCRIPT = ('nvidia-smi -L 2>&1 || echo "nvidia-smi: not available in this image"; '
              'echo "NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-}"')


class ProbeError(Exception):
    """A node could not be probed; the message says why, in one line, and `code` (generator.deploy.findings)
    what kind of why: the context does not answer, no image to probe in, or the probe itself failed."""

    def __init__(self, message: str, code: str = codes.PROBE_FAILED):
        super().__init__(message)
        self.code = code


def server_errors(info: object) -> str:
    """`docker info`'s ServerErrors as one line of text: Docker CLI 20.10 gives a list of strings, each ending in
    `\r\n` (newer CLIs fail the command instead)."""
    found = info.get("ServerErrors") if isinstance(info, dict) else None
    items = found if isinstance(found, list) else [found] if found else []
    return "; ".join(" ".join(str(item).split()) for item in items if str(item).strip())


_SIZE = re.compile(r"^([\d.]+)\s*([kMGT]?B)$", re.I)
_UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}


def _size(text: str) -> float:
    m = _SIZE.match(text.strip())
    return float(m.group(1)) * _UNITS[m.group(2).lower()] if m else float("inf")


def image_candidates(rows: list[dict[str, Any]]) -> list[str]:
    """Images of `docker image ls` worth running the probe in: tagged ones, smallest first."""
    found = []
    for row in rows:
        repo, tag = row.get("Repository", "<none>"), row.get("Tag", "<none>")
        if repo == "<none>" or tag == "<none>" or "hello-world" in repo or f"{repo}:{tag}" == LOCK_IMAGE:
            continue
        found.append((_size(row.get("Size", "")), f"{repo}:{tag}"))
    return [name for _, name in sorted(found)]


class Deadline:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds
        self.seconds = seconds

    def left(self, cap: float) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise ProbeError(f"no answer within {self.seconds:.0f}s", codes.CONTEXT_UNREACHABLE)
        return min(cap, left)


def error_detail(exc: DockerError) -> str:
    """Why a docker command failed, in one line (`DockerError.short`)."""
    return exc.short


def run_in(docker: Docker, image: str, script: str, deadline: Deadline, *flags: str, cap: float = 60) -> str:
    return docker.run("run", "--rm", "--pull", "never", "--label", LABEL, *flags, "--entrypoint", "sh", image,
                      "-c", script, timeout=deadline.left(cap))


def _unusable_image(exc: DockerError) -> bool:
    return refusal(exc) is Refusal.CANNOT_EXEC


def _rlimit_refused(exc: DockerError) -> bool:
    return refusal(exc) is Refusal.ULIMIT


def context_endpoint(context: str, timeout: float = 10) -> str:
    try:
        rows = Docker("default").json("context", "inspect", context, timeout=timeout)
        return str(rows[0]["Endpoints"]["docker"]["Host"])  # type: ignore[index]  # any shape error: LookupError, TypeError
    except (DockerError, LookupError, TypeError, ValueError):
        return ""


def gather(context: str, image: str | None = None, memlock: int | None = -1, gpu: str | None = "auto",
           timeout: float = 60) -> NodeFacts:
    """Read one node's facts through its context. memlock: the ulimit the facts container tries (None: none);
    gpu: "auto" (probe), "nvidia" / "cdi" (try that only) or None (skip)."""
    deadline = Deadline(timeout)
    docker = Docker(context)
    try:
        info = docker.info(timeout=deadline.left(15))
    except DockerError as exc:
        code = codes.CONTEXT_MISSING if exc.failure is Failure.NO_CONTEXT else codes.CONTEXT_UNREACHABLE
        raise ProbeError(f"context '{context}' does not answer: {error_detail(exc)}", code) from None
    if not isinstance(info, dict) or not info.get("ServerVersion"):
        raise ProbeError(f"context '{context}' does not answer: {server_errors(info) or 'no engine'}",
                         codes.CONTEXT_UNREACHABLE)
    if image:
        candidates = [image]
    else:
        try:
            candidates = image_candidates(docker.json_lines("image", "ls", "--format", "{{json .}}",
                                                            timeout=deadline.left(20)))
        except DockerError as exc:
            raise ProbeError(f"cannot list images: {error_detail(exc)}") from None
        if not candidates:
            raise ProbeError("no image on this node to run the probe in (load a small one, e.g. busybox, "
                             "or the engine image; or pass --image)", codes.PROBE_NO_IMAGE)
    output, chosen, unlimited, tried = None, None, None, []
    for candidate in candidates[:3]:
        flags = ["--network", "host"]
        try:
            if memlock is not None:
                try:
                    output = run_in(docker, candidate, SCRIPT, deadline, *flags, "--ulimit",
                                    f"memlock={memlock}:{memlock}")
                    unlimited = True
                except DockerError as exc:
                    if not _rlimit_refused(exc):
                        raise
                    unlimited = False
            if output is None:
                output = run_in(docker, candidate, SCRIPT, deadline, *flags)
            chosen = candidate
            break
        except DockerError as exc:
            tried.append(f"{candidate}: {error_detail(exc)}")
            if not _unusable_image(exc) or image:
                raise ProbeError(f"the probe container did not run in {candidate}: {error_detail(exc)}") from None
    if output is None or chosen is None:
        raise ProbeError("no image here has a shell to run the probe (" + "; ".join(tried) + "); pass --image",
                         codes.PROBE_NO_IMAGE)
    sections = parse_sections(output)
    if "end" not in sections:
        raise ProbeError(f"the probe's output in {chosen} is incomplete (did `sh` run the script?)")
    gpu_info = probe_gpu(docker, chosen, info, deadline, gpu) if gpu else None
    facts = facts_from_sections(sections, context, info, gpu_info)
    facts.image = chosen
    facts.memlock_ok = unlimited
    facts.endpoint = context_endpoint(context, timeout=deadline.left(10))
    return facts


def probe_gpu(docker: Docker, image: str, info: dict[str, Any], deadline: Deadline, mode: str = "auto") -> GpuInfo:
    """Does the engine give containers the GPU: a `--gpus all` trial (and CDI where the engine has spec dirs)."""
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    cdi_dirs = list(info.get("CDISpecDirs") or [])
    result = GpuInfo(None, runtimes=runtimes, cdi_dirs=cdi_dirs)
    tries = []
    if mode in ("auto", "nvidia"):
        tries.append(("nvidia", ["--gpus", "all"]))
    if mode == "cdi" or (mode == "auto" and cdi_dirs):
        tries.append(("cdi", ["--device", "nvidia.com/gpu=all"]))
    details = []
    for kind, flags in tries:
        try:
            out = run_in(docker, image, GPU_SCRIPT, deadline, "--network", "none", *flags, cap=60)
        except DockerError as exc:
            details.append(f"{' '.join(flags)}: {error_detail(exc)}")
            continue
        result.runtime, result.devices = kind, parse_nvidia_smi(out)
        result.detail = out.strip().splitlines()[0] if out.strip() else ""
        return result
    result.detail = "; ".join(details) or "not tried"
    return result
