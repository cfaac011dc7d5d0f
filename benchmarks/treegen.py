"""Generate a synthetic recipe tree (N recipes on an 8-node cluster) shaped like the shipped recipes."""

from __future__ import annotations

import shutil
from pathlib import Path

ENGINES = [
    # (engine, backend, nodes): a spread of the shapes the compiler handles
    ("vllm", "mp", 8), ("vllm", "ray", 8), ("sglang", "mp", 8),
]


def cluster_toml(nodes: int) -> str:
    lines = ['name = "bench-8"', 'user = "spark"', "[env]", 'NCCL_SOCKET_IFNAME = "enp1s0f0np0"',
             'GLOO_SOCKET_IFNAME = "enp1s0f0np0"', 'NCCL_IB_HCA = "rocep1s0f0,roceP2p1s0f0"']
    for i in range(nodes):
        lines += ["[[nodes]]", f'name = "spark{i + 1}"', f'address = "10.0.0.{i + 10}"', f'context = "spark{i + 1}"']
    return "\n".join(lines) + "\n"


def recipe_toml(i: int, seed: str) -> str:
    engine, backend, nodes = ENGINES[i % len(ENGINES)]
    entry = '["vllm", "serve"]' if engine == "vllm" else '["python3", "-m", "sglang.launch_server"]'
    # The shipped DeepSeek recipe's args and env: a realistic size for every synthetic recipe.
    args_env = seed.split("entrypoint = ", 1)[1].split("\n", 1)[1]
    if engine == "sglang":
        args_env = args_env.replace('"--gpu-memory-utilization", "0.85",', '"--mem-fraction-static", "0.85",')
    return (f'engine = "{engine}"\nname = "bench {i}"\ndocker_image = "example/engine:{i}"\n'
            f'model = "org/model-{i}"\nrequired_nodes = {nodes}\ntensor_parallel_size = {nodes}\n'
            f'distributed_backend = "{backend}"\nshm_size = "32gb"\nentrypoint = {entry}\n{args_env}')


def make_tree(root: Path, count: int, seed_recipe: Path, nodes: int = 8) -> Path:
    if root.exists():
        shutil.rmtree(root)
    (root / "recipes").mkdir(parents=True)
    (root / "cluster.toml").write_text(cluster_toml(nodes))
    seed = seed_recipe.read_text()
    for i in range(count):
        folder = root / "recipes" / f"bench-{i:04d}"
        folder.mkdir()
        (folder / "recipe.toml").write_text(recipe_toml(i, seed))
    return root
