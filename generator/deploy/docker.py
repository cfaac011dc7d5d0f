"""A small typed layer over the docker CLI, one node (context) at a time.

python-on-whales' habits (one `run()` every call goes through, an error carrying the command, the exit code and
both outputs) without its dependency: every call here needs a timeout, so a node that does not answer cannot hang
the others, and python-on-whales' runner has none.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass

from generator.diagnostics import ExternalError

DEFAULT_TIMEOUT = 30.0
_USAGE_HINT = re.compile(r"^(See '.*--help'\.?|Run '.*--help' for more information\.?)$")
# Where the Compose v2 CLI plugin comes from when `docker compose` is missing.
COMPOSE_INSTALL = ("install the Compose v2 CLI plugin: the docker-compose-plugin package (Docker's apt repository), "
                   "docker-compose-v2 (Debian/Ubuntu's docker.io), or the docker-compose binary saved as "
                   "~/.docker/cli-plugins/docker-compose (chmod +x)")


class DockerError(ExternalError):
    def __init__(self, command: list[str], returncode: int | None, stdout: str, stderr: str):
        self.command, self.returncode, self.stdout, self.stderr = command, returncode, stdout, stderr
        reason = "timed out" if returncode is None else f"exit {returncode}"
        super().__init__(f"{' '.join(command[:6])}{' ...' if len(command) > 6 else ''}: {reason}: {self.detail}")

    @property
    def detail(self) -> str:
        """The last line that says something: docker ends many errors with a usage hint
        ("See 'docker run --help'.", "Run 'docker COMMAND --help' for more information"), which says nothing."""
        lines = [line for line in (self.stderr or self.stdout).strip().splitlines() if line.strip()]
        said = [line for line in lines if not _USAGE_HINT.match(line.strip())]
        return (said or lines or ["no output"])[-1].strip()


@dataclass(frozen=True)
class Docker:
    """The docker CLI bound to one context."""

    context: str

    def command(self, *args: str) -> list[str]:
        return ["docker", "--context", self.context, *args]

    def run(self, *args: str, timeout: float = DEFAULT_TIMEOUT, input: bytes | None = None,
            env: dict[str, str] | None = None) -> str:
        cmd = self.command(*args)
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=timeout, input=input,
                                  env={**os.environ, **(env or {})})
        except subprocess.TimeoutExpired as exc:
            raise DockerError(cmd, None, _text(exc.stdout), _text(exc.stderr) or f"no answer within {timeout:.0f}s")
        except FileNotFoundError:
            raise DockerError(cmd, 127, "", "the docker CLI is not installed") from None
        if done.returncode != 0:
            raise DockerError(cmd, done.returncode, _text(done.stdout), _text(done.stderr))
        return _text(done.stdout)

    def json(self, *args: str, timeout: float = DEFAULT_TIMEOUT):
        return json.loads(self.run(*args, timeout=timeout) or "null")

    def json_lines(self, *args: str, timeout: float = DEFAULT_TIMEOUT) -> list[dict]:
        return [json.loads(line) for line in self.run(*args, timeout=timeout).splitlines() if line.strip()]

    # --- the calls recipegen makes ------------------------------------------------------------------------

    def server_version(self, timeout: float = 10.0) -> str:
        return self.run("version", "--format", "{{.Server.Version}}", timeout=timeout).strip()

    def info(self, timeout: float = 10.0) -> dict:
        return self.json("info", "--format", "{{json .}}", timeout=timeout)

    def image_id(self, image: str) -> str | None:
        try:
            return self.run("image", "inspect", "--format", "{{.Id}}", image).strip()
        except DockerError as exc:
            if "no such image" in exc.stderr.lower() or "no such object" in exc.stderr.lower():
                return None
            raise

    def containers(self, label: str, timeout: float = DEFAULT_TIMEOUT) -> list[dict]:
        """Containers (running or not) carrying a label, as `docker ps` reports them."""
        return self.json_lines("ps", "-a", "--no-trunc", "--filter", f"label={label}", "--format", "{{json .}}",
                               timeout=timeout)

    def inspect_container(self, name: str) -> dict | None:
        """One container's `docker inspect`, or None when there is no such container."""
        try:
            return self.json("inspect", "--type", "container", name)[0]
        except DockerError as exc:
            if "no such container" in exc.stderr.lower() or "no such object" in exc.stderr.lower():
                return None
            raise

    def logs_tail(self, container: str, lines: int = 30) -> str:
        try:
            done = subprocess.run(self.command("logs", "--tail", str(lines), container), capture_output=True,
                                  timeout=15)
            return (_text(done.stdout) + _text(done.stderr)).rstrip()
        except subprocess.TimeoutExpired:
            return "(logs did not answer within 15s)"

    def compose(self, file: str, *args: str, project: str | None = None, timeout: float = 600) -> str:
        head = ["compose", "-f", file] if file else ["compose"]
        if project:
            head += ["-p", project]
        return self.run(*head, *args, timeout=timeout)


def compose_missing() -> str | None:
    """Why `docker compose` cannot run on this machine, or None. The plugin is client-side: without it docker
    reads `compose -f FILE` as its own flags and says "unknown shorthand flag: 'f'", which names nothing."""
    try:
        done = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=20)
    except FileNotFoundError:
        return "the docker CLI is not installed here (install docker-ce-cli or docker.io)"
    except subprocess.TimeoutExpired:
        return None  # slow, not missing: the real call will say what is wrong
    if done.returncode == 0:
        return None
    said = DockerError(["docker", "compose", "version"], done.returncode, _text(done.stdout), _text(done.stderr))
    return f"`docker compose` does not run here (docker says: {said.detail}): {COMPOSE_INSTALL}"


def reason(exc: BaseException) -> str:
    """One line saying why a call failed: docker's last stderr line, or the exception's text."""
    return exc.detail if isinstance(exc, DockerError) else str(exc)


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
