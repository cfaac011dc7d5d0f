"""Shared by the tests: moved from tests/test_ray_lab.py, which uses them too."""

from __future__ import annotations

from pathlib import Path
from lab import RAY_IMAGE, Lab
from helpers.deploylab import MODEL, SERVED, models, put_model, run
from helpers.labengine import IFNAMES, worker_env

TESTS = Path(__file__).resolve().parent.parent


def ray_recipe(ray_args: list[str]) -> str:
    words = ", ".join(f'"{w}"' for w in ray_args)
    return f'''engine = "vllm"
docker_image = "{RAY_IMAGE}"
model = "{MODEL}"
required_nodes = 2
tensor_parallel_size = 2
distributed_backend = "ray"
args = ["--served-model-name", "{SERVED}"]
ray_args = [{words}]

[env]
HF_HUB_OFFLINE = "1"
'''


def ray_project(tmp_path: Path, lab: Lab, ray_args: list[str], join_timeout: str = "10m") -> Path:
    (tmp_path / "recipes" / "ray").mkdir(parents=True)
    (tmp_path / "recipes" / "ray" / "recipe.toml").write_text(ray_recipe(ray_args))
    cluster = lab.write_cluster(tmp_path / "cluster.toml", lab.nodes[:2])
    text = cluster.read_text().replace("[ulimits]", f'ray_join_timeout = "{join_timeout}"\n\n[ulimits]', 1)
    for node in lab.nodes[:2]:  # each node's own interface name, as on two real Sparks
        home = f'home = "{node.home}"\n'
        text = text.replace(home, f'{home}[nodes.env]\nNCCL_SOCKET_IFNAME = "{IFNAMES[node.name]}"\n')
    cluster.write_text(text)
    put_model(lab, lab.nodes[:2])
    run(lab, tmp_path, "build", check=True)
    return tmp_path


# What eugr and pfn pass, and the schema's example: head-only options Ray refuses on a worker.
HEAD_ONLY = ["--include-dashboard=false", "--redis-shard-ports", "6390"]
