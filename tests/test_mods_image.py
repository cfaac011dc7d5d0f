"""mods_transport: which way a recipe's mods travel (inline in the compose files, or in an image built from
docker_image), and the refusals in one line at the recipe's `mods` (generator/resolve/mods.py). The lab proof
is tests/test_mods_image_lab.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from generator.cli import main
from helpers.modsimage import CLUSTER, RECIPE, ROOT, SMALL, build, compose, project  # noqa: F401 - moved to tests/helpers/


BINARY = {"recipes/r/mods/m/run.sh": b"#!/bin/sh\n", "recipes/r/mods/m/w.bin": b"\xff\xfe\x00" * 10}


def test_a_small_text_mod_stays_inline_under_auto(tmp_path, monkeypatch):
    code, output = build(project(tmp_path, SMALL), monkeypatch)
    assert code == 0, output
    assert "echo hi" in compose(tmp_path) and "dockerfile_inline" not in compose(tmp_path)


def test_auto_carries_a_binary_mod_in_an_image(tmp_path, monkeypatch):
    code, output = build(project(tmp_path, BINARY), monkeypatch)
    assert code == 0, output
    text = compose(tmp_path)
    assert "dockerfile_inline" in text and "COPY m /workspace/mods/m\n" in text and "pull_policy: never" in text
    assert 'context: "../../../recipes/r/mods"' in text


def test_inline_refuses_what_it_cannot_carry_naming_the_key_to_set(tmp_path, monkeypatch):
    code, output = build(project(tmp_path, BINARY, extra='mods_transport = "inline"'), monkeypatch)
    assert code == 1
    line = output.strip().splitlines()[-1]
    assert line.startswith("recipes/r/recipe.toml:6:") and "w.bin' is not UTF-8 text" in line
    assert 'set mods_transport = "image"' in line
    assert not (tmp_path / "out").exists()


def test_the_tag_follows_every_mod_byte_and_the_base_image(tmp_path, monkeypatch):
    root = project(tmp_path, SMALL, extra='mods_transport = "image"')
    assert build(root, monkeypatch)[0] == 0
    first = compose(root)
    (root / "recipes" / "r" / "mods" / "m" / "run.sh").write_bytes(b"#!/bin/sh\necho hi!\n")
    assert build(root, monkeypatch)[0] == 0
    second = compose(root)
    recipe = root / "recipes" / "r" / "recipe.toml"
    recipe.write_text(recipe.read_text().replace("25.10-py3", "25.11-py3"))
    assert build(root, monkeypatch)[0] == 0
    tags = [next(line for line in text.splitlines() if "image:" in line) for text in (first, second, compose(root))]
    assert len(set(tags)) == 3, tags


@pytest.mark.parametrize("extra,files,mods,message", [
    ('mods_transport = "image"\ndocker_image_dir = "img"', {**SMALL, "recipes/r/img/Dockerfile": b"FROM x\n"},
     '["mods/m"]', "cannot be combined with docker_image_dir"),
    ('mods_transport = "image"', {**SMALL, "mods/n/run.sh": b"#!/bin/sh\n"}, '["mods/m", "n"]',
     "must sit in one folder"),
])
def test_an_image_the_compose_file_cannot_build_is_refused_at_mods(tmp_path, monkeypatch, extra, files, mods,
                                                                    message):
    code, output = build(project(tmp_path, files, mods=mods, extra=extra), monkeypatch)
    assert code == 1 and message in output and "recipes/r/recipe.toml:6:" in output, output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("local", [True, False])
def test_swarm_never_asks_a_registry_for_an_image_made_on_the_nodes(local, monkeypatch):
    """`stack deploy` resolves each image's digest at a registry by default: for the mods' image (or a build
    context's) a same-named image there could run instead of the one `recipegen images` made on the nodes."""
    from types import SimpleNamespace

    from generator.deploy.backends.swarm import SwarmBackend

    calls: list[tuple[str, ...]] = []
    manager = SimpleNamespace(run=lambda *args, timeout, env=None: calls.append(args) or "")
    monkeypatch.setattr(SwarmBackend, "manager", property(lambda self: manager))
    dep = SimpleNamespace(plan=SimpleNamespace(head=SimpleNamespace(local_image=local)), stack_file=Path("s.yaml"),
                          project="r", targets=[SimpleNamespace(name="spark1")])
    assert [o.ok for o in SwarmBackend(None).start(dep)] == [True]  # type: ignore[arg-type]
    [args] = calls
    assert args[3:5] == ("--resolve-image", "never") if local else "--resolve-image" not in args


@pytest.mark.parametrize("extra_file, message", [
    ("recipes/r/mods/m/__pycache__/x.pyc", "holds '__pycache__', which recipegen does not read but the image's COPY"),
    (None, "is a symlink, which the image's COPY would carry as a link"),
])
def test_the_image_holds_exactly_the_files_recipegen_read(tmp_path, monkeypatch, extra_file, message):
    """COPY takes the folder as it is: a folder recipegen skips, or a link (which may dangle in the container),
    would put into the image what the tag does not hash. Inline, the same mod travels as the files read."""
    files = dict(SMALL, **({extra_file: b"\x00"} if extra_file else {"recipes/r/mods/m/data.txt": b"x\n"}))
    root = project(tmp_path, files, extra='mods_transport = "image"')
    if extra_file is None:
        (root / "recipes" / "r" / "mods" / "m" / "link.txt").symlink_to(root / "recipes" / "r" / "mods" / "m" / "data.txt")
    code, output = build(root, monkeypatch)
    assert code == 1 and message in output and "recipes/r/recipe.toml:6:" in output, output
    assert not (root / "out").exists()
