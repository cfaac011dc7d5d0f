"""The rank's own words in a generated service: its entrypoint without the group watch in front of it, asserting
the watch is there exactly where the service's restart policy says the group restarts (restart = "group")."""

from __future__ import annotations

WATCH = ["python3", "/opt/recipegen/group-watch.py"]


def watched(service: dict) -> bool:
    """The group restarts (a Compose service's `restart: on-failure`, a Swarm service's restart condition): then
    every rank must run under the watch, whatever runs after it (the engine, the launcher, `sh -c` on Swarm)."""
    condition = service.get("deploy", {}).get("restart_policy", {}).get("condition")
    return service.get("restart") == "on-failure" or condition == "on-failure"


def without_watch(words: list[str], watch: bool = True) -> list[str]:
    """`python3 /opt/recipegen/group-watch.py --rank ... -- REST` -> REST, asserting the watch is there (watch) or
    not. The watch's own options never hold `--`, so the first one ends them."""
    if not watch:
        assert words[:2] != WATCH, f"a group watch where the group does not restart: {words[:4]}"
        return words
    assert words[:2] == WATCH and "--" in words, f"no group watch in front of {words[:4]}"
    return words[words.index("--") + 1:]


def service_argv(service: dict) -> list[str]:
    """What the rank runs after its watch: entrypoint + command (an image's own ENTRYPOINT aside)."""
    return without_watch([*(service.get("entrypoint") or []), *(service.get("command") or [])], watched(service))
