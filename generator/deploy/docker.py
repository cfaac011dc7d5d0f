"""A small typed layer over the docker CLI, one node (context) at a time. Every docker call recipegen makes goes
through this module, with a timeout; its failures are typed once, in docker_errors.py (`Failure`, `Refusal`).

python-on-whales' habits (one `run()` every call goes through, an error carrying the command, the exit code and
both outputs) without its dependency: measured against this runner it has no timeout on any call, drops stderr of
`run` and `load`, buffers stream stderr quadratically, leaves processes running when a `save | load` pipe breaks,
and adds 140 ms of imports (pydantic).
"""

from __future__ import annotations

import io
import json
import os
import queue
import subprocess
import tarfile
import threading
from dataclasses import dataclass
from typing import IO, Iterator

from generator.deploy.docker_errors import DockerError, Failure, Refusal, bind_source, classify, refusal

__all__ = ["COMPOSE_INSTALL", "Docker", "DockerError", "Failure", "JSONObject", "Refusal", "bind_source", "classify",
           "compose_missing", "merged_lines", "output_of", "pipe", "reason", "refusal", "run_command"]

DEFAULT_TIMEOUT = 30.0
# Where the Compose v2 CLI plugin comes from when `docker compose` is missing.
COMPOSE_INSTALL = ("install the Compose v2 CLI plugin: the docker-compose-plugin package (Docker's apt repository), "
                   "docker-compose-v2 (Debian/Ubuntu's docker.io), or the docker-compose binary saved as "
                   "~/.docker/cli-plugins/docker-compose (chmod +x)")

JSONObject = dict[str, object]


@dataclass(frozen=True)
class Docker:
    """The docker CLI bound to one context."""

    context: str

    def command(self, *args: str) -> list[str]:
        return ["docker", "--context", self.context, *args]

    def run(self, *args: str, timeout: float = DEFAULT_TIMEOUT, input: bytes | None = None,
            env: dict[str, str] | None = None) -> str:
        return run_command(self.command(*args), timeout, input, env)

    def copy_out(self, container: str, path: str, timeout: float = 30) -> bytes | None:
        """The file at `path` in `container` (running or stopped), by `docker cp` to a tar stream: no tool needed
        inside the image. None when the path is not a regular file; DockerError when docker cannot copy it
        (no such container or path, the node unreachable)."""
        stream = _run_bytes(self.command("cp", f"{container}:{path}", "-"), timeout, None, None)
        try:
            with tarfile.open(fileobj=io.BytesIO(stream)) as tar:
                member = tar.next()
                handle = tar.extractfile(member) if member is not None and member.isfile() else None
                return handle.read() if handle is not None else None
        except tarfile.TarError:
            return None

    def json(self, *args: str, timeout: float = DEFAULT_TIMEOUT) -> object:
        return json.loads(self.run(*args, timeout=timeout) or "null")

    def json_lines(self, *args: str, timeout: float = DEFAULT_TIMEOUT) -> list[JSONObject]:
        """Output of a `--format '{{json .}}'` (or `--format json`) listing: one object a line."""
        rows = [json.loads(line) for line in self.run(*args, timeout=timeout).splitlines() if line.strip()]
        return [row for row in rows if isinstance(row, dict)]

    def inspect(self, kind: str, *names: str, timeout: float = DEFAULT_TIMEOUT) -> list[JSONObject]:
        """`docker KIND inspect` (image, service, node) or `docker inspect --type KIND` (container, task) of objects
        that exist; [] when none of them does."""
        args = [kind, "inspect"] if kind in ("image", "service", "node") else ["inspect", "--type", kind]
        try:
            found = self.json(*args, *names, timeout=timeout)
        except DockerError as exc:
            if exc.failure is Failure.NOT_FOUND:
                return []
            raise
        return [item for item in found if isinstance(item, dict)] if isinstance(found, list) else []

    # --- the calls recipegen makes ------------------------------------------------------------------------

    def server_version(self, timeout: float = 10.0) -> str:
        return self.run("version", "--format", "{{.Server.Version}}", timeout=timeout).strip()

    def info(self, timeout: float = 10.0) -> JSONObject:
        found = self.json("info", "--format", "{{json .}}", timeout=timeout)
        return found if isinstance(found, dict) else {}

    def image_id(self, image: str) -> str | None:
        found = self.inspect("image", image)
        return str(found[0].get("Id")) if found else None

    def image_layers(self, image: str) -> tuple[str, ...] | None:
        """The image's layers (their content digests, base first), or None when the node has no such image."""
        found = self.inspect("image", image)
        if not found:
            return None
        rootfs = found[0].get("RootFS")
        layers = rootfs.get("Layers") if isinstance(rootfs, dict) else None
        return tuple(str(layer) for layer in layers) if isinstance(layers, list) else ()

    def containers(self, label: str, timeout: float = DEFAULT_TIMEOUT) -> list[JSONObject]:
        """Containers (running or not) carrying a label, as `docker ps` reports them."""
        return self.json_lines("ps", "-a", "--no-trunc", "--filter", f"label={label}", "--format", "{{json .}}",
                               timeout=timeout)

    def inspect_container(self, name: str) -> JSONObject | None:
        """One container's `docker inspect`, or None when there is no such container."""
        found = self.inspect("container", name)
        return found[0] if found else None

    def compose(self, file: str, *args: str, project: str | None = None, timeout: float = 600,
                env: dict[str, str] | None = None) -> str:
        head = ["compose", "-f", file] if file else ["compose"]
        if project:
            head += ["-p", project]
        return self.run(*head, *args, timeout=timeout, env=env)


