"""Shared by the tests: moved from tests/test_actions.py, which uses them too."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
import pytest
from click.testing import CliRunner
from generator.deploy import actions
from generator.deploy.backends.base import Outcome, RankState, Removal
from generator.deploy.backends.compose import rank_state
from generator.deploy.findings import Finding, Severity
from generator.deploy.targets import CompiledDeployment, Deployment, Target

TESTS = Path(__file__).resolve().parent.parent


ROOT = TESTS.parent


RECORDED = ROOT / "tests" / "fixtures" / "docker"


RECIPE = "glm-4-5-air-sglang"  # a shipped recipe on two nodes: spark1 (head), spark2


def recorded(name: str) -> dict[str, object]:
    return json.loads((RECORDED / f"{name}.json").read_text())


def answer(name: str) -> list[dict[str, object]]:
    """A recorded call's JSON output: one document, or one object a line."""
    text = str(recorded(name)["stdout"]).strip()
    return json.loads(text) if text.startswith("[") else [json.loads(line) for line in text.splitlines()]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> CompiledDeployment:
    """The shipped recipe compiled into a fresh project's out/ (no docker involved)."""
    import os

    from generator.cli import main
    from generator.cli.deploy import compiled

    project = tmp_path_factory.mktemp("project")
    shutil.copytree(ROOT / "recipes", project / "recipes")
    shutil.copy(ROOT / "cluster.toml", project / "cluster.toml")
    here = os.getcwd()
    os.chdir(project)
    try:
        assert CliRunner().invoke(main, ["build"]).exit_code == 0
        return compiled(RECIPE, None, None)
    finally:
        os.chdir(here)


def running(target: Target) -> RankState:
    return rank_state(target, "x", answer("compose-inspect-running")[0])


@dataclass
class FakeBackend:
    """The Backend protocol, scripted: what each step answers, and a log of what was asked."""

    refuse: list[Finding] = field(default_factory=list)
    start_errors: dict[str, str] = field(default_factory=dict)
    stop_errors: dict[str, str] = field(default_factory=dict)
    ranks: dict[str, object] = field(default_factory=dict)  # node -> state function
    left: dict[str, list[str]] = field(default_factory=dict)  # wait_gone's answer
    there: dict[str, set[str]] = field(default_factory=dict)  # node -> the recipe's containers on it
    calls: list[str] = field(default_factory=list)
    name: str = "fake"

    def ready(self, dep: Deployment, change: bool) -> list[Finding]:
        self.calls.append("ready")
        return self.refuse

    def preflight(self, dep: CompiledDeployment) -> list[Finding]:
        self.calls.append("preflight")
        return []

    def start(self, dep: CompiledDeployment) -> list[Outcome]:
        self.calls.append("start")
        for t in dep.targets:  # Compose leaves a running rank alone: a node with one gets nothing new
            if not self.there.get(t.name):
                self.there[t.name] = {f"new-{t.name}"}
        return [Outcome(t.name, self.start_errors.get(t.name)) for t in dep.targets]

    def existing(self, dep: Deployment) -> dict[str, frozenset[str] | None]:
        return {t.name: frozenset(self.there.get(t.name, ())) for t in dep.targets}

    def remove_new(self, dep: Deployment, before: dict[str, frozenset[str] | None]) -> list[Removal]:
        self.calls.append("remove_new")
        out = []
        for t in dep.targets:
            now = self.there.get(t.name, set())
            new = now - set(before.get(t.name) or ())
            self.there[t.name] = now - new
            out.append(Removal(t.name, tuple(sorted(new)), tuple(sorted(now - new))))
        return out

    def group(self, dep: Deployment) -> None:
        return None

    def states(self, dep: Deployment) -> list[RankState]:
        return [self.ranks.get(t.name, running)(t) for t in dep.targets]  # type: ignore[operator]

    def log_commands(self, dep: Deployment, nodes: tuple[Target, ...], follow: bool, tail: int | None
                     ) -> dict[str, list[str] | str]:
        return {t.name: [sys.executable, "-c", f"print('last words of {t.name}')"] for t in nodes}

    def stop(self, dep: Deployment) -> list[Outcome]:
        self.calls.append("stop")
        return [Outcome(t.name, self.stop_errors.get(t.name)) for t in dep.targets]

    def wait_gone(self, dep: Deployment, nodes: tuple[Target, ...], timeout: float) -> dict[str, list[str]]:
        self.calls.append("wait_gone:" + ",".join(t.name for t in nodes))
        assert timeout > 0
        return {n: c for n, c in self.left.items() if n in {t.name for t in nodes}}


def no_checks(dep: CompiledDeployment) -> list[Finding]:
    return []


def up(dep: CompiledDeployment, backend: FakeBackend, keep: bool = False, checks=no_checks) -> actions.UpResult:
    changes: list[tuple[str, str]] = []
    return actions.up(dep, backend, 5, keep, lambda node, state: changes.append((node, state)), checks)
