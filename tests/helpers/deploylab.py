"""Shared by the tests: moved from tests/test_deploy_lab.py, which uses them too."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path
import pytest
from lab import IMAGE, LAB_MEMLOCK, Lab

TESTS = Path(__file__).resolve().parent.parent


MODEL = "lab-org/tiny-model"


SERVED = "tiny"


def vllm_recipe(nodes: int, env: dict[str, str] | None = None, port: int = 8000) -> str:
    env_lines = "\n".join(f'{k} = "{v}"' for k, v in (env or {}).items())
    return f'''engine = "vllm"
name = "lab vLLM mp x{nodes}"
docker_image = "{IMAGE}"
model = "{MODEL}"
required_nodes = {nodes}
tensor_parallel_size = {nodes}
distributed_backend = "mp"
shm_size = "1gb"
args = ["--served-model-name", "{SERVED}", "--port", "{port}", "--max-model-len", "4096",
        "--compilation-config", "'{{\\"cudagraph_mode\\": \\"FULL\\"}}'"]

[[extra_mounts]]
host = "~/.cache/vllm"
container = "/root/.cache/vllm"

[env]
HF_HUB_OFFLINE = "1"
LAB_JOIN_TIMEOUT = "5"
{env_lines}
'''


def sglang_recipe(nodes: int) -> str:
    return f'''engine = "sglang"
docker_image = "{IMAGE}"
model = "{MODEL}"
required_nodes = {nodes}
tensor_parallel_size = {nodes}
shm_size = "2g"
args = ["--served-model-name", "{SERVED}", "--port", "30000"]

[env]
HF_HUB_OFFLINE = "1"
'''


def put_model(lab: Lab, nodes) -> None:
    """The model in each node's Hugging Face cache, as `huggingface-cli download` leaves it."""
    for node in nodes:
        snap = Path(node.hf_cache) / "hub" / f"models--{MODEL.replace('/', '--')}" / "snapshots" / "0123abc"
        snap.mkdir(parents=True, exist_ok=True)
        (snap / "config.json").write_text("{}")


@pytest.fixture
def project(tmp_path: Path, clean_lab: Lab):
    """A user's repository: recipes/, a cluster.toml for the lab's nodes, compiled into out/."""
    lab = clean_lab
    (tmp_path / "recipes").mkdir()

    def make(recipes: dict[str, str], nodes: int = 3) -> Path:
        for rid, text in recipes.items():
            (tmp_path / "recipes" / rid).mkdir(exist_ok=True)
            (tmp_path / "recipes" / rid / "recipe.toml").write_text(text)
        lab.write_cluster(tmp_path / "cluster.toml", lab.nodes[:nodes])
        put_model(lab, lab.nodes[:nodes])
        run(lab, tmp_path, "build", check=True)
        return tmp_path

    yield make
    for rid in os.listdir(tmp_path / "recipes"):  # never leave ranks running for the next test
        run(lab, tmp_path, "down", rid)


def run(lab: Lab, cwd: Path, *args: str, check: bool = False, timeout: float = 180) -> subprocess.CompletedProcess:
    proc = subprocess.run(["recipegen", *args], cwd=cwd, env=lab.env, capture_output=True, text=True,
                          timeout=timeout)
    assert "Traceback" not in proc.stderr, proc.stderr
    if check:
        assert proc.returncode == 0, f"recipegen {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
    return proc


def containers(lab: Lab, node, recipe: str) -> list[dict]:
    out = lab.docker(node, "ps", "-a", "--filter", f"label=dev.recipegen.recipe={recipe}",
                     "--format", "{{json .}}").stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def models(url: str) -> set[str]:
    with urllib.request.urlopen(url + "/v1/models", timeout=5) as response:
        return {m["id"] for m in json.load(response)["data"]}
