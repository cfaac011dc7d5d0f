"""Shared test setup: the lab plugin (a real multi-node Docker lab) and the golden-file switch."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["lab.plugin"]

ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true",
                     help="Rewrite the expected files of the golden tests from the current compiler output.")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return request.config.getoption("--update-golden")


@pytest.fixture
def repo_root() -> Path:
    return ROOT
