"""The deploying machine's Docker Compose and each node's Docker Engine against what the files in out/ need
(their headers say it: generator/render/versions.py). Checked once, before anything starts: an old Compose otherwise
fails deep inside preflight's trial container with a schema message that names no version."""

from __future__ import annotations

from pathlib import Path

from generator.deploy import findings as codes
from generator.deploy.docker import DockerError, run_command
from generator.deploy.findings import Finding, Severity
from generator.render.versions import (COMPOSE_UPGRADE, ENGINE_UPGRADE, Needs, Version, most, parse_version, read_needs,
                                       shown, shown_engine)


def needs_of_files(files: list[Path]) -> Needs | None:
    """The strictest needs the files' headers state (a file that cannot be read is the caller's to report)."""
    found = []
    for file in files:
        try:
            needs = read_needs(file.read_text("utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
        if needs is not None:
            found.append(needs)
    return most(found)


def compose_version() -> Version | None:
    """This machine's `docker compose` plugin version; None when it does not say one."""
    return parse_version(run_command(["docker", "compose", "version", "--short"], timeout=20))


def compose_finding(needs: Needs | None, found: Version | None) -> Finding | None:
    """One line naming the version found, the version needed and how to upgrade; None when it suffices."""
    if needs is None or found is None or found >= needs.compose:
        return None
    return Finding("", Severity.ERROR, codes.COMPOSE_TOO_OLD,
                   f"Docker Compose {shown(found)} here, but these files need {shown(needs.compose)} or newer "
                   f"({needs.compose_why}): {COMPOSE_UPGRADE}")


def check_compose(files: list[Path]) -> Finding | None:
    """The deploying machine's Compose against the files' needs (an unreadable version is not a refusal: the
    real call will say what is wrong)."""
    needs = needs_of_files(files)
    if needs is None:
        return None
    try:
        found = compose_version()
    except DockerError:
        return None
    return compose_finding(needs, found)


def engine_finding(node: str, needs: Needs | None, server: str) -> Finding | None:
    """A node's Engine (`docker version`'s server version) against the files' needs."""
    found = parse_version(server)
    if needs is None or needs.engine is None or found is None or found >= needs.engine:
        return None
    return Finding(node, Severity.ERROR, codes.ENGINE_TOO_OLD,
                   f"Docker Engine {server.strip()} on this node, but its file needs {shown_engine(needs.engine)} or "
                   f"newer ({needs.engine_why}): {ENGINE_UPGRADE}")
