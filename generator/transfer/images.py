"""An image from one node to several through this machine: one `docker save` on the source, read once, fanned
out to every target's `docker load` at the same time.

The fallback of `recipegen images` (generator/transfer/image_chain.py copies node to node first): for a target
with no image of its own that runs the receiving helper (python3), a context whose engine socket cannot be
mounted (tcp://), or a node-to-node copy that failed. The save stream comes here once and is written to each target's load as it arrives (not one save per target,
which read the image N times on the source). The slowest target sets the pace; a target that fails is dropped
and the others go on.
"""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass, field
from queue import Queue
from typing import Callable

from generator.deploy.docker import DockerError
from generator.deploy.targets import Target

CHUNK = 1 << 20


@dataclass
class _Load:
    target: Target
    popen: subprocess.Popen[bytes]
    queue: Queue[bytes | None] = field(default_factory=lambda: Queue(maxsize=64))
    error: str | None = None

    def pump(self) -> None:
        """Feed this target's `docker load` from its queue (a thread each: one slow target does not stop the
        others until its queue is full)."""
        assert self.popen.stdin is not None
        while (chunk := self.queue.get()) is not None:
            if self.error is None:
                try:
                    self.popen.stdin.write(chunk)
                except (BrokenPipeError, OSError) as exc:
                    self.error = f"docker load stopped reading: {exc}"
        try:
            self.popen.stdin.close()
        except OSError:
            pass


def fan_out(source: Target, targets: list[Target], image: str, timeout: float = 3600,
            counted: Callable[[int], None] | None = None) -> dict[str, str | None]:
    """Each target's error (None: loaded); `counted` is told the size of each chunk read from the save."""
    save_cmd = source.docker.command("save", image)
    save = subprocess.Popen(save_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    loads = [_Load(t, subprocess.Popen(t.docker.command("load", "-q"), stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)) for t in targets]
    pumps = [threading.Thread(target=load.pump, daemon=True) for load in loads]
    for pump in pumps:
        pump.start()
    assert save.stdout is not None and save.stderr is not None
    try:
        while chunk := save.stdout.read(CHUNK):
            if counted:
                counted(len(chunk))
            live = [load for load in loads if load.error is None]
            if not live:
                save.kill()
                break
            for load in live:
                load.queue.put(chunk)
    finally:
        for load in loads:
            load.queue.put(None)
        for pump in pumps:
            pump.join()
        save_err = save.stderr.read().decode("utf-8", "replace")
        save.wait(timeout=60)
    results: dict[str, str | None] = {}
    for load in loads:
        load.popen.stdin = None  # closed by its pump; communicate() would flush it
        out, err = load.popen.communicate(timeout=timeout)
        if save.returncode != 0:
            results[load.target.name] = str(DockerError(save_cmd, save.returncode, "", save_err))
        elif load.popen.returncode != 0:
            results[load.target.name] = str(DockerError(load.target.docker.command("load"), load.popen.returncode,
                                                        out.decode(errors="replace"), err.decode(errors="replace")))
        else:
            results[load.target.name] = load.error
    return results
