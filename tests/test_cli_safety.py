"""The CLI never loses a user's file, never half-writes out/, and answers bad paths with one line and exit 1.
Found by review; each test reproduces what once went wrong."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import generator.write.output
from generator.cli import main
from helpers.clisafety import interruptible  # noqa: F401 - moved to tests/helpers/

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    shutil.copytree(ROOT / "schema", tmp_path / "schema")  # the files' #:schema directives reach it
    shutil.copy(ROOT / "cluster.toml", tmp_path / "cluster.toml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit), \
        result.output
    return result


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_build_refuses_an_out_dir_holding_the_sources(project: Path):
    before = tree(project / "recipes")
    for out in ("recipes", ".", "recipes/qwen3-coder-30b-a3b-fp8"):
        result = run("build", "--out", out)
        assert result.exit_code == 1 and "output folder" in result.stderr, result.output
    assert tree(project / "recipes") == before


def test_a_users_file_in_an_out_folder_stops_the_build_and_survives(project: Path):
    assert run("build").exit_code == 0
    notes = project / "out" / "glm-4-5-air-sglang" / "NOTES.md"
    notes.write_text("my notes")
    recipe = project / "recipes" / "glm-4-5-air-sglang" / "recipe.toml"
    recipe.write_text(recipe.read_text().replace('"--context-length", "131072"', '"--context-length", "65536"'))
    result = run("build")
    assert result.exit_code == 1
    assert "out/glm-4-5-air-sglang/NOTES.md: error: was not written by recipegen" in result.stderr
    assert notes.read_text() == "my notes"
    # a folder of someone else's where a recipe's output would go
    (project / "mine" / "qwen3-coder-30b-a3b-fp8").mkdir(parents=True)
    (project / "mine" / "qwen3-coder-30b-a3b-fp8" / "data.txt").write_text("x")
    assert run("build", "--out", "mine").exit_code == 1
    assert (project / "mine" / "qwen3-coder-30b-a3b-fp8" / "data.txt").read_text() == "x"


def test_a_recipe_named_twice_is_built_once(project: Path):
    result = run("build", "glm-4-5-air-sglang", "recipes/glm-4-5-air-sglang/", "--out", "o3")
    assert result.exit_code == 0, result.output
    built = sorted(tree(project / "o3"))
    assert f"{len(built)} files for 1 recipe(s)" in result.stdout  # and the side stacks, built from every recipe
    assert {"_router/haproxy.cfg", "_metrics/prometheus.yml"} <= set(built)  # (issue 43: out/ stays current)
    assert [p for p in built if not p.startswith(("_router/", "_metrics/"))] == [
        "glm-4-5-air-sglang/group-watch.py", "glm-4-5-air-sglang/spark1/compose.yaml",
        "glm-4-5-air-sglang/spark2/compose.yaml", "glm-4-5-air-sglang/stack.yaml"]


def test_two_recipes_with_one_id_are_an_error(project: Path, tmp_path: Path):
    other = tmp_path / "elsewhere" / "glm-4-5-air-sglang"
    shutil.copytree(project / "recipes" / "glm-4-5-air-sglang", other)
    result = run("build", "glm-4-5-air-sglang", str(other / "recipe.toml"), "--out", "o4")
    assert result.exit_code == 1 and "both would write out/glm-4-5-air-sglang" in result.stderr
    assert not (project / "o4").exists()


def test_a_failed_swap_puts_every_folder_back(project: Path, monkeypatch):
    assert run("build").exit_code == 0
    before = tree(project / "out")
    for rid in ("glm-4-5-air-sglang", "qwen3-coder-30b-a3b-fp8"):
        recipe = project / "recipes" / rid / "recipe.toml"
        recipe.write_text(recipe.read_text().replace('"--port"', '"--max-num-seqs", "4", "--port"'))
    real_replace, calls = os.replace, []

    def flaky_replace(src, dst):  # the fourth rename fails: two recipes half-way through the swap
        calls.append((src, dst))
        if len(calls) == 4:
            raise PermissionError(13, "Permission denied", str(src))
        return real_replace(src, dst)

    monkeypatch.setattr(generator.write.output.os, "replace", flaky_replace)
    result = run("build")
    assert result.exit_code == 1 and "out/ is as it was" in result.stderr
    monkeypatch.setattr(generator.write.output.os, "replace", real_replace)
    assert tree(project / "out") == before
    assert not [p for p in (project / "out").iterdir() if p.name.startswith(".recipegen")]


@pytest.mark.parametrize("args", [["build", "--out", "cluster.toml"], ["schema", "--out", "cluster.toml"],
                                  ["build", "--out", "cluster.toml/sub"]])
def test_bad_output_paths_are_one_line_errors(project: Path, args: list[str]):
    result = run(*args)
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_fifo_is_not_read(project: Path):
    os.mkfifo(project / "pipe.toml")
    result = run("validate", "--cluster", "pipe.toml", "recipes/qwen3-coder-30b-a3b-fp8")
    assert result.exit_code == 1 and "pipe.toml: error: is not a regular file" in result.stderr


def test_a_folder_named_like_a_recipe_id_does_not_hide_it(project: Path, monkeypatch):
    assert run("build").exit_code == 0
    monkeypatch.chdir(project / "out")  # out/glm-4-5-air-sglang/ is a folder without recipe.toml
    result = run("explain", "glm-4-5-air-sglang", "--node", "spark2")
    assert result.exit_code == 0, result.output
    assert "--node-rank 1" in result.stdout


def test_validate_takes_a_folder_of_recipes_and_says_when_there_is_nothing(project: Path, monkeypatch,
                                                                          tmp_path_factory):
    assert run("validate", "recipes").exit_code == 0
    (project / "recipes" / "qwen3-coder-30b-a3b-fp8" / "recipe.toml").write_text('engine = "vlm"\n')
    result = run("validate", "recipes")
    assert result.exit_code == 1 and "recipes/qwen3-coder-30b-a3b-fp8/recipe.toml" in result.stderr
    monkeypatch.chdir(tmp_path_factory.mktemp("empty"))  # no recipes/ nor cluster.toml here or above
    result = run("validate")
    assert result.exit_code == 1 and "nothing to validate" in result.stderr


@pytest.mark.parametrize("args, word", [
    ('["--api-key", "hunter2-but-long"]', "--api-key"),
    ('["--hf-token=abc123"]', "--hf-token"),
])
def test_secret_flag_values_are_refused(project: Path, args: str, word: str):
    recipe = project / "recipes" / "qwen3-coder-30b-a3b-fp8" / "recipe.toml"
    text = recipe.read_text()
    recipe.write_text(text.replace("args = [", f"args = {args[:-1]}, ", 1))
    result = run("build", "--out", "o5")
    assert result.exit_code == 1 and f"{word} looks like a secret" in result.stderr
    assert not (project / "o5").exists()


def test_down_ps_and_logs_read_out_so_a_broken_recipe_can_still_be_stopped(project: Path):
    assert run("build").exit_code == 0
    recipe = project / "recipes" / "glm-4-5-air-sglang" / "recipe.toml"
    recipe.write_text(recipe.read_text().replace('"0.80"', '"1.5"'))  # now fails the gpu-memory-range rule
    assert run("validate", str(recipe)).exit_code == 1
    result = run("ps", "glm-4-5-air-sglang")  # the contexts do not exist here: each node is reported as such
    assert "gpu-memory" not in result.output
    assert "spark1" in result.stdout and "spark2" in result.stdout and "unreachable" in result.stdout


def test_naming_nodes_sets_how_many_and_which(project: Path):
    recipe = project / "recipes" / "qwen3-coder-30b-a3b-fp8" / "recipe.toml"
    recipe.write_text(recipe.read_text().replace("required_nodes = 1\n", 'nodes = ["spark2"]\n'))
    result = run("build", "qwen3-coder-30b-a3b-fp8", "--out", "o6")
    assert result.exit_code == 0, result.output
    assert sorted(p for p in tree(project / "o6") if not p.startswith(("_router/", "_metrics/"))) == [
        "qwen3-coder-30b-a3b-fp8/group-watch.py", "qwen3-coder-30b-a3b-fp8/spark2/compose.yaml",
        "qwen3-coder-30b-a3b-fp8/stack.yaml"]
    assert 'VLLM_HOST_IP: "192.168.100.11"' in (project / "o6/qwen3-coder-30b-a3b-fp8/spark2/compose.yaml").read_text()
    recipe.write_text(recipe.read_text().replace('nodes = ["spark2"]\n', 'nodes = ["spark2"]\nrequired_nodes = 2\n'))
    result = run("build", "qwen3-coder-30b-a3b-fp8", "--out", "o7")
    assert result.exit_code == 1 and "names 1 node(s) but required_nodes is 2" in result.stderr


# --- out/ never loses a person's file: the checksum line (issue 13) ---------------------------------------------

def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("how", ["body", "first-line", "checksum-line", "appended", "no-checksum-line"])
def test_a_copied_and_edited_folder_is_never_pruned(project: Path, how: str):
    """A person copies a generated folder to start their own variant and edits it: that is their work."""
    assert run("build").exit_code == 0
    mine = project / "out" / "glm-mine"
    shutil.copytree(project / "out" / "glm-4-5-air-sglang", mine)
    edited = mine / "spark2" / "compose.yaml"
    text = edited.read_text()
    first, second, rest = text.split("\n", 2)
    edited.write_text({"body": text.replace("--context-length", "--context-len"),
                       "first-line": first.replace("spark-duo", "spark-trio") + "\n" + second + "\n" + rest,
                       "checksum-line": first + "\n" + second[:-4] + "beef\n" + rest,
                       "appended": text + "# my note\n",
                       "no-checksum-line": first + "\n" + rest}[how])
    result = run("build")
    assert result.exit_code == 1, result.output
    why = "has no recipegen-sha256" if how == "no-checksum-line" else "was edited after recipegen wrote it"
    assert f"out/glm-mine/spark2/compose.yaml: error: {why}" in result.stderr
    assert "--force" in result.stderr
    assert mine.is_dir() and edited.read_text() != text or how == "none"
    assert run("build", "--force").exit_code == 0  # the person said: discard it
    assert not mine.exists()


def test_an_unedited_copy_is_pruned_and_an_edited_generated_file_is_not_overwritten(project: Path):
    assert run("build").exit_code == 0
    shutil.copytree(project / "out" / "qwen3-coder-30b-a3b-fp8", project / "out" / "qwen-copy")
    assert run("build").exit_code == 0
    assert not (project / "out" / "qwen-copy").exists()  # nothing of anyone's was in it
    target = project / "out" / "qwen3-coder-30b-a3b-fp8" / "spark1" / "compose.yaml"
    _edit(target, "shm_size:", "shm_size:  ")
    edited = target.read_bytes()
    for args in (["build"], ["build", "qwen3-coder-30b-a3b-fp8"]):
        result = run(*args)
        assert result.exit_code == 1 and "spark1/compose.yaml: error: was edited" in result.stderr
        assert target.read_bytes() == edited
    assert run("build", "--check").exit_code == 1  # --check says it differs, and writes nothing
    assert target.read_bytes() == edited
    assert run("build", "--force").exit_code == 0 and target.read_bytes() != edited
    assert run("build", "--check").exit_code == 0


def test_every_generated_file_carries_a_checksum_of_itself(project: Path):
    from generator.write.compare import file_state

    assert run("build").exit_code == 0
    files = sorted((project / "out").rglob("*.yaml")) + [project / "out" / "_router" / "haproxy.cfg"]
    files += sorted(p for p in (project / "out" / "_metrics").rglob("*") if p.is_file() and p.suffix != ".yaml")
    router = [p for p in files if p.parent.name == "_router" or p.parent.parent.name == "_router"]
    metrics = [p for p in files if "_metrics" in p.parts]
    assert len(files) - len(metrics) == 14 and len(router) == 3  # 4 recipes (one of one node), the router's files
    # The metrics stack's: a compose file per node and the stack, Prometheus's config, its two rule files and four
    # targets, the blackbox modules, Grafana's three files (the dashboard's JSON too).
    assert len(metrics) == 14
    for path in files:
        lines = path.read_text().splitlines()
        # the contract's first line stays: generated, and from what
        made_from = ("cluster.toml: the router" if path in router else "cluster.toml: " if path in metrics
                     else "recipes/")
        assert lines[0].startswith(f"# Generated by recipegen from {made_from}"), lines[0]
        assert lines[1].startswith("# recipegen-sha256: ") and len(lines[1].split()[-1]) == 64
        assert file_state(path) == "intact"


# --- an interrupted commit is finished by the next build ----------------------------------------------------------

def _change_two_recipes(project: Path) -> None:
    for rid in ("glm-4-5-air-sglang", "qwen3-coder-30b-a3b-fp8"):
        _edit(project / "recipes" / rid / "recipe.toml", '"--port"', '"--max-num-seqs", "4", "--port"')


def _build_until_paused(project: Path, renames: int) -> subprocess.Popen:
    """A real `recipegen build` stopped after `renames` renames of its commit (the documented test hook)."""
    env = {**os.environ, "RECIPEGEN_TEST_PAUSE_COMMIT_AFTER": str(renames)}
    proc = subprocess.Popen([sys.executable, "-m", "generator", "build"], cwd=project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    line = proc.stderr.readline()
    assert "paused in commit" in line, line + proc.stderr.read()
    return proc


@pytest.mark.parametrize("renames", [1, 2, 3])
def test_a_build_killed_mid_swap_is_finished_by_the_next_one(project: Path, renames: int):
    assert run("build", "--out", "fresh-before").exit_code == 0
    assert run("build").exit_code == 0
    _change_two_recipes(project)
    assert run("build", "--out", "fresh-after").exit_code == 0
    proc = _build_until_paused(project, renames)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert (project / "out" / ".recipegen-journal.json").is_file()
    assert tree(project / "out") not in (tree(project / "fresh-after"), tree(project / "fresh-before"))

    check = run("build", "--check")
    assert check.exit_code == 1
    assert "out/.recipegen-journal.json: error: an interrupted build left out/ half-swapped" in check.stderr

    again = run("build")
    assert again.exit_code == 0, again.output
    assert "warning: finished the swap an interrupted build left half-done: glm-4-5-air-sglang, " \
           "qwen3-coder-30b-a3b-fp8" in again.stderr
    assert tree(project / "out") == tree(project / "fresh-after")
    assert not [p for p in (project / "out").iterdir() if p.name.startswith(".recipegen")]
    assert run("build", "--check").exit_code == 0


def test_ctrl_c_mid_swap_puts_out_back_as_it_was(project: Path):
    assert run("build").exit_code == 0
    before = tree(project / "out")
    _change_two_recipes(project)
    proc = _build_until_paused(project, 3)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    assert "interrupted" in proc.stderr.read()
    assert tree(project / "out") == before
    assert not [p for p in (project / "out").iterdir() if p.name.startswith(".recipegen")]


def test_leftovers_without_a_journal_are_reported_and_removed(project: Path):
    assert run("build").exit_code == 0
    staged = project / "out" / ".recipegen-staging-abc123" / "glm-4-5-air-sglang"
    staged.mkdir(parents=True)
    (staged / "stack.yaml").write_text("half")
    (project / "out" / ".recipegen-old-xyz").mkdir()
    check = run("build", "--check")
    assert check.exit_code == 1
    for name in (".recipegen-staging-abc123", ".recipegen-old-xyz"):
        assert f"out/{name}: error: left over by an interrupted build" in check.stderr
    result = run("build")
    assert result.exit_code == 0
    assert "out/.recipegen-old-xyz: warning: removed what an interrupted build left" in result.stderr
    assert not [p for p in (project / "out").iterdir() if p.name.startswith(".recipegen")]
    assert run("build", "--check").exit_code == 0


# --- build --check sees everything a build would change in out/ ---------------------------------------------------

def test_a_second_build_waits_for_the_one_swapping_out(project: Path):
    """Two builds at once: the second one neither takes the first one's swap for an interrupted build (finishing
    it, removing its staging) nor checks out/ before the first is done; it waits, then builds."""
    assert run("build").exit_code == 0
    _change_two_recipes(project)
    assert run("build", "--out", "fresh-after").exit_code == 0
    first = _build_until_paused(project, 1)
    second = subprocess.Popen([sys.executable, "-m", "generator", "build"], cwd=project, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            second.wait(timeout=5)  # held: the first one is mid-swap
    finally:
        first.send_signal(signal.SIGINT)  # the first one puts out/ back and lets go
        assert first.wait(timeout=30) == 130
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert "interrupted" not in err and "removed" not in err
    assert tree(project / "out") == tree(project / "fresh-after")
    assert not [p for p in (project / "out").iterdir() if p.name.startswith(".recipegen")]


def _stray_folder(out: Path) -> None:
    (out / "glm-4-5-air-sglang" / "spark3").mkdir()


def _nested_stray_folder(out: Path) -> None:
    (out / "qwen3-coder-30b-a3b-fp8" / "spark1" / "logs" / "old").mkdir(parents=True)


def _symlink_file(out: Path) -> None:
    target = out / "glm-4-5-air-sglang" / "spark2" / "compose.yaml"
    shutil.copy(target, out / "kept.yaml")
    target.unlink()
    target.symlink_to(out / "kept.yaml")  # same bytes through the link: only the link itself is wrong


def _generated_copy_of_a_node(out: Path) -> None:
    shutil.copytree(out / "glm-4-5-air-sglang" / "spark2", out / "glm-4-5-air-sglang" / "spark9")


@pytest.mark.parametrize("damage, path, kind", [
    (_stray_folder, "glm-4-5-air-sglang/spark3/", "an empty folder"),
    (_nested_stray_folder, "qwen3-coder-30b-a3b-fp8/spark1/logs/old/", "an empty folder"),
    (_symlink_file, "glm-4-5-air-sglang/spark2/compose.yaml", "a symlink where recipegen writes a file"),
    (_generated_copy_of_a_node, "glm-4-5-air-sglang/spark9/compose.yaml", "stale"),
])
def test_check_reports_and_build_repairs_what_the_tree_should_not_hold(project: Path, damage, path: str, kind: str):
    assert run("build").exit_code == 0
    damage(project / "out")
    check = run("build", "--check")
    assert check.exit_code == 1, check.output
    assert f"out/{path}: {kind}" in check.stderr
    result = run("build")
    assert result.exit_code == 0, result.output
    assert run("build", "--check").exit_code == 0
    assert not (project / "out" / path).is_symlink() and not (project / "out" / path.rstrip("/")).is_dir()


def test_a_stray_hand_written_file_is_reported_and_kept(project: Path):
    assert run("build").exit_code == 0
    extra = project / "out" / "glm-4-5-air-sglang" / "spark1" / ".env"
    extra.write_text("A=1\n")
    check = run("build", "--check")
    assert check.exit_code == 1 and "out/glm-4-5-air-sglang/spark1/.env: stale" in check.stderr
    result = run("build")
    assert result.exit_code == 1 and "spark1/.env: error: was not written by recipegen" in result.stderr
    assert extra.read_text() == "A=1\n"


# --- the project is found from the paths given, not from the working directory ----------------------------------

@pytest.mark.parametrize("args", [
    lambda p: ["build", str(p / "recipes" / "glm-4-5-air-sglang"), "--cluster", str(p / "cluster.toml")],
    lambda p: ["build", str(p / "recipes" / "glm-4-5-air-sglang" / "recipe.toml")],
    lambda p: ["build", str(p / "recipes" / "glm-4-5-air-sglang") + "/"],
    lambda p: ["build", "--cluster", str(p / "cluster.toml")],
], ids=["folder-and-cluster", "file", "folder-slash", "cluster-only"])
def test_building_from_outside_the_project_writes_what_building_inside_does(project: Path, args, tmp_path_factory,
                                                                            monkeypatch):
    assert run("build", "--out", "inside").exit_code == 0
    inside = {k: v for k, v in tree(project / "inside").items()}
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    result = run(*args(project))
    assert result.exit_code == 0, result.output
    built = tree(project / "out")  # the project's out/, not the working directory's
    assert built and all(built[k] == inside[k] for k in built), "headers differ when built from elsewhere"
    assert not (Path.cwd() / "out").exists()


def test_a_recipe_id_with_a_foreign_cluster_uses_the_working_directorys_project(project: Path, tmp_path_factory):
    lab = tmp_path_factory.mktemp("lab") / "lab.toml"
    shutil.copy(project / "cluster.toml", lab)
    result = run("build", "glm-4-5-air-sglang", "--cluster", str(lab))
    assert result.exit_code == 0, result.output
    assert (project / "out" / "glm-4-5-air-sglang" / "stack.yaml").is_file()


@pytest.mark.parametrize("where", ["../../../context-outside", "/abs-outside"])
def test_a_build_context_outside_the_project_is_refused(project: Path, tmp_path_factory, where: str):
    outside = tmp_path_factory.mktemp("ctx") / "context-outside"
    outside.mkdir()
    (outside / "Dockerfile").write_text("FROM scratch\n")
    recipe = project / "recipes" / "qwen3-coder-30b-a3b-fp8"
    value = os.path.relpath(outside, recipe) if where.startswith("..") else str(outside)
    _edit(recipe / "recipe.toml", "\nmodel = ", f'\ndocker_image_dir = "{value}"\nmodel = ')
    result = run("build", "qwen3-coder-30b-a3b-fp8")
    assert result.exit_code == 1
    line = [ln for ln in result.stderr.splitlines() if "docker_image_dir" in ln]
    assert line and line[0].startswith("recipes/qwen3-coder-30b-a3b-fp8/recipe.toml:"), result.stderr
    assert "is outside the project" in line[0]
    assert not (project / "out").exists()


# --- recipe discovery says what it skips -------------------------------------------------------------------------

def _misnamed(name: str):
    def make(recipes: Path) -> Path:
        (recipes / "qwen3-coder-30b-a3b-fp8" / "recipe.toml").rename(recipes / "qwen3-coder-30b-a3b-fp8" / name)
        return recipes / "qwen3-coder-30b-a3b-fp8"
    return make


def _dangling(recipes: Path) -> Path:
    (recipes / "extra").mkdir()
    (recipes / "extra" / "recipe.toml").symlink_to(recipes / "gone.toml")
    return recipes / "extra" / "recipe.toml"


def _folder_named_recipe(recipes: Path) -> Path:
    (recipes / "extra" / "recipe.toml").mkdir(parents=True)
    return recipes / "extra" / "recipe.toml"


def _empty_folder(recipes: Path) -> Path:
    (recipes / "extra").mkdir()
    return recipes / "extra"


def _loose_file(recipes: Path) -> Path:
    shutil.copy(recipes / "glm-4-5-air-sglang" / "recipe.toml", recipes / "extra.toml")
    return recipes / "extra.toml"


@pytest.mark.parametrize("make, why", [
    (_misnamed("Recipe.toml"), "has no recipe.toml (Recipe.toml is not that name)"),
    (_misnamed("recipe.tml"), "has no recipe.toml (recipe.tml is not that name)"),
    (_dangling, "recipe.toml is a symlink to a missing file"),
    (_folder_named_recipe, "recipe.toml is a folder, not a file"),
    (_empty_folder, "has no recipe.toml"),
    (_loose_file, "is not a folder: a recipe is recipes/<id>/recipe.toml (move it to extra/recipe.toml)"),
], ids=["Recipe.toml", "recipe.tml", "dangling-symlink", "folder-named-recipe.toml", "empty-folder", "loose-file"])
@pytest.mark.parametrize("command", [["build"], ["build", "--check"], ["validate"], ["validate", "recipes"]])
def test_every_skipped_recipe_is_named_with_the_reason(project: Path, make, why: str, command: list[str]):
    assert run("build").exit_code == 0
    (project / "recipes" / "README.md").write_text("not a recipe, not a warning\n")
    (project / "recipes" / ".gitkeep").write_text("")
    skipped = make(project / "recipes")
    result = run(*command)
    warnings = [ln for ln in result.stderr.splitlines() if ": warning: skipped:" in ln]
    assert len(warnings) == 1 and warnings[0].startswith(f"{skipped.relative_to(project)}: warning: skipped: {why}"), \
        result.stderr


@pytest.mark.parametrize("name", ["other.toml", "recipe.toml.bak", "Recipe.toml"])
def test_a_file_not_named_recipe_toml_is_not_built_under_its_folders_id(project: Path, name: str):
    assert run("build").exit_code == 0
    before = tree(project / "out")
    other = project / "recipes" / "glm-4-5-air-sglang" / name
    shutil.copy(project / "recipes" / "qwen3-coder-30b-a3b-fp8" / "recipe.toml", other)
    for command in ("build", "explain"):
        result = run(command, str(other))
        assert result.exit_code == 1
        assert (f"recipes/glm-4-5-air-sglang/{name}: error: a recipe file must be named recipe.toml: its id is "
                "its folder's name, so this would be built as 'glm-4-5-air-sglang'") in result.stderr
    assert tree(project / "out") == before


# --- validate says what it could not check, and takes ids --------------------------------------------------------

@pytest.mark.parametrize("args", [[], ["recipes"], ["glm-4-5-air-sglang"], ["recipes/glm-4-5-air-sglang/recipe.toml"]])
def test_validate_without_a_cluster_names_the_rules_it_skipped(project: Path, args: list[str]):
    from generator.check.rules import RULES

    (project / "cluster.toml").unlink()
    result = run("validate", *args)
    assert result.exit_code == 0, result.output
    assert "ok" not in result.stdout.split()
    line = [ln for ln in result.stderr.splitlines() if "warning[no-cluster]" in ln]
    assert len(line) == 1, result.stderr
    needing = [r.id for r in RULES if r.needs_cluster]
    assert {"too-many-nodes", "gpu-memory", "fabric-env"} <= set(needing)
    assert all(rule_id in line[0] for rule_id in needing) and "--cluster" in line[0]
    assert run("validate", "--strict", *args).exit_code == 1
    shutil.copy(ROOT / "cluster.toml", project / "lab.toml")
    result = run("validate", "--cluster", "lab.toml", *args)
    assert result.exit_code == 0 and "no-cluster" not in result.stderr and result.stdout.strip() == "ok"


def test_a_cluster_file_alone_needs_no_cluster_warning(project: Path):
    result = run("validate", "cluster.toml")
    assert result.exit_code == 0 and result.stdout.strip() == "ok", result.output


@pytest.mark.parametrize("ref", ["glm-4-5-air-sglang", "qwen3-coder-30b-a3b-fp8"])
def test_validate_takes_recipe_ids_like_build_and_explain(project: Path, ref: str):
    assert run("validate", ref).exit_code == 0
    _edit(project / "recipes" / ref / "recipe.toml", "engine = ", 'engine = "vlm"\nx_engine = ')
    result = run("validate", ref)
    assert result.exit_code == 1 and f"recipes/{ref}/recipe.toml:" in result.stderr


def test_validate_names_an_id_it_cannot_find_and_checks_the_rest(project: Path):
    result = run("validate", "no-such-recipe", "glm-4-5-air-sglang")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "no-such-recipe: error: no such file, and no recipe id 'no-such-recipe' under recipes/ "
        "(looked for recipes/no-such-recipe/recipe.toml)"]


@pytest.mark.parametrize("where, directive, ok", [
    ("clusters/lab.toml", "#:schema ../schema/cluster.schema.json", True),
    ("clusters/lab.toml", "#:schema ./schema/cluster.schema.json", False),
    ("cluster.toml", "#:schema ./schema/cluster.schema.json", True),
    ("cluster.toml", "#:schema schema/cluster.schema.jsn", False),
    ("recipes/glm-4-5-air-sglang/recipe.toml", "#:schema ../../schema/recipe.schema.json", True),
    ("recipes/glm-4-5-air-sglang/recipe.toml", "#:schema ../schema/recipe.schema.json", False),
    ("cluster.toml", "#:schema https://example.invalid/cluster.schema.json", True),
])
def test_a_schema_directive_that_reaches_no_file_is_a_warning(project: Path, where: str, directive: str, ok: bool):
    target = project / where
    source = ROOT / ("cluster.toml" if "cluster" in where or where.startswith("clusters") else where)
    target.parent.mkdir(parents=True, exist_ok=True)
    body = source.read_text().split("\n", 1)[1]
    target.write_text(f"# a comment first\n{directive}\n{body}")
    result = run("validate", where)
    warned = [ln for ln in result.stderr.splitlines() if "warning[schema-directive]" in ln]
    if ok:
        assert not warned and result.exit_code == 0, result.output
    else:
        assert len(warned) == 1 and warned[0].startswith(f"{where}:2:1: warning[schema-directive]: {directive}")
        assert run("validate", "--strict", where).exit_code == 1


@pytest.mark.parametrize("record", [
    {"staging": ".recipegen-staging-x", "trash": ".recipegen-old-y", "names": ["../recipes"], "new": []},
    {"staging": "../..", "trash": ".recipegen-old-y", "names": ["glm-4-5-air-sglang"], "new": ["glm-4-5-air-sglang"]},
    {"staging": ".recipegen-staging-x", "trash": "/tmp", "names": [], "new": []},
    {"names": []},
    "not an object",
], ids=["name-climbs-out", "staging-climbs-out", "absolute-trash", "missing-keys", "not-an-object"])
def test_a_damaged_or_hostile_journal_moves_nothing(project: Path, record):
    import json

    assert run("build").exit_code == 0
    before = tree(project)
    (project / "out" / ".recipegen-journal.json").write_text(json.dumps(record))
    result = run("build")
    assert result.exit_code == 1
    assert "out/.recipegen-journal.json: error: cannot read the journal of an interrupted build" in result.stderr
    assert {k: v for k, v in tree(project).items() if ".recipegen-journal" not in k} == before


@pytest.mark.parametrize("relative, allowed", [
    ("qwen/spark1/compose.yaml", True), ("qwen/stack.yaml", True),
    ("../qwen/stack.yaml", False), ("/etc/passwd", False), ("qwen/../../x", False), ("qwen//stack.yaml", False),
    ("qwen/./stack.yaml", False), ("", False), ("qwen/..", False),
])
def test_the_writer_refuses_any_path_that_leads_out_of_its_folder(tmp_path: Path, relative: str, allowed: bool):
    from generator.diagnostics import RecipegenError
    from generator.write.output import _inside

    if allowed:
        _inside(tmp_path, relative)
    else:
        with pytest.raises(RecipegenError, match="refusing to write outside it"):
            _inside(tmp_path, relative)
