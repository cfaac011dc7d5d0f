"""Hostile VALUES (issue 13): each passes through exactly, or fails at `validate` with one line naming its key.

Variants of each class, written as files the way users write them; the line numbers are the variant's line in
the file (recipes: line 4 after three base lines; clusters: line 2 after `name`). Accepted variants must also
build, and real Compose v2 (`docker compose config`) must accept what was built: what Docker refuses at `up`
is refused here at `validate`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from helpers.corpus import Expect, assert_expected, run_inprocess
from helpers.golden import compose_binary, compose_env, recipegen
from helpers.hostile import ACCEPTED, BASE, CLUSTER_NODES, cluster_text, recipe_text  # noqa: F401 - moved to tests/helpers/


def validate_fails(tmp_path: Path, kind: str, text: str, line: int, key: str, message: str) -> None:
    path = tmp_path / "case" / f"{kind}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, "utf-8")
    run = run_inprocess("validate", str(path))
    assert_expected(run, [Expect(path, line, key, message)], f"recipegen validate {path}:\n{text}")


# --- 1. dates and times ----------------------------------------------------------------------------------------

DATE_VALUES = [("2024-05-01", "a TOML date 2024-05-01"), ("12:30:00", "a TOML time 12:30:00"),
               ("2024-05-01T00:00:00Z", "a TOML date-time 2024-05-01T00:00:00Z"),
               ("2024-05-01 10:00:00", "a TOML date-time 2024-05-01T10:00:00")]


@pytest.mark.parametrize("value, shown", DATE_VALUES, ids=[v for v, _ in DATE_VALUES])
@pytest.mark.parametrize("template, key", [
    ("name = {v}", "name"), ("env = {{ A = {v} }}", "env.A"), ('args = ["--x", {v}]', "args[1]"),
    ('extra_mounts = [{{ host = "/a", container = {v} }}]', "extra_mounts[0].container"),
    ("docker_image = {v}", "docker_image")])
def test_recipe_toml_date_is_a_schema_error(template: str, key: str, value: str, shown: str, tmp_path: Path) -> None:
    wanted = "a string or an integer" if key.startswith("env.") else "a string"  # env takes integers as text
    validate_fails(tmp_path, "recipe", recipe_text(template.format(v=value)), 4, key, f"expected {wanted}, got {shown}")


@pytest.mark.parametrize("template, key", [("name = {v}", "name"), ("env = {{ A = {v} }}", "env.A"),
                                           ("stop_grace_period = {v}", "stop_grace_period"),
                                           ("hf_cache = {v}", "hf_cache")])
def test_cluster_toml_date_is_a_schema_error(template: str, key: str, tmp_path: Path) -> None:
    wanted = "a string or an integer" if key.startswith("env.") else "a string"  # env takes integers as text
    validate_fails(tmp_path, "cluster", cluster_text(template.format(v="2024-05-01")), 2, key,
                   f"expected {wanted}, got a TOML date 2024-05-01")


# --- 2. floats where integers belong ---------------------------------------------------------------------------

@pytest.mark.parametrize("line, key, got", [
    ("tensor_parallel_size = 2.0", "tensor_parallel_size", "a float 2.0: write 2"),
    ("pipeline_parallel_size = 1e0", "pipeline_parallel_size", "a float 1.0: write 1"),
    ("required_nodes = 1.0", "required_nodes", "a float 1.0: write 1"),
    ("tensor_parallel_size = 1.5", "tensor_parallel_size", "a float 1.5")])
def test_recipe_float_for_integer(line: str, key: str, got: str, tmp_path: Path) -> None:
    validate_fails(tmp_path, "recipe", recipe_text(line), 4, key, f"expected an integer, got {got}")


@pytest.mark.parametrize("line, key", [
    ("ulimits = { memlock = 2.0 }", "ulimits.memlock"), ("ulimits = { stack = 8388608.0 }", "ulimits.stack"),
    ("gpus_per_node = 1.0", "gpus_per_node"), ("master_port = 29501.0", "master_port"),
    ("ray_port = 6379.0", "ray_port")])
def test_cluster_float_for_integer(line: str, key: str, tmp_path: Path) -> None:
    validate_fails(tmp_path, "cluster", cluster_text(line), 2, key, "a float")


def test_a_float_stays_a_number_where_a_number_belongs(tmp_path: Path) -> None:
    path = tmp_path / "c" / "cluster.toml"
    path.parent.mkdir()
    path.write_text(cluster_text("gpu_memory_ceiling = 1.0"), "utf-8")
    run = run_inprocess("validate", str(path))
    assert run.exit_code == 0, run.stderr


# --- 3. what Docker or Compose refuse at `up` ------------------------------------------------------------------

@pytest.mark.parametrize("line, key", [
    (r'env = { A = "a\u0000b" }', "env.A"), (r'args = ["--x", "a\u0000"]', "args[1]"), (r'name = "x\u0000"', "name"),
    (r'extra_mounts = [{ host = "/a\u0000", container = "/b" }]', "extra_mounts[0].host"),
    (r'extra_mounts = [{ host = "/a", container = "/b\u0000" }]', "extra_mounts[0].container"),
    (r'entrypoint = ["vllm\u0000", "serve"]', "entrypoint[0]"), (r'model = "org/m\u0000"', "model")])
def test_nul_anywhere_in_a_recipe(line: str, key: str, tmp_path: Path) -> None:
    validate_fails(tmp_path, "recipe", recipe_text(line), 4, key, "NUL")


@pytest.mark.parametrize("line, key", [(r'env = { NCCL_X = "a\u0000" }', "env.NCCL_X"), (r'name = "l\u0000"', "name"),
                                       (r'hf_cache = "/h\u0000"', "hf_cache")])
def test_nul_anywhere_in_a_cluster(line: str, key: str, tmp_path: Path) -> None:
    validate_fails(tmp_path, "cluster", cluster_text(line), 2, key, "NUL")


@pytest.mark.parametrize("size, message", [
    ("99999999999999999999999g", "larger than Docker can hold"), ("8192p", "larger than Docker can hold"),
    ("9223372036854775808", "larger than Docker can hold"), ("32gi", "is not valid"), ("32  g", "is not valid"),
    ("1bb", "is not valid"), ("-1g", "is not valid"), ("32e", "is not valid")])
def test_bad_shm_size(size: str, message: str, tmp_path: Path) -> None:
    validate_fails(tmp_path, "recipe", recipe_text(f'shm_size = "{size}"'), 4, "shm_size", message)


@pytest.mark.parametrize("period, message", [
    ("60", "is not valid"), ("1x", "is not valid"), (".s", "is not valid"), ("1e3s", "is not valid"),
    ("", "is not valid"), ("1h 30m", "is not valid"), ("00", "is not valid"),
    ("2562048h", "not a Go duration that fits"), ("99999999999h", "not a Go duration that fits")])
def test_bad_stop_grace_period(period: str, message: str, tmp_path: Path) -> None:
    validate_fails(tmp_path, "cluster", cluster_text(f'stop_grace_period = "{period}"'), 2, "stop_grace_period",
                   message)


@pytest.mark.parametrize("model", ["-Qwen/Qwen3-32B", "--help", "-"])
def test_model_starting_with_a_dash(model: str, tmp_path: Path) -> None:
    validate_fails(tmp_path, "recipe", recipe_text(f'model = "{model}"'), 4, "model", "is not valid")


@pytest.mark.parametrize("line, key", [("ulimits = { memlock = \"lots\" }", "ulimits.memlock"),
                                       ("ulimits = { stack = -2 }", "ulimits.stack")])
def test_bad_ulimits(line: str, key: str, tmp_path: Path) -> None:
    validate_fails(tmp_path, "cluster", cluster_text(line), 2, key, "")


# --- accepted variants: they build, and real Compose accepts the result ----------------------------------------


@pytest.mark.parametrize("recipe_line, cluster_line", ACCEPTED, ids=[f"{r} | {c}" for r, c in ACCEPTED])
def test_accepted_values_build_and_compose_reads_them(recipe_line: str, cluster_line: str, tmp_path: Path) -> None:
    project = tmp_path / "p"
    (project / "recipes" / "hv").mkdir(parents=True)
    (project / "cluster.toml").write_text(cluster_text(cluster_line), "utf-8")
    (project / "recipes" / "hv" / "recipe.toml").write_text(recipe_text(recipe_line), "utf-8")
    result = recipegen(project, "build", "--out", str(project / "out"))
    assert result.exit_code == 0, result.output
    for file in (project / "out" / "hv" / "n1" / "compose.yaml", project / "out" / "hv" / "stack.yaml"):
        run = subprocess.run([str(compose_binary()), "-f", str(file), "config", "--format", "json"],
                             capture_output=True, text=True, env=compose_env(tmp_path), timeout=60)
        assert run.returncode == 0 and run.stderr == "", f"{file}:\n{run.stderr}"
        service = next(iter(json.loads(run.stdout)["services"].values()))
        env = service.get("environment", {})
        for value in ("12:30:00", "2024-05-01T00:00:00Z", "2024-05-01", "off"):
            if f'"{value}"' in recipe_line + cluster_line and value in recipe_line + cluster_line:
                assert value in env.values() or value in service.get("command", []) or any(
                    v.get("target") == f"/{value}" or v.get("source") == f"/{value}"
                    for v in service.get("volumes", [])) or value in run.stdout, value


# --- 4. mount targets after normalising, across `extends` ------------------------------------------------------

def test_child_replaces_the_parents_mount_on_the_same_folder(tmp_path: Path) -> None:
    """/data/ in the child and /data in the parent are one folder: the child's mount wins, nothing is reported."""
    project = tmp_path / "p"
    for rid, text in {"base": recipe_text('extra_mounts = [{ host = "/srv/old", container = "/data" }]'),
                      "child": 'extends = "base"\nextra_mounts = [{ host = "/srv/new", container = "/data/" }]\n'
                      }.items():
        (project / "recipes" / rid).mkdir(parents=True)
        (project / "recipes" / rid / "recipe.toml").write_text(text, "utf-8")
    (project / "cluster.toml").write_text(cluster_text('user = "root"'), "utf-8")
    result = recipegen(project, "build", "--out", str(project / "out"))
    assert result.exit_code == 0, result.output
    from generator.write.verify import read_yaml

    volumes = read_yaml((project / "out" / "child" / "n1" / "compose.yaml").read_text())["services"]["engine"]["volumes"]
    data = [v for v in volumes if v["target"].rstrip("/") == "/data"]
    assert [(v["source"], v["target"]) for v in data] == [("/srv/new", "/data/")]


