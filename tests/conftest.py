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


# The `fit` rules read models' config.json from this machine's Hugging Face cache: every test runs against none
# (a cache that does not exist: the rules say nothing), so no developer's cache changes a result. The fit tests
# point HF_HUB_CACHE at tests/fixtures/hf-cache themselves.
HF_FIXTURE_CACHE = ROOT / "tests" / "fixtures" / "hf-cache" / "hub"


@pytest.fixture(autouse=True)
def _no_local_hf_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path_factory.getbasetemp() / "no-hf-cache"))
