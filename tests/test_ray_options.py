"""`ray_args` as `ray start` reads them: the head-only options reach the head alone (compose and Swarm), and the
`ray-*` lint rules catch what Ray would refuse at boot, in every spelling. The option data is checked against the
Ray wheel when one is at hand (the lab's wheel cache), so a regenerated data file cannot drift from Ray."""

from __future__ import annotations

import json
import os
import shlex
import textwrap
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from generator.cli import main
from generator.engines import rayoptions
from helpers.launch import CLUSTER, build

# `head_only_flags` in ray/scripts/scripts.py (`start`), Ray 2.60.0: read by hand, not from the data file.
HEAD_ONLY = {"--port", "--redis-shard-ports", "--include-dashboard"}


def ray_recipe(tmp_path: Path, ray_args: list[str], cluster_ray_args: list[str] | None = None,
               nodes: int = 2, backend: str = "ray", engine: str = "vllm") -> Path:
    head, _, rest = CLUSTER.partition("[[nodes]]")  # ray_args is a top-level key: before the first table
    extra = f"ray_args = {json.dumps(cluster_ray_args)}\n" if cluster_ray_args else ""
    (tmp_path / "cluster.toml").write_text(head + extra + "[[nodes]]" + rest)
    folder = tmp_path / "recipes" / "r"
    folder.mkdir(parents=True)
    (folder / "recipe.toml").write_text(textwrap.dedent(f"""\
        engine = "{engine}"
        docker_image = "vllm/vllm-openai:v0.34.0"
        model = "m/m"
        required_nodes = {nodes}
        tensor_parallel_size = {nodes}
        distributed_backend = "{backend}"
        ray_args = {json.dumps(ray_args)}
        """))
    return tmp_path


def ray_starts(root: Path) -> tuple[list[str], list[str], list[str]]:
    """(head's `ray start` words after the compiler's, worker's compose argv after the compiler's, worker's stack
    argv after the compiler's)."""
    head = yaml.safe_load((root / "out/r/n1/compose.yaml").read_text())
    launcher = head["configs"]["launch.sh"]["content"]
    line = next(l for l in launcher.splitlines() if l.startswith("ray start --head"))
    worker = yaml.safe_load((root / "out/r/n2/compose.yaml").read_text())["services"]["engine"]["command"]
    stack = yaml.safe_load((root / "out/r/stack.yaml").read_text())
    stack_worker = next(s["command"] for name, s in stack["services"].items() if name.endswith("n2"))
    return shlex.split(line)[5:], worker[5:], stack_worker[5:]


@pytest.mark.parametrize("ray_args, worker", [
    (["--include-dashboard=false", "--num-cpus", "4"], ["--num-cpus", "4"]),
    (["--include-dashboard", "false", "--num-cpus=4"], ["--num-cpus=4"]),
    (["--disable-usage-stats", "--redis-shard-ports=6380,6381"], ["--disable-usage-stats"]),
    (["--redis-shard-ports", "6380", "--include-dashboard=0"], []),
])
def test_head_only_options_go_to_the_head_only(tmp_path: Path, ray_args: list[str], worker: list[str]):
    root = ray_recipe(tmp_path, ray_args)
    result = build(root)
    assert result.exit_code == 0, result.output
    head, compose_worker, stack_worker = ray_starts(root)
    assert head == ray_args
    assert compose_worker == stack_worker == worker
    assert not {w.split("=")[0] for w in compose_worker} & HEAD_ONLY


def test_the_clusters_head_only_options_go_to_the_head_only(tmp_path: Path):
    root = ray_recipe(tmp_path, ["--num-cpus", "4"], cluster_ray_args=["--include-dashboard", "false"])
    assert build(root).exit_code == 0
    head, worker, stack_worker = ray_starts(root)
    assert head == ["--include-dashboard", "false", "--num-cpus", "4"]
    assert worker == stack_worker == ["--num-cpus", "4"]


def test_the_data_names_the_head_only_options_ray_refuses():
    assert rayoptions.head_only() == HEAD_ONLY


def validate(root: Path, *files: str):
    previous = Path.cwd()
    os.chdir(root)
    try:
        return CliRunner().invoke(main, ["validate", *files, "--strict"], catch_exceptions=False)
    finally:
        os.chdir(previous)