def run_command(cmd: list[str], timeout: float = DEFAULT_TIMEOUT, input: bytes | None = None,
                env: dict[str, str] | None = None) -> str:
    return _text(_run_bytes(cmd, timeout, input, env))


def _run_bytes(cmd: list[str], timeout: float, input: bytes | None, env: dict[str, str] | None) -> bytes:
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=timeout, input=input,
                              env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired as exc:
        raise DockerError(cmd, None, _text(exc.stdout), _text(exc.stderr) or f"no answer within {timeout:.0f}s")
    except FileNotFoundError:
        raise DockerError(cmd, 127, "", "the docker CLI is not installed", Failure.NO_CLI) from None
    if done.returncode != 0:
        raise DockerError(cmd, done.returncode, _text(done.stdout), _text(done.stderr))
    return done.stdout


def output_of(cmd: list[str], timeout: float = 15) -> str:
    """stdout and stderr of a command that reports rather than acts (`docker logs --tail`): whatever it said,
    or why it said nothing."""
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"(no answer within {timeout:.0f}s)"
    except FileNotFoundError:
        return "(the docker CLI is not installed)"
    return (_text(done.stdout) + _text(done.stderr)).rstrip()


def compose_missing() -> str | None:
    """Why `docker compose` cannot run on this machine, or None. The plugin is client-side: without it docker
    reads `compose -f FILE` as its own flags and says "unknown shorthand flag: 'f'", which names nothing."""
    try:
        run_command(["docker", "compose", "version"], timeout=20)
    except DockerError as exc:
        if exc.failure is Failure.NO_CLI:
            return "the docker CLI is not installed here (install docker-ce-cli or docker.io)"
        if exc.failure is Failure.TIMEOUT:
            return None  # slow, not missing: the real call will say what is wrong
        return f"`docker compose` does not run here (docker says: {exc.detail}): {COMPOSE_INSTALL}"
    return None


def pipe(source: list[str], sink: list[str], timeout: float) -> None:
    """`source | sink` (docker save | docker load across contexts) with no file in between. The sink's error is
    the one to report: when it fails, the source only sees a broken pipe. On a timeout both are killed."""
    src = subprocess.Popen(source, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    src_err: list[bytes] = []
    reader = threading.Thread(target=lambda: src_err.append(_drain(src.stderr)), daemon=True)
    reader.start()
    try:
        dst = subprocess.Popen(sink, stdin=src.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        src.kill()
        raise DockerError(sink, 127, "", "the docker CLI is not installed", Failure.NO_CLI) from None
    finally:
        if src.stdout is not None:
            src.stdout.close()  # the sink holds the read end now; the source gets SIGPIPE if the sink dies
    try:
        out, err = dst.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for proc in (dst, src):
            proc.kill()
            proc.wait()
        raise DockerError(sink, None, "", f"no answer within {timeout:.0f}s (`{' '.join(source)}` stopped too)",
                          Failure.TIMEOUT) from None
    if dst.returncode != 0:
        src.kill()
        src.wait()
        raise DockerError(sink, dst.returncode, _text(out), _text(err))
    try:
        src.wait(timeout=60)
    except subprocess.TimeoutExpired:
        src.kill()
        src.wait()
    reader.join(timeout=5)
    if src.returncode != 0:
        raise DockerError(source, src.returncode, "", _text(b"".join(src_err)))


def merged_lines(commands: dict[str, list[str]]) -> Iterator[tuple[str, str]]:
    """Output lines of one long-running command per node (`docker logs -f`), as (node, line) in the order they
    arrive. The commands are killed when the reader stops (Ctrl-C, a closed pipe)."""
    lines: queue.Queue[tuple[str, str | None]] = queue.Queue()
    procs: list[subprocess.Popen[bytes]] = []

    def pump(name: str, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            lines.put((name, raw.decode("utf-8", errors="replace").rstrip("\n")))
        proc.wait()
        lines.put((name, None))

    for name, command in commands.items():
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs.append(proc)
        threading.Thread(target=pump, args=(name, proc), daemon=True).start()
    open_streams = len(procs)
    try:
        while open_streams:
            name, line = lines.get()
            if line is None:
                open_streams -= 1
            else:
                yield name, line
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()


def _drain(stream: IO[bytes] | None) -> bytes:
    return stream.read() if stream is not None else b""


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data


MISSING_CONTEXT = "missing (recipegen contexts --create)"  # as `contexts` and `ps` say it


def node_reason(context: str, exc: BaseException) -> str:
    """Why a node gave no answer, as `contexts` says it: a context that does not exist is "missing", with the
    command that makes it; anything else is docker's own line (reason)."""
    if isinstance(exc, DockerError) and exc.failure is Failure.NO_CONTEXT:
        return f"context '{context}' {MISSING_CONTEXT}"
    return f"context '{context}' does not answer: {exc.short}" if isinstance(exc, DockerError) else reason(exc)


def reason(exc: BaseException) -> str:
    """One line saying why a call failed: docker's own words (`DockerError.short`), or the exception's text."""
    return exc.short if isinstance(exc, DockerError) else str(exc) or type(exc).__name__
