"""The pre-commit snippet in docs/editors.md works against this repository as it is (issue 30: it named a tag,
v0.2.0, that does not exist): installed in a scratch recipes repository, `pre-commit run --all-files` passes, and
fails on a broken recipe and on a stale out/. The snippet is a `repo: local` hook running the installed
recipegen, so nothing is fetched: the run is given a dead proxy and no package index to prove it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "editors.md").read_text("utf-8")
RECIPE = ('#:schema ../../schema/recipe.schema.json\nengine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.34.0"\n'
          'model = "Qwen/Qwen3-32B"\nargs = ["--max-model-len", "32768"]\n')


def _pre_commit() -> list[str]:
    if shutil.which("pre-commit") is None:
        if os.environ.get("CI"):
            pytest.fail("`pre-commit` is not installed; CI must have it (pip install -e '.[test]')")
        pytest.skip("`pre-commit` is not installed (pip install pre-commit)")
    return [sys.executable, "-m", "pre_commit"]


def _snippet() -> dict:
    section = PAGE[PAGE.index("\n## pre-commit\n"):]
    return yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S)[1])


def test_the_snippet_runs_the_repositorys_hooks() -> None:
    """Same ids, commands and file patterns as .pre-commit-hooks.yaml: the snippet cannot drift from the hooks."""
    shipped = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text("utf-8"))}
    [repo] = _snippet()["repos"]
    assert repo["repo"] == "local"
    hooks = {h["id"]: h for h in repo["hooks"]}
    assert hooks.keys() == shipped.keys()
    for hook_id, hook in hooks.items():
        for key in ("entry", "files", "pass_filenames"):
            assert hook.get(key, True) == shipped[hook_id].get(key, True), (hook_id, key)


def _offline() -> dict[str, str]:
    dead = "http://127.0.0.1:9"  # the discard port: any attempt to fetch fails at once
    return {**os.environ, "http_proxy": dead, "https_proxy": dead, "HTTP_PROXY": dead, "HTTPS_PROXY": dead,
            "PIP_NO_INDEX": "1", "GIT_ALLOW_PROTOCOL": "file", "NO_COLOR": "1"}


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_snippet_works_in_a_scratch_recipes_repository(tmp_path: Path) -> None:
    pre_commit = _pre_commit()
    repo = tmp_path / "recipes-repo"
    (repo / "recipes" / "qwen3-32b").mkdir(parents=True)
    shutil.copy(ROOT / "cluster.toml", repo / "cluster.toml")
    shutil.copytree(ROOT / "schema", repo / "schema")
    recipe = repo / "recipes" / "qwen3-32b" / "recipe.toml"
    recipe.write_text(RECIPE, "utf-8")
    (repo / ".pre-commit-config.yaml").write_text(yaml.safe_dump(_snippet(), sort_keys=False), "utf-8")
    env = {**_offline(), "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")}
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    assert _run(["git", "init", "-q", "."], repo, env).returncode == 0
    built = _run([sys.executable, "-m", "generator", "build"], repo, env)
    assert built.returncode == 0, built.stderr
    _run(git + ["add", "-A"], repo, env)

    ok = _run(pre_commit + ["run", "--all-files"], repo, env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "recipegen validate" in ok.stdout and "Passed" in ok.stdout

    recipe.write_text(RECIPE + 'docker_imag = "typo"\n', "utf-8")
    _run(git + ["add", "-A"], repo, env)
    broken = _run(pre_commit + ["run", "--all-files"], repo, env)
    assert broken.returncode == 1 and "docker_imag" in broken.stdout, broken.stdout + broken.stderr

    recipe.write_text(RECIPE.replace("32768", "16384"), "utf-8")  # valid, but out/ was built from the old one
    _run(git + ["add", "-A"], repo, env)
    stale = _run(pre_commit + ["run", "recipegen-build-check", "--all-files"], repo, env)
    assert stale.returncode == 1, stale.stdout + stale.stderr


def test_the_repositorys_manifest_and_the_pinned_form_are_valid(tmp_path: Path) -> None:
    """The other form the page gives (this repository at a commit) is what pre-commit accepts: a full sha as
    `rev`. Installing it needs the package index, so only its configuration is checked here, offline."""
    pre_commit = _pre_commit()
    env = {**_offline(), "PRE_COMMIT_HOME": str(tmp_path / "home")}
    manifest = _run(pre_commit + ["validate-manifest", str(ROOT / ".pre-commit-hooks.yaml")], ROOT, env)
    assert manifest.returncode == 0, manifest.stdout + manifest.stderr
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{40}", sha)
    assert "`rev:` a full commit sha" in PAGE and "rev: v0.2.0" not in PAGE
    config = tmp_path / "pinned.yaml"
    config.write_text(yaml.safe_dump({"repos": [{"repo": str(ROOT), "rev": sha, "hooks": [
        {"id": "recipegen-validate"}, {"id": "recipegen-build-check"}]}]}), "utf-8")
    checked = _run(pre_commit + ["validate-config", str(config)], ROOT, env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