def test_two_mounts_on_one_folder_in_a_parent_are_reported_in_the_parent(tmp_path: Path) -> None:
    project = tmp_path / "p"
    parent = recipe_text('extra_mounts = [{ host = "/a", container = "/m" },\n  { host = "/b", container = "/m/." }]')
    for rid, text in {"base": parent, "child": 'extends = "base"\n'}.items():
        (project / "recipes" / rid).mkdir(parents=True)
        (project / "recipes" / rid / "recipe.toml").write_text(text, "utf-8")
    (project / "cluster.toml").write_text(cluster_text('user = "root"'), "utf-8")
    result = recipegen(project, "validate", str(project / "recipes" / "child"))
    assert result.exit_code == 1
    assert "recipe.toml:5:" in result.output and "'/m/.' and '/m' (line 4) are both /m" in result.output, result.output


@pytest.mark.parametrize("target", ["/", "//", "/.", "/..", "/a/..", "///"])
def test_mount_on_the_container_root(target: str, tmp_path: Path) -> None:
    line = f'extra_mounts = [{{ host = "/srv", container = "{target}" }}]'
    validate_fails(tmp_path, "recipe", recipe_text(line), 4, "extra_mounts", "is the container's root")


@pytest.mark.parametrize("owned, shown", [("//dev/shm", "shared memory"), ("/dev/shm/", "shared memory"),
                                          ("/dev/./shm", "shared memory"), ("/tmp/../dev/shm", "shared memory"),
                                          ("/root/.cache/huggingface/.", "Hugging Face cache"),
                                          ("//root//.cache/huggingface", "Hugging Face cache")])
def test_owned_targets_in_any_spelling(owned: str, shown: str, tmp_path: Path) -> None:
    line = f'extra_mounts = [{{ host = "/srv", container = "{owned}" }}]'
    validate_fails(tmp_path, "recipe", recipe_text(line), 4, "extra_mounts", shown)


@pytest.mark.parametrize("first, second", [("/m", "/m/"), ("/m", "//m"), ("/a/b", "/a/./b"), ("/a/b", "/a/c/../b"),
                                           ("/data", "/data")])
def test_two_mounts_on_one_folder_name_both(first: str, second: str, tmp_path: Path) -> None:
    line = (f'extra_mounts = [{{ host = "/x", container = "{first}" }},\n'
            f'  {{ host = "/y", container = "{second}" }}]')
    validate_fails(tmp_path, "recipe", recipe_text(line), 5, "extra_mounts",
                   f"'{second}' and '{first}' (line 4) are both")
