"""Stand-in for the `ray` package, as far as launch scripts and vLLM's Ray executor use it:

    import ray
    ray.init(address="auto")   # or "HOST:PORT", or nothing
    print(ray.nodes())         # [{"NodeID", "Alive", "NodeManagerAddress", ...}, ...] one per node
    ray.shutdown()

ray.init resolves its address like real Ray: an explicit HOST:PORT; else RAY_ADDRESS; else the
cluster last started on this machine (/tmp/ray/ray_current_cluster, written by `ray start --head`);
else a new local cluster of this node alone, except for address="auto", which raises ConnectionError.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from ray import util
from ray._cluster import CURRENT_CLUSTER, node_info, request, start_worker

__all__ = ["init", "is_initialized", "nodes", "shutdown", "util"]
__version__ = "0.0.0+recipegen.lab"

_LOCAL = "local"
_address: str | None = None  # HOST:PORT of the head, _LOCAL, or None before init


def init(address: str | None = None, **_ignored: Any) -> dict[str, str]:
    global _address
    if _address is not None:
        return {"gcs_address": _address}
    found = address if address not in (None, "auto") else (
        os.environ.get("RAY_ADDRESS") or (CURRENT_CLUSTER.read_text().strip() if CURRENT_CLUSTER.exists() else ""))
    if not found and address == "auto":
        raise ConnectionError("Could not find any running Ray instance. Please specify the one to connect to by "
                              "setting `--address` flag or `RAY_ADDRESS` environment variable.")
    if found and found != _LOCAL:
        try:
            request(found, {"op": "nodes"}, timeout=10)
        except OSError as err:
            raise ConnectionError(f"cannot reach the Ray cluster at {found}: {err}") from None
    _address = found or _LOCAL
    return {"gcs_address": _address}


def is_initialized() -> bool:
    return _address is not None


def shutdown() -> None:
    global _address
    _address = None


def nodes() -> list[dict[str, Any]]:
    """One entry per node that joined, the head included; "Alive" false once a node is gone."""
    if _address is None:
        raise RuntimeError("Ray has not been started yet. You can start Ray with 'ray.init()'.")
    if _address == _LOCAL:
        return [node_info(_LOCAL, util.get_node_ip_address(), socket.gethostname(), 1.0, True)]
    return list(request(_address, {"op": "nodes"})["nodes"])


def _lab_start_worker(node_id: str, env: dict[str, str], rank: int) -> dict[str, str]:
    """Start a worker process on a node with `env` applied over its raylet's environment, as vLLM's
    Ray executor does with its actors (the lab's stand-in for actor creation + update_environment_variables)."""
    if _address == _LOCAL:
        return start_worker(env, rank)
    return dict(request(str(_address), {"op": "start_worker", "node_id": node_id, "env": env, "rank": rank})["env"])

