"""`recipegen explain` (every value with where it came from) and `recipegen diff` (what a rebuild would change)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from generator.cli import main

ROOT = Path(__file__).resolve().parent.parent
AGENT = "deepseek-v4-flash-eugr-agent"
AGENT_FILE = f"recipes/{AGENT}/recipe.toml"
PARENT_FILE = "recipes/deepseek-v4-flash-eugr/recipe.toml"
QWEN = "qwen3-coder-30b-a3b-fp8"


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def line_of(path: Path, text: str) -> int:
    """1-based line of the only line of `path` containing `text` (so edits to the recipe do not break tests)."""
    hits = [i + 1 for i, line in enumerate(path.read_text("utf-8").splitlines()) if text in line]
    assert len(hits) == 1, (path, text, hits)
    return hits[0]


def explained(output: str, text: str) -> str:
    """The explain line whose value is exactly `text` (before the `# origin` comment)."""
    hits = [line for line in output.splitlines() if line.split("  # ")[0].strip() == text]
    assert len(hits) == 1, (text, hits)
    return hits[0]


# --- explain ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def agent_spark2() -> str:
    import os

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        result = run("explain", AGENT, "--node", "spark2")
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_explain_only_the_asked_node(agent_spark2):
    assert "node spark2: rank 1 (worker)" in agent_spark2
    assert "node spark1" not in agent_spark2
    assert f"recipe {AGENT} ({AGENT_FILE} <- {PARENT_FILE})" in agent_spark2


def test_explain_child_flag_is_the_childs(agent_spark2):
    line = line_of(ROOT / AGENT_FILE, '"--max-num-seqs", "6"')
    assert explained(agent_spark2, "--max-num-seqs 6").endswith(f"# recipe ({AGENT_FILE}:{line})")


def test_explain_inherited_flag_is_the_parents(agent_spark2):
    line = line_of(ROOT / PARENT_FILE, '"--kv-cache-dtype", "fp8"')
    assert explained(agent_spark2, "--kv-cache-dtype fp8").endswith(
        f"# parent recipe deepseek-v4-flash-eugr ({PARENT_FILE}:{line})")


def test_explain_rank_wiring_is_the_compilers(agent_spark2):
    for text in ("--node-rank 1", "--nnodes 2", "--master-addr 192.168.100.10", "--headless",
                 "--tensor-parallel-size 2", "deepseek-ai/DeepSeek-V4-Flash-0731"):
        assert explained(agent_spark2, text).endswith("# compiler"), text
    assert explained(agent_spark2, "VLLM_HOST_IP=192.168.100.11").endswith("# compiler")


def test_explain_fabric_env_is_the_clusters(agent_spark2):
    line = line_of(ROOT / "cluster.toml", "NCCL_SOCKET_IFNAME =")
    assert explained(agent_spark2, "NCCL_SOCKET_IFNAME=enp1s0f0np0").endswith(f"# cluster (cluster.toml:{line})")


def test_explain_inherited_env_and_mount(agent_spark2):
    line = line_of(ROOT / PARENT_FILE, "NCCL_IB_TIMEOUT =")
    assert explained(agent_spark2, "NCCL_IB_TIMEOUT=24").endswith(f"({PARENT_FILE}:{line})")
    line = line_of(ROOT / PARENT_FILE, "[[extra_mounts]]")
    assert explained(agent_spark2, "/home/spark/.cache/vllm-ds4-eugr -> /root/.cache/vllm").endswith(
        f"({PARENT_FILE}:{line})")


def explain_one(tmp_path: Path, monkeypatch, rid: str, rest: str):
    """`recipegen explain RID` of one vLLM recipe (Qwen3-32B, then `rest` of its TOML) beside the shipped cluster."""
    shutil.copy(ROOT / "cluster.toml", tmp_path / "cluster.toml")
    recipe = tmp_path / "recipes" / rid / "recipe.toml"
    recipe.parent.mkdir(parents=True)
    recipe.write_text('engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\nmodel = "Qwen/Qwen3-32B"\n' + rest,
                      "utf-8")
    monkeypatch.chdir(tmp_path)
    return run("explain", rid)


def test_explain_recipe_env_overriding_the_cluster(tmp_path, monkeypatch):
    result = explain_one(tmp_path, monkeypatch, "loud", '\n[env]\nNCCL_DEBUG = "INFO"\nHF_HUB_OFFLINE = "1"\n')
    assert result.exit_code == 0, result.output
    assert explained(result.stdout, "NCCL_DEBUG=INFO").endswith(
        "# recipe (recipes/loud/recipe.toml:6); overrides cluster")
    assert "overrides" not in explained(result.stdout, "HF_HUB_OFFLINE=1")
    assert "warning[fabric-env]" in result.stderr  # and the lint says so


# Values a terminal would act on or hide: control characters, an ESC sequence (click strips those from a pipe),
# CR, DEL, C1, non-breaking and zero-width spaces, a line separator, a character beyond the BMP.
HOSTILE = "x\x01y\tz\nw\r\x1b[2J\x7f\x85\u00a0\u200b\u2028'\"\\$q \U0001F600"


def test_explain_shows_values_byte_for_byte(tmp_path, monkeypatch):
    """Every value explain shows reads back (bash for shell words, TOML for setup) as exactly the bytes the
    container gets: escaped, never dropped or passed raw to the terminal."""
    import re
    import subprocess
    import tomllib

    text = '"' + "".join(f"\\U{ord(c):08X}" for c in HOSTILE) + '"'  # every character escaped
    result = explain_one(tmp_path, monkeypatch, "odd", f'setup = [{text}]\n[env]\nODD = {text}\n')
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert all(ch == "\n" or ch.isprintable() for ch in out), repr(out)
    env = re.search(r"^ +ODD=(.+?) +# recipe", out, re.M)
    assert env, out
    shell = subprocess.run(["bash", "-c", f"printf %s {env[1]}"], capture_output=True, check=True).stdout
    assert shell.decode("utf-8") == HOSTILE
    shown = [m[1] for m in re.finditer(r"^ +setup: (.+?) +# recipe", out, re.M)]
    assert len(shown) == 1, out
    assert all(tomllib.loads(f"v = {s}")["v"] == HOSTILE for s in shown)
    assert _setup_list(out) == [HOSTILE]


def _setup_list(out: str) -> list[str]:
    """The resolved recipe's `setup`, as explain prints it, read back as TOML (each line's origin cut off)."""
    import re
    import tomllib

    block = re.search(r"^  setup = \[.*?^  \]", out, re.M | re.S)
    assert block, out
    text = "\n".join(re.sub(r"\s+# (recipe|parent).*$", "", line) for line in block[0].splitlines())
    return list(tomllib.loads(text)["setup"])


def test_explain_prints_setup_as_a_list(tmp_path, monkeypatch):
    """`setup` is a list: explain shows it as one, in order, each command with the line it came from (it printed
    `setup = "..."` once per command, as if the key were a string given twice)."""
    result = explain_one(tmp_path, monkeypatch, "steps", 'setup = [\n  "pip install x",\n  "echo \'a b\'",\n]\n')
    assert result.exit_code == 0, result.output
    assert _setup_list(result.stdout) == ["pip install x", "echo 'a b'"]
    assert explained(result.stdout, '"pip install x",').endswith("recipes/steps/recipe.toml:5)")
    assert explained(result.stdout, '"echo \'a b\'",').endswith("recipes/steps/recipe.toml:6)")


def test_explain_unknown_node_is_a_usage_error(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = run("explain", AGENT, "--node", "nosuch")
    assert result.exit_code == 2
    assert "'nosuch' is not one of the recipe's nodes: spark1, spark2" in result.stderr


def test_explain_unknown_recipe_exits_1(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = run("explain", "no-such-recipe")
    assert result.exit_code == 1
    assert "no such recipe" in result.stderr


# --- diff ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A copy of the project: recipes, cluster and committed out/ (schemas and templates ship in the package;
    the project root is the folder holding recipes/ or cluster.toml)."""
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    shutil.copytree(ROOT / "out", tmp_path / "out", ignore=shutil.ignore_patterns(".recipegen-*"))
    shutil.copy(ROOT / "cluster.toml", tmp_path / "cluster.toml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def snapshot(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def edit_qwen(project: Path) -> None:
    recipe = project / "recipes" / QWEN / "recipe.toml"
    text = recipe.read_text("utf-8")
    assert text.count('"--max-num-seqs", "16"') == 1
    recipe.write_text(text.replace('"--max-num-seqs", "16"', '"--max-num-seqs", "24"'), "utf-8")


def test_diff_of_a_fresh_copy_shows_no_changes(project):
    result = run("diff")
    assert result.exit_code == 0, result.output
    assert result.stdout == "out: no changes\n"


def test_diff_after_a_flag_edit(project):
    before = snapshot(project / "out")
    edit_qwen(project)
    result = run("diff")
    assert result.exit_code == 0, result.output
    out = result.stdout
    compose = f"{QWEN}/spark1/compose.yaml"
    assert f"--- a/out/{compose}\n" in out and f"+++ b/out/{compose}\n" in out
    assert '\n-      - "16"\n' in out and '\n+      - "24"\n' in out
    assert "@@ " in out
    # only the edited recipe's files, and nothing written
    named = {line[10:] for line in out.splitlines() if line.startswith("--- a/out/")}
    assert named == {compose, f"{QWEN}/stack.yaml"}
    assert snapshot(project / "out") == before


def test_diff_of_one_recipe(project):
    edit_qwen(project)
    assert "no changes" in run("diff", "glm-4-5-air-sglang").stdout
    assert '+      - "24"' in run("diff", QWEN).stdout


def test_diff_then_build_then_no_diff(project):
    edit_qwen(project)
    assert run("build").exit_code == 0
    assert run("diff").stdout.endswith("no changes\n")


def test_diff_of_a_removed_recipe_and_a_removed_node(project):
    shutil.rmtree(project / "recipes" / QWEN)
    glm = project / "recipes" / "glm-4-5-air-sglang" / "recipe.toml"
    text = glm.read_text("utf-8")
    glm.write_text(text.replace("required_nodes = 2", "required_nodes = 1")
                   .replace("tensor_parallel_size = 2", "tensor_parallel_size = 1"), "utf-8")
    out = run("diff").stdout
    assert f"--- out/{QWEN}/ (would be removed: no such recipe)" in out
    assert "--- a/out/glm-4-5-air-sglang/spark2/compose.yaml\n" in out  # the node that no longer runs a rank
    assert '-      dev.recipegen.node: "spark2"' in out


def test_diff_names_the_file_under_out(project):
    edit_qwen(project)
    out = run("diff").stdout
    assert f"--- a/out/{QWEN}/spark1/compose.yaml\n" in out


def test_explain_shows_the_group_watch_as_the_short_command_it_is(agent_spark2):
    """The watch is a program shipped as a config (/opt/recipegen/group-watch.py): each rank's command names it and
    its options, never its text, so the line reads as the command it is."""
    line = next(li for li in agent_spark2.splitlines() if li.strip().startswith("python3 "))
    assert line.strip().startswith("python3 /opt/recipegen/group-watch.py --rank 1 --ranks 2 --node spark2 ")
    assert "import socket" not in agent_spark2