@pytest.mark.parametrize("ray_args, rule, says", [
    (["--num-cpus"], "ray-value", "'--num-cpus' takes a value, but nothing follows it"),
    (["--num-cpus=abc"], "ray-value", "'--num-cpus' takes an integer, not 'abc'"),
    (["--num-cpus", "four"], "ray-value", "'--num-cpus' takes an integer, not 'four'"),
    (["--system-reserved-cpu=x"], "ray-value", "takes a number"),
    (["--include-dashboard=maybe"], "ray-value", "'--include-dashboard' takes true or false, not 'maybe'"),
    (["--log-color=always"], "ray-value", "takes one of auto, false, true"),
    (["--disable-usage-stats=true"], "ray-value", "is a switch and takes no value"),
    (["--resources", "{\"GPU\": 1}"], "ray-value", "takes JSON"),  # two shell words: `{"GPU":` and `1}`
    (["--resources", "'{\"GPU\": 1'"], "ray-value", "takes JSON"),
    (["--num-cpus", "4", "8"], "ray-word", "'8' is no option's value"),
    (["--temp-dir", "/tmp/my ray"], "ray-word", "'ray' is no option's value"),
    (["--num-gpu", "1"], "ray-option", "did you mean '--num-gpus'?"),
    (["--include-dashbord=false"], "ray-option", "did you mean '--include-dashboard'?"),
])
def test_ray_args_that_ray_start_refuses(tmp_path: Path, ray_args: list[str], rule: str, says: str):
    root = ray_recipe(tmp_path, ray_args)
    result = validate(root, "recipes/r/recipe.toml")
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"[{rule}]: ray_args: " in lines[0] and says in lines[0], result.stderr
    assert lines[0].startswith("recipes/r/recipe.toml:7:")


def test_a_split_json_value_is_said_once_with_the_quoting(tmp_path: Path):
    """Unquoted JSON loses its double quotes and splits at its blanks (ray_args are shell words): one finding, on
    the option, saying how to quote it; not one stray-word finding per piece."""
    root = ray_recipe(tmp_path, ["--resources", "{\"GPU\":", "1,", "\"x\":", "2}"])
    result = validate(root, "recipes/r/recipe.toml")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert "[ray-value]: ray_args: '--resources' takes JSON" in result.stderr
    assert "this JSON became 4 words; wrap it in single quotes" in result.stderr


@pytest.mark.parametrize("ray_args", [
    ["--include-dashboard", "false", "--num-cpus=4", "--object-store-memory", "8589934592"],
    ["--resources", "'{\"GPU\": 1}'", "--system-config='{\"a\":1}'", "-v", "--log-style", "record"],
    ["--include-dashboard=False", "--dashboard-host", "0.0.0.0", "--disable-usage-stats"],
])
def test_ray_args_that_ray_start_takes_pass(tmp_path: Path, ray_args: list[str]):
    root = ray_recipe(tmp_path, ray_args)
    result = validate(root, "recipes/r/recipe.toml")
    assert result.exit_code == 0 and result.stderr == "", result.stderr


@pytest.mark.parametrize("nodes, backend, engine, why", [
    (2, "mp", "vllm", "distributed_backend is not 'ray'"),
    (1, "ray", "vllm", "on one node vLLM starts its own Ray"),
    (2, "mp", "sglang", "SGLang does not use Ray"),
])
def test_ray_args_on_a_recipe_that_starts_no_ray_are_said_to_be_ignored(tmp_path: Path, nodes: int, backend: str,
                                                                        engine: str, why: str):
    root = ray_recipe(tmp_path, ["--num-cpus", "4"], nodes=nodes, backend=backend, engine=engine)
    result = validate(root, "recipes/r/recipe.toml")
    assert "warning[ray-unused]: ray_args: ignored: this recipe starts no Ray" in result.stderr
    assert why in result.stderr


def test_the_clusters_ray_args_on_a_one_node_ray_recipe_are_said_to_be_ignored(tmp_path: Path):
    root = ray_recipe(tmp_path, [], cluster_ray_args=["--num-cpus", "4"], nodes=1)
    result = validate(root, "recipes/r/recipe.toml")
    assert "cluster.toml:" in result.stderr
    assert "warning[ray-unused]: ray_args: the cluster's ray_args are ignored for r" in result.stderr


def test_a_clusters_ray_args_are_checked_too(tmp_path: Path):
    root = ray_recipe(tmp_path, [], cluster_ray_args=["--num-cpus", "--num-gpu", "1", "stray"])
    result = validate(root, "cluster.toml")
    assert result.exit_code == 1
    found = sorted(line.split(": ray_args")[0].split(" ")[-1] for line in result.stderr.strip().splitlines())
    assert found == ["error[ray-value]", "warning[ray-option]"], result.stderr
    assert "'--num-cpus' takes a value, but the next word is the option '--num-gpu'" in result.stderr


WHEELS = Path(os.environ.get("RECIPEGEN_LAB_WHEELS", Path.home() / ".cache/recipegen-lab/wheels"))


def test_the_data_file_is_what_the_tool_reads_from_the_wheel(tmp_path: Path):
    """tools/extract_ray_options.py on the Ray wheel gives the committed file (CI has the wheel: the lab's)."""
    import subprocess
    import sys

    data = json.loads((Path(__file__).parent.parent / "generator/data/ray_options.json").read_text())
    wheel = next(WHEELS.glob(f"ray-{data['ray']}-*.whl"), None)
    if wheel is None:
        if os.environ.get("CI"):
            pytest.fail(f"no Ray {data['ray']} wheel in {WHEELS} (.ci/run downloads it)")
        pytest.skip(f"no Ray {data['ray']} wheel in {WHEELS}: .ci/run downloads it")
    out = tmp_path / "ray_options.json"
    subprocess.run([sys.executable, str(Path(__file__).parent.parent / "tools/extract_ray_options.py"), str(wheel),
                    "--out", str(out)], check=True, capture_output=True)
    assert json.loads(out.read_text()) == data
