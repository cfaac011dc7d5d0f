"""The rank's own words in a generated service: its entrypoint without the group watch in front of it."""

from __future__ import annotations


def without_watch(words: list[str]) -> list[str]:
    """`python3 -c <the group watch> --rank ... -- REST` -> REST (restart = "group"); other words as they are. The
    watch's own options never hold `--`, so the first one after its code ends them."""
    if words[:2] == ["python3", "-c"] and "--" in words[3:]:
        return words[words.index("--", 3) + 1:]
    return words
