"""Issue 28, item 5: every flag recipegen itself writes for vLLM is accepted by the real vLLM's argument parser, and
means there what recipegen means by it. No lab and no boot: vLLM 0.32.0 (the CPU build the lab image holds,
lab/vllmimage.py) parses the `vllm serve` argv of every rank of compiled recipes, runs its own checks of the parsed
arguments and builds its engine configuration from them (the tiny Llama's config.json read from a Hugging Face
cache, as the engine does before any weight): the rank wiring (--nnodes, --node-rank, --master-addr,
--master-port, --headless), --tensor/--pipeline-parallel-size, --host/--port, --served-model-name with an alias,
and --distributed-executor-backend ray (parsed; the CPU platform cannot run Ray, so its configuration is not built).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lab import tinymodel, vllmimage
from lab.image import PYTHON
from generator.write.lock import held
from helpers.watchwords import service_argv

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "cpu"
PARSE = Path(__file__).resolve().parent / "lab" / "vllmparse.py"

ALIASES = '''engine = "vllm"
docker_image = "recipegen-lab/vllm-cpu:0.32.0"
model = "recipegen-lab/tiny-llama"
required_nodes = 1
args = ["--served-model-name", "tiny", "tiny-alias", "--host", "127.0.0.1", "--port", "8123", "--dtype", "float32"]
'''
RAY = '''engine = "vllm"
docker_image = "recipegen-lab/vllm-cpu:0.32.0"
model = "recipegen-lab/tiny-llama"
required_nodes = 2
tensor_parallel_size = 2
distributed_backend = "ray"
args = ["--served-model-name", "tiny", "--dtype", "float32"]
'''


@pytest.fixture(scope="module")
def site() -> Path:
    reason = vllmimage.unavailable_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the real vLLM cannot be staged, and CI must run this test: {reason}", pytrace=False)
        print(f"\nvLLM parser test skipped: {reason}")
        pytest.skip(reason)
    with held(vllmimage.CACHE):  # the lab's worker may be staging the same folder
        return vllmimage.site_packages()


def serve_argvs(out: Path) -> list[tuple[str, str, int, list[str]]]:
    """(recipe, node, rank, the words after `vllm serve`) of every rank that runs vLLM's server."""
    found = []
    for compose in sorted(out.glob("*/*/compose.yaml")):
        service = yaml.safe_load(compose.read_text())["services"]["engine"]
        words = service_argv(service)
        if "vllm" in words and words[words.index("vllm") + 1] == "serve":
            rank = int(service["labels"]["dev.recipegen.rank"])
            found.append((compose.parent.parent.name, compose.parent.name, rank, words[words.index("vllm") + 2:]))
    return found


def test_every_vllm_flag_recipegen_writes_parses_in_the_real_vllm(site: Path, tmp_path: Path):
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE / "recipes", project / "recipes")
    for rid, text in (("aliases", ALIASES), ("ray", RAY)):
        (project / "recipes" / rid).mkdir()
        (project / "recipes" / rid / "recipe.toml").write_text(text)
    shutil.copy(EXAMPLE / "cluster.toml", project / "cluster.toml")
    built = subprocess.run([sys.executable, "-m", "generator", "build"], cwd=project, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    ranks = serve_argvs(project / "out")
    assert {(r, n) for r, n, _, _ in ranks} == {
        ("tiny-llama-tp2", "cpu1"), ("tiny-llama-tp2", "cpu2"), ("tiny-llama-pp2", "cpu1"),
        ("tiny-llama-pp2", "cpu2"), ("aliases", "cpu1"), ("ray", "cpu1")}  # a Ray worker runs `ray start`

    hf = tmp_path / "hf"
    tinymodel.put_in_cache(hf)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site), "HF_HOME": str(hf), "HF_HUB_OFFLINE": "1",
           "VLLM_TARGET_DEVICE": "cpu", "HOME": str(tmp_path)}
    # One more argv, with a word this vLLM does not know: the check can fail, and says so in vLLM's words.
    done = subprocess.run([str(PYTHON), str(PARSE)], env=env, capture_output=True, text=True, timeout=600,
                          input=json.dumps([*(argv for *_, argv in ranks), ["m", "--max-model-length", "5"]]))
    assert done.returncode == 0, done.stderr[-3000:]
    *results, typo = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == len(ranks)
    assert "--max-model-length" in typo["error"]

    head = {"cpu1": "10.0.0.11"}
    for (recipe, node, rank, argv), result in zip(ranks, results):
        assert "error" not in result, f"{recipe} on {node}: vLLM refused {argv}: {result['error']}"
        parsed = result["parsed"]
        assert parsed["model"] == "recipegen-lab/tiny-llama"
        assert parsed["headless"] is (rank > 0), (recipe, node)
        if recipe == "aliases":
            assert parsed["served_model_name"] == ["tiny", "tiny-alias"]
            assert (parsed["host"], parsed["port"]) == ("127.0.0.1", 8123)
            assert result["config"]["world_size"] == 1
            continue
        assert parsed["served_model_name"] == ["tiny"]
        if recipe == "ray":
            assert parsed["distributed_executor_backend"] == "ray" and parsed["tensor_parallel_size"] == 2
            continue
        config = result.get("config")
        assert config is not None, f"{recipe} on {node}: {result.get('config_error')}"
        assert (config["nnodes"], config["node_rank"]) == (2, rank)
        assert (config["master_addr"], config["master_port"]) == (head["cpu1"], 29501)
        assert config["world_size"] == 2
        want = (2, 1) if recipe == "tiny-llama-tp2" else (1, 2)
        assert (config["tensor_parallel_size"], config["pipeline_parallel_size"]) == want

