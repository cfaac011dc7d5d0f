"""Compiled templates are kept between runs (render._CompiledTemplates): loaded when the source and every
setting the compiled code depends on match, compiled afresh otherwise, and never trusted when damaged."""

from __future__ import annotations

import importlib
import marshal
import sys
import tempfile
import types
from pathlib import Path

import jinja2
import pytest
from jinja2.bccache import bc_magic

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


def _valid_header() -> bytes:
    """Jinja's magic and the pickled checksum of _ulimits.j2's source: what an entry starts with when only its
    body is damaged."""
    import pickle

    source = render._template_source("_ulimits.j2")[0]
    return bc_magic + pickle.dumps(render._environment().bytecode_cache.get_source_checksum(source), 2)


@pytest.mark.parametrize("damage", [
    pytest.param(lambda: b"", id="empty"),
    pytest.param(lambda: b"j2\x00garbage", id="no-magic"),
    pytest.param(lambda: b"\x00" * 64, id="zeros"),
    pytest.param(lambda: bc_magic + b"junk", id="magic-then-junk"),  # pickle: UnpicklingError
    pytest.param(lambda: bc_magic + b"\x80\x04junk", id="magic-then-bad-pickle"),
    pytest.param(lambda: _valid_header(), id="no-code"),  # marshal: EOFError
    pytest.param(lambda: _valid_header() + b"\xff\x00", id="bad-marshal"),
    pytest.param(lambda: _valid_header() + marshal.dumps(42), id="not-code"),  # would fail in exec()
])
def test_a_damaged_entry_is_compiled_afresh(cache_dir: Path, damage):
    first = _fresh_render()
    (entry,) = _cached(cache_dir)
    entry.write_bytes(damage())
    assert _fresh_render() == first
    assert entry.read_bytes().startswith(_valid_header())  # written again, whole


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


def _render_with(filters: dict, source: str) -> tuple[str, object]:
    env = render.make_environment(str, filters)
    env.loader = jinja2.DictLoader({"t.j2": source})
    return env.get_template("t.j2").render(), env.bytecode_cache


def test_an_edited_filter_is_never_run_from_the_cache(cache_dir: Path, tmp_path: Path, monkeypatch, request):
    # Jinja runs a filter on a constant while compiling: `{{ "a" | shout }}` compiles to "A". The key holds the
    # text of the module defining each filter, so an edit to it cannot leave the old result baked in.
    module = tmp_path / "made_up_filters.py"
    module.write_text("def shout(value):\n    return value.upper()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    request.addfinalizer(lambda: sys.modules.pop("made_up_filters", None))
    made_up_filters = importlib.import_module("made_up_filters")
    first, cache = _render_with({"shout": made_up_filters.shout}, '{{ "a" | shout }}')
    assert first == "A" and isinstance(cache, render._CompiledTemplates) and _cached(cache_dir)
    module.write_text("def shout(value):\n    return value + '!'\n")
    importlib.reload(made_up_filters)
    assert _render_with({"shout": made_up_filters.shout}, '{{ "a" | shout }}')[0] == "a!"


def test_a_filter_whose_module_cannot_be_read_turns_the_cache_off(cache_dir: Path, monkeypatch):
    made_up = types.ModuleType("made_up_without_file")  # as from a zip or built at run time: no text to key by
    exec("def shout(value):\n    return value.upper()\n", made_up.__dict__)
    monkeypatch.setitem(sys.modules, "made_up_without_file", made_up)
    rendered, cache = _render_with({"shout": made_up.shout}, '{{ "a" | shout }}')
    assert rendered == "A" and cache is None and not _cached(cache_dir)


def test_another_finalize_from_the_same_module_is_another_key(cache_dir: Path):
    # Jinja applies finalize to constant output while compiling: the two must never share compiled code.
    quoted = render.make_environment(render.yaml_scalar, {}).bytecode_cache
    worded = render.make_environment(render.shell_word, {}).bytecode_cache
    assert isinstance(quoted, render._CompiledTemplates) and isinstance(worded, render._CompiledTemplates)
    assert quoted.get_cache_key("t.j2") != worded.get_cache_key("t.j2")
