"""The short-lived helper containers a transfer runs on the nodes (models, images): each `docker run` of the
transfer agent recorded so that any failure or Ctrl-C removes every one of them, and their JSON progress lines
followed as they come.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from generator.deploy.docker import DockerError
from generator.deploy.targets import OnNode
from generator.resolve.model import HF_CACHE_IN_CONTAINER
from generator.plan.types import LABEL_PREFIX, NodePlan

AGENT = (Path(__file__).parent / "agent.py").read_text("utf-8")
ROOT = HF_CACHE_IN_CONTAINER


@dataclass(frozen=True)
class Peer(OnNode):
    """A node the recipe uses, with its plan: the image its helpers run, its cache, its fabric address."""

    plan: NodePlan


def peers(nodes: tuple[NodePlan, ...]) -> list[Peer]:
    return [Peer(n.node, n) for n in nodes]


def hf_cache(target: Peer) -> str:
    for volume in target.plan.volumes:
        if volume.target == HF_CACHE_IN_CONTAINER:
            return volume.source
    raise LookupError(f"{target.name}: the plan mounts no Hugging Face cache")


class Helpers:
    """The helper containers of one run, by node, so that any failure or Ctrl-C removes every one of them."""

    def __init__(self) -> None:
        self.run_id = f"{os.getpid()}-{int(time.time())}"
        self.started: list[tuple[OnNode, str]] = []
        self.lock = threading.Lock()

    def command(self, target: Peer, role: str, *args: str, stdin: bool = False, env: tuple[str, ...] = (),
                entrypoint: str = "python3") -> list[str]:
        return self.container(target, role, target.plan.image, ("-v", f"{hf_cache(target)}:{ROOT}"), *args,
                              stdin=stdin, env=env, entrypoint=entrypoint)

    def container(self, node: OnNode, role: str, image: str, options: tuple[str, ...], *args: str,
                  stdin: bool = False, env: tuple[str, ...] = (), entrypoint: str = "python3") -> list[str]:
        """`docker run` of one helper of `image` on `node` with extra `options` (mounts); the agent's code is its
        argument when the entrypoint is python3. Every one is recorded for remove_all."""
        name = f"recipegen-{role}-{node.name}-{self.run_id}"
        with self.lock:
            self.started.append((node, name))
        env_flags = [w for n in env for w in ("-e", n)]  # by name: docker takes the value from our environment
        return node.docker.command(
            # --pull never: a node without the image says so at once (`recipegen images`), it does not start
            # pulling tens of GB for a helper
            "run", "--rm", "--pull", "never", *(["-i"] if stdin else []), "--name", name, "--label", f"{LABEL_PREFIX}.transfer=1",
            "--network", "host", *options, *env_flags, "--entrypoint", entrypoint,
            image, *(("-c", AGENT) if entrypoint == "python3" else ()), *args)

    def __enter__(self) -> Helpers:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        """Any exception (Ctrl-C too) removes every helper container on every node before it goes on up."""
        if kind is not None:
            self.remove_all()

    def remove_all(self) -> None:
        with self.lock:
            started = list(self.started)

        def remove(item: tuple[OnNode, str]) -> None:
            try:
                item[0].docker.run("rm", "-f", item[1], timeout=30)
            except DockerError:
                pass  # --rm already took it, or the node is gone: nothing more to do from here
        threads = [threading.Thread(target=remove, args=(item,)) for item in started]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


@dataclass
class Proc:
    target: OnNode
    popen: subprocess.Popen[bytes]
    last: dict[str, Any] = field(default_factory=dict)
    stderr: str = ""
    listened: bool = False  # a receiver that never listened failed on its own, whatever failed after it


def follow(proc: Proc, on_line: Callable[[dict[str, Any]], None]) -> threading.Thread:
    def read() -> None:
        assert proc.popen.stdout is not None and proc.popen.stderr is not None
        err = proc.popen.stderr
        collect = threading.Thread(target=lambda: setattr(proc, "stderr", err.read().decode(errors="replace")))
        collect.start()
        for raw in proc.popen.stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            proc.last = line
            proc.listened = proc.listened or bool(line.get("listening"))
            on_line(line)
        collect.join()
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
