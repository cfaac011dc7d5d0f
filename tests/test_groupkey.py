"""The group's key (generator/deploy/groupkey.py): one per recipe, the same at every `up` from the same user, from a
secret that is its owner's only, and never in a generated file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from generator.deploy.groupkey import group_key_env, secret_file
from generator.plan.types import GROUP_KEY_ENV


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv(GROUP_KEY_ENV, raising=False)
    monkeypatch.delenv("RECIPEGEN_GROUP_SECRET", raising=False)


def test_one_key_per_recipe_the_same_at_every_up():
    first, again, other = group_key_env("r1"), group_key_env("r1"), group_key_env("r2")
    assert first == again and first[GROUP_KEY_ENV] != other[GROUP_KEY_ENV]
    assert len(first[GROUP_KEY_ENV]) == 64
    info = os.stat(secret_file())
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert first[GROUP_KEY_ENV] not in secret_file().read_text()  # derived, not the secret itself
    assert [p.name for p in secret_file().parent.iterdir()] == ["group-secret"]  # nothing left aside


def test_a_teams_secret_or_key_from_the_shell_wins(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("RECIPEGEN_GROUP_SECRET", "team")
    shared = group_key_env("r1")
    assert not secret_file().exists()  # no file made when the shell gives the secret
    monkeypatch.setenv(GROUP_KEY_ENV, "given")
    assert group_key_env("r1") == {GROUP_KEY_ENV: "given"} != shared


def test_no_home_to_write_means_no_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(blocked))  # a file where the folder would go
    assert group_key_env("r1") == {}
