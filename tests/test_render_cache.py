"""Compiled templates are kept between runs (render._CompiledTemplates): loaded when the source and every
setting the compiled code depends on match, compiled afresh otherwise, and never trusted when damaged."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

import generator.render.templates as render


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    render._environment.cache_clear()
    render._shell_environment.cache_clear()
    yield tmp_path
    render._environment.cache_clear()
    render._shell_environment.cache_clear()


def _cached(folder: Path) -> list[Path]:
    return sorted(folder.glob("_jinja2-cache-*/recipegen-*.cache"))


def _fresh_render() -> str:
    render._environment.cache_clear()
    env = render._environment()
    return env.get_template("_ulimits.j2").render(node={"ulimits": {"memlock": -1, "stack": 67108864}})


def test_a_second_process_loads_what_the_first_compiled(cache_dir: Path, monkeypatch):
    first = _fresh_render()
    files = _cached(cache_dir)
    assert len(files) == 1 and files[0].stat().st_size > 0
    compiled = []
    real = render._CompiledTemplates.load_bytecode

    def spy(self, bucket):
        real(self, bucket)
        compiled.append(bucket.code is not None)

    monkeypatch.setattr(render._CompiledTemplates, "load_bytecode", spy)
    assert _fresh_render() == first
    assert compiled == [True]  # loaded, not compiled again
    assert 'soft: -1' in first and 'hard: 67108864' in first


def test_other_settings_never_load_the_same_entry(cache_dir: Path):
    yaml_env = render._environment()
    shell_env = render._shell_environment()
    assert isinstance(yaml_env.bytecode_cache, render._CompiledTemplates)
    assert isinstance(shell_env.bytecode_cache, render._CompiledTemplates)
    assert yaml_env.bytecode_cache.get_cache_key("x.j2") != shell_env.bytecode_cache.get_cache_key("x.j2")


@pytest.mark.parametrize("damage", [b"", b"j2\x00garbage", b"\x00" * 64])
def test_a_damaged_entry_is_compiled_afresh(cache_dir: Path, damage: bytes):
    first = _fresh_render()
    (entry,) = _cached(cache_dir)
    entry.write_bytes(damage)
    assert _fresh_render() == first


def test_a_cache_folder_someone_else_owns_is_not_used(cache_dir: Path):
    import os

    if os.geteuid() != 0:
        pytest.skip("needs root to give the folder to another user")
    folder = cache_dir / f"_jinja2-cache-{os.getuid()}"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)  # planted by another user: its entries could run their code
    assert render._environment().bytecode_cache is None
    assert "memlock" in _fresh_render()
    assert not list(folder.iterdir())
