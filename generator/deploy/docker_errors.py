"""Docker's failures, typed once: `Failure` (why a call failed) and `Refusal` (why the daemon would not start a
container), read from exit codes, inspect's empty JSON list and, where docker says nothing else, its stderr.
Nowhere else in recipegen reads docker's words."""

from __future__ import annotations

import re
from enum import Enum

from generator.diagnostics import ExternalError

_USAGE_HINT = re.compile(r"^(See '.*--help'\.?|Run '.*--help' for more information\.?)$")


class Failure(Enum):
    """Why a docker call failed, decided once, here: callers match these, never docker's words."""

    TIMEOUT = "timeout"  # no answer within the call's timeout
    NO_CLI = "no-cli"  # no docker binary on this machine
    NO_CONTEXT = "no-context"  # the context does not exist in this client's config
    NO_COMPOSE = "no-compose"  # the Compose v2 plugin is missing: docker reads `compose -f` as its own flags
    UNREACHABLE = "unreachable"  # the context exists but its daemon does not answer
    NOT_FOUND = "not-found"  # the object asked about (container, image, service, node) does not exist
    CONFLICT = "conflict"  # a name already taken on the engine (a container name is unique per engine)
    REFUSED = "refused"  # the daemon answered and said no (a container that cannot start, a bad spec ...)


# docker's exit codes carry little (1 for most errors; `docker run`: 125 daemon error, 126 cannot invoke, 127 not
# found), so the rest is read from its stderr, here and nowhere else. Order matters: first match wins.
_STDERR_KINDS: tuple[tuple[Failure, re.Pattern[str]], ...] = (
    (Failure.NO_CONTEXT, re.compile(r'context "[^"]*"(: context not found| does not exist)', re.I)),
    (Failure.NO_COMPOSE, re.compile(r"unknown shorthand flag: 'f' in -f|'compose' is not a docker command|"
                                    r"unknown command: docker compose", re.I)),
    (Failure.UNREACHABLE, re.compile(r"cannot connect to the docker daemon|error during connect|"
                                     r"connection refused|no such host|i/o timeout|dial (unix|tcp)|"
                                     r"is the docker daemon running", re.I)),
    (Failure.NOT_FOUND, re.compile(r"no such (object|container|image|service|node|task)|"
                                   r"(service|node|image) [^ ]+ not found", re.I)),
    (Failure.CONFLICT, re.compile(r"is already in use by container|Conflict\. The container name", re.I)),
)


class Refusal(Enum):
    """Why the daemon refused to start a container (a `Failure.REFUSED` of `docker run` / `compose run`)."""

    BIND_SOURCE = "bind-source"  # a bind mount's host path does not exist
    GPU_DRIVER = "gpu-driver"  # no NVIDIA runtime for a GPU device request
    CDI = "cdi"  # a CDI device the engine does not know
    ULIMIT = "ulimit"  # an rlimit above what the daemon may give
    RDMA_DEVICE = "rdma-device"  # /dev/infiniband missing
    CANNOT_EXEC = "cannot-exec"  # the entrypoint is not in the image
    OTHER = "other"


_REFUSALS: tuple[tuple[Refusal, re.Pattern[str]], ...] = (
    (Refusal.BIND_SOURCE, re.compile(r"bind source path does not exist")),
    (Refusal.GPU_DRIVER, re.compile(r"could not select device driver|nvidia-container")),
    (Refusal.CDI, re.compile(r"unresolvable CDI devices|CDI")),
    (Refusal.ULIMIT, re.compile(r"rlimit|ulimit", re.I)),
    (Refusal.RDMA_DEVICE, re.compile(r"/dev/infiniband")),
    (Refusal.CANNOT_EXEC, re.compile(r"executable file not found|no such file", re.I)),
)


def refusal(exc: DockerError) -> Refusal:
    if exc.returncode in (126, 127):  # docker run: the command cannot be invoked / is not found in the image
        return Refusal.CANNOT_EXEC
    text = " ".join((exc.stderr + " " + exc.stdout).split())
    return next((kind for kind, pattern in _REFUSALS if pattern.search(text)), Refusal.OTHER)


def bind_source(exc: DockerError) -> str:
    """The missing host path of a `Refusal.BIND_SOURCE`."""
    text = " ".join((exc.stderr or exc.stdout).split())
    return text.split("bind source path does not exist:", 1)[-1].strip().split(" ")[0]


def classify(returncode: int | None, stdout: str, stderr: str) -> Failure:
    if returncode is None:
        return Failure.TIMEOUT
    if returncode == 127 and not stderr:
        return Failure.NO_CLI
    for kind, pattern in _STDERR_KINDS:
        if pattern.search(stderr):
            return kind
    if stdout.strip() == "[]":  # `docker inspect` of nothing: an empty JSON list and exit 1
        return Failure.NOT_FOUND
    return Failure.REFUSED


class DockerError(ExternalError):
    def __init__(self, command: list[str], returncode: int | None, stdout: str, stderr: str,
                 failure: Failure | None = None):
        self.command, self.returncode, self.stdout, self.stderr = command, returncode, stdout, stderr
        self.failure = failure or classify(returncode, stdout, stderr)
        reason = "timed out" if returncode is None else f"exit {returncode}"
        super().__init__(f"{' '.join(command[:6])}{' ...' if len(command) > 6 else ''}: {reason}: {self.detail}")

    @property
    def detail(self) -> str:
        """The last line that says something: docker ends many errors with a usage hint
        ("See 'docker run --help'.", "Run 'docker COMMAND --help' for more information"), which says nothing."""
        lines = [line for line in (self.stderr or self.stdout).strip().splitlines() if line.strip()]
        said = [line for line in lines if not _USAGE_HINT.match(line.strip())]
        return (said or lines or ["no output"])[-1].strip()

    @property
    def short(self) -> str:
        """`detail`, whitespace collapsed; a long one keeps its start (what failed: "Error response from daemon:
        ...") and its end (why), joined by " ... ": cutting either loses it."""
        text = " ".join(self.detail.split())
        return text if len(text) <= 480 else f"{text[:160]} ... {text[-300:]}"
