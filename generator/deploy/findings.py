"""One finding type for everything recipegen checks on the nodes: preflight, doctor, cluster probe, images and
swarm setup. Callers decide by `code` and `severity`, never by the message, which is for people."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Severity(Enum):
    ERROR = "error"  # stops the command: nothing starts, the check fails
    WARNING = "warning"  # works, but not as the cluster file means it
    NOTE = "note"  # worth knowing, changes nothing
    OK = "ok"  # a check that passed (doctor lists them)


@dataclass(frozen=True)
class Finding:
    node: str  # the node it is about; "" for this machine or the whole recipe
    severity: Severity
    code: str  # stable: one of the constants below, or a doctor check's name
    message: str
    fix: str = ""

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.is_error]


# --- codes --------------------------------------------------------------------------------------------------
# This machine and the backend
COMPOSE_MISSING = "compose-missing"
COMPOSE_TOO_OLD = "compose-too-old"  # the files in out/ need a newer Compose (their header says which)
ENGINE_TOO_OLD = "engine-too-old"  # a node's Engine lacks a feature its file uses
NO_MANAGER = "swarm-no-manager"
# A node's Docker context
CONTEXT_MISSING = "context-missing"
CONTEXT_UNREACHABLE = "context-unreachable"
# preflight
NODE_BUSY = "node-busy"  # another recipe's container runs there
NODE_CLAIMED = "node-claimed"  # another recipe's Swarm service is placed there
FILE_MISSING = "compose-file-missing"
IMAGE_MISSING = "image-missing"
IMAGE_WILL_BUILD = "image-will-build"
IMAGE_DIFFERS = "image-differs"
IMAGE_STALE = "image-stale"
IMAGE_UNREADABLE = "image-unreadable"
PASS_ENV_UNSET = "pass-env-unset"
MODEL_MISSING = "model-missing"
HOST_PATH_MISSING = "host-path-missing"
GPU_RUNTIME_MISSING = "gpu-runtime-missing"
CDI_MISSING = "cdi-missing"
ULIMIT_REFUSED = "ulimit-refused"
RDMA_MISSING = "rdma-missing"
TRIAL_FAILED = "trial-failed"
PORT_TAKEN = "port-taken"  # something else listens on the head's serving port
PORT_UNCHECKED = "port-unchecked"
# images
IMAGE_COPY_FAILED = "image-copy-failed"
IMAGE_BUILD_FAILED = "image-build-failed"
IMAGE_NOWHERE = "image-nowhere"
# swarm setup
SWARM_NOT_JOINED = "swarm-not-joined"
SWARM_NODE_UNKNOWN = "swarm-node-unknown"
SWARM_NO_GPU_RESOURCE = "swarm-no-gpu-resource"
# cluster probe / doctor (doctor's other codes are its checks' names: address, NCCL_SOCKET_IFNAME, reach ...)
PROBE_NO_IMAGE = "probe-no-image"
PROBE_FAILED = "probe-failed"
