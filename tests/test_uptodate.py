"""A no-change `build` and `build --check` compile nothing (generator/write/uptodate.py), and anything that could
change the output makes them compile again: an input, a template, the package's code, out/ itself, a model folder
the fit rules read. The fast path is seen by making the compile fail: a run that does not compile cannot fail.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import generator.build
from generator.diagnostics import Diagnostic, RecipegenError
from generator.write import uptodate
from helpers.golden import recipegen, write_project
from helpers.routerproject import CLUSTER, recipe, router_table


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path / "p", CLUSTER + router_table(), {
        "one": recipe("org/one", "a", "--served-model-name", "one"),
        "two": recipe("org/two", "b", "--bogus-flag", "1")})  # a warning, said again by the fast path


@pytest.fixture
def no_compile(monkeypatch: pytest.MonkeyPatch):
    """From now on a compile fails: a command that succeeds did not compile."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise RecipegenError(Diagnostic("compile", None, None, None, "compiled"))

    def arm() -> None:
        monkeypatch.setattr(generator.build, "compile_recipes", refuse)
    return arm


def test_a_no_change_build_and_check_compile_nothing_and_say_the_same(project: Path, no_compile):
    first = recipegen(project, "build")
    assert first.exit_code == 0, first.output
    warning = next(line for line in first.stderr.splitlines() if "--bogus-flag" in line)
    no_compile()
    again = recipegen(project, "build")
    assert again.exit_code == 0, again.output
    assert again.stdout.endswith("files for 2 recipe(s), 0 changed\n") and warning in again.stderr
    check = recipegen(project, "build", "--check")
    assert check.exit_code == 0 and "up to date" in check.stdout, check.output


@pytest.mark.parametrize("change", ["recipe", "new recipe file", "cluster", "edited output", "same-size edit",
                                   "stray file", "removed output", "strict", "another out"])
def test_any_change_compiles_again(project: Path, no_compile, change: str):
    assert recipegen(project, "build").exit_code == 0
    args = ["build"]
    compose = project / "out" / "one" / "a" / "compose.yaml"
    if change == "recipe":
        (project / "recipes" / "one" / "recipe.toml").write_text(recipe("org/one", "a", "--served-model-name", "x"))
    elif change == "new recipe file":
        (project / "recipes" / "one" / "notes.txt").write_text("a mod or a Dockerfile could read this")
    elif change == "cluster":
        (project / "cluster.toml").write_text((project / "cluster.toml").read_text() + "\n# a comment\n")
    elif change == "edited output":
        compose.write_text(compose.read_text() + "# mine\n")
    elif change == "same-size edit":  # the same size and mtime: only the ctime tells
        info = compose.stat()
        text = compose.read_text()
        compose.write_text(text.replace("name: one", "name: eno", 1))
        os.utime(compose, ns=(info.st_atime_ns, info.st_mtime_ns))
        assert compose.stat().st_size == info.st_size
    elif change == "stray file":
        (project / "out" / "one" / "extra.yaml").write_text("x")
    elif change == "removed output":
        shutil.rmtree(project / "out" / "two")
    elif change == "strict":
        args.append("--strict")
    elif change == "another out":
        args += ["--out", "elsewhere"]
    no_compile()
    result = recipegen(project, *args)
    assert result.exit_code == 1 and "compiled" in result.output, result.output


def test_a_changed_template_or_package_file_compiles_again(project: Path, no_compile, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch):
    """The digest reads templates/ and schema/ where the package finds them, and the package's files by stat."""
    root = project
    cluster = project / "cluster.toml"
    templates = tmp_path / "templates"
    shutil.copytree(Path(generator.__file__).parent.parent / "templates", templates)
    package = tmp_path / "generator"
    package.mkdir()
    (package / "x.py").write_text("A = 1\n")
    monkeypatch.setattr(uptodate, "_data_dir", lambda name: templates if name == "templates" else templates)
    monkeypatch.setattr(uptodate, "PACKAGE", package)
    before = uptodate.inputs_digest(root, cluster)
    assert uptodate.inputs_digest(root, cluster) == before
    (templates / "haproxy.cfg.j2").write_text((templates / "haproxy.cfg.j2").read_text() + "\n")
    after_template = uptodate.inputs_digest(root, cluster)
    assert after_template != before
    (package / "x.py").write_text("A = 2\n")
    assert uptodate.inputs_digest(root, cluster) != after_template


def test_a_model_folder_appearing_in_the_cache_compiles_again(project: Path, no_compile, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    """The fit rules read the model's folder in the Hugging Face cache: a download changes what they say."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    assert recipegen(project, "build").exit_code == 0
    (cache / "models--org--one" / "snapshots" / "abc").mkdir(parents=True)
    (cache / "models--org--one" / "snapshots" / "abc" / "config.json").write_text("{}")
    no_compile()
    result = recipegen(project, "build")
    assert result.exit_code == 1 and "compiled" in result.output, result.output


def test_the_record_folder_of_another_user_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(uptodate.tempfile, "gettempdir", lambda: str(tmp_path))
    folder = tmp_path / f"recipegen-builds-{os.getuid()}"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)  # writable by anyone: a record there could be anyone's
    assert uptodate._folder() is None


def test_a_same_tick_rewrite_that_keeps_every_stat_is_caught_by_content(project: Path, no_compile,
                                                                        monkeypatch: pytest.MonkeyPatch):
    """File times come from a coarse clock: a same-size rewrite in the tick the build wrote it keeps every stat.
    Files that new are recorded by content too, so such an edit is still seen (the stats are forced equal here)."""
    assert recipegen(project, "build").exit_code == 0
    compose = project / "out" / "one" / "a" / "compose.yaml"
    seen = uptodate.out_state(project / "out")
    text = compose.read_text()
    compose.write_text(text[:-2] + ("x" if text[-2] != "x" else "y") + text[-1])
    monkeypatch.setattr(uptodate, "out_state", lambda out: dict(seen))
    no_compile()
    result = recipegen(project, "build", "--check")
    assert result.exit_code == 1 and "compiled" in result.output, result.output


def test_a_build_context_found_elsewhere_compiles_again(project: Path, no_compile):
    """`docker_image_dir` is looked for beside the recipe, under images/, then at the root: a Dockerfile appearing
    in an earlier candidate changes the files' `build:` context, so the next build compiles."""
    text = (project / "recipes" / "one" / "recipe.toml").read_text()
    (project / "recipes" / "one" / "recipe.toml").write_text(text.replace("\n", '\ndocker_image_dir = "img"\n', 1))
    (project / "img").mkdir()
    (project / "img" / "Dockerfile").write_text("FROM scratch\n")
    assert recipegen(project, "build").exit_code == 0, "built"
    (project / "images" / "img").mkdir(parents=True)
    (project / "images" / "img" / "Dockerfile").write_text("FROM scratch\n")
    no_compile()
    assert recipegen(project, "build", "--check").exit_code != 0  # it compiled (and the compile refused)
