"""The image fan-out without an engine: a stand-in `docker` on PATH whose `save` counts its runs and whose
`load` writes what it reads to a file per context (context `broken` stops reading after a little)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from generator.deploy.targets import Target
from generator.resolve.model import Node
from generator.transfer.images import fan_out

FAKE_DOCKER = """#!/bin/sh
ctx=$2; shift 2
case "$1" in
  save) echo run >> "$FANOUT_DIR/saves"; cat "$FANOUT_DIR/image.tar" ;;
  load) if [ "$ctx" = broken ]; then head -c 1000 > /dev/null; echo "unexpected EOF" >&2; exit 1; fi
        cat > "$FANOUT_DIR/loaded-$ctx" ;;
esac
"""


def node(name: str) -> Target:
    return Target(Node(0, name, "10.0.0.1", name, name, "root", "/root", {}), Path("compose.yaml"))


@pytest.fixture
def fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "docker"
    script.write_text(FAKE_DOCKER)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FANOUT_DIR", str(tmp_path))
    (tmp_path / "image.tar").write_bytes(os.urandom(5 << 20))
    return tmp_path


def test_one_save_reaches_every_load_whole(fake_docker: Path) -> None:
    results = fan_out(node("src"), [node("a"), node("b"), node("c")], "img:1")
    assert results == {"a": None, "b": None, "c": None}
    assert (fake_docker / "saves").read_text().count("run") == 1
    image = (fake_docker / "image.tar").read_bytes()
    for name in "abc":
        assert (fake_docker / f"loaded-{name}").read_bytes() == image


def test_a_failing_target_is_named_and_the_others_still_load(fake_docker: Path) -> None:
    results = fan_out(node("src"), [node("a"), node("broken")], "img:1")
    assert results["a"] is None
    assert results["broken"] and "unexpected EOF" in results["broken"]
    assert (fake_docker / "loaded-a").read_bytes() == (fake_docker / "image.tar").read_bytes()
