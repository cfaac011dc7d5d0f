"""A tool the non-lab tests need but the README's steps do not install (haproxy, for the router run for real):
outside CI its tests skip with the reason printed, as the lab's do; under CI (`CI` set) they fail, since CI
installs it (.ci/run) and must run them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Loaded before the test modules (-p): this machine's haproxy is not found.
NO_HAPROXY = "import helpers.routerkit\nhelpers.routerkit.haproxy_binary = lambda: None\n"


def _run_router_tests(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "no_haproxy.py").write_text(NO_HAPROXY)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT / "tests"), str(ROOT)])
    if ci:
        env["CI"] = "true"
    # As the README's command runs it (two processes, -ra): the reason must reach the summary, not only a print.
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no_haproxy",
                           "tests/test_router.py", "-k", "accepts_the_config or api_key_from_the_environment"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_without_haproxy_the_router_tests_skip_with_the_reason(tmp_path: Path) -> None:
    run = _run_router_tests(tmp_path, ci=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SKIPPED" in run.stdout and "haproxy is missing: apt-get install haproxy" in run.stdout, run.stdout
    assert " skipped" in run.stdout.splitlines()[-1] and "passed" not in run.stdout.splitlines()[-1], run.stdout


def test_under_ci_a_missing_haproxy_fails(tmp_path: Path) -> None:
    run = _run_router_tests(tmp_path, ci=True)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "haproxy is missing" in run.stdout and "skipped" not in run.stdout.splitlines()[-1], run.stdout
