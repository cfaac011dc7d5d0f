"""Shared by the tests: moved from tests/test_import.py, which uses them too."""

from __future__ import annotations

from pathlib import Path
from click.testing import CliRunner
from generator.cli import main

TESTS = Path(__file__).resolve().parent.parent


ROOT = TESTS.parent


PEERS = ROOT / "tests" / "peers"


def run(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
