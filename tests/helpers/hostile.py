"""Shared by the tests: moved from tests/test_hostile_values.py, which uses them too."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


BASE = {"engine": 'engine = "vllm"', "docker_image": 'docker_image = "vllm/vllm-openai:v0.11.0"',
        "model": 'model = "Qwen/Qwen3-32B"'}


CLUSTER_NODES = '[[nodes]]\nname = "n1"\naddress = "10.9.0.1"\ncontext = "n1"\n'


def recipe_text(line: str) -> str:
    """Three base lines (the one `line` sets replaced by a comment), then `line` as line 4."""
    key = line.split("=", 1)[0].strip()
    return "\n".join(BASE[k] if k != key else "# (set below)" for k in BASE) + "\n" + line + "\n"


def cluster_text(line: str) -> str:
    name = '# (set below)' if line.startswith("name") else 'name = "lab"'
    return f"{name}\n{line}\n{CLUSTER_NODES}"


ACCEPTED = [  # (recipe line, cluster line)
    ('shm_size = "32GiB"', 'stop_grace_period = "1ns"'), ('shm_size = "32gb"', 'stop_grace_period = "1.5h"'),
    ('shm_size = "32g"', 'stop_grace_period = "1h30m"'), ('shm_size = "32G"', 'stop_grace_period = "300ms"'),
    ('shm_size = "512MiB"', 'stop_grace_period = "2us"'), ('shm_size = "1.5g"', 'stop_grace_period = "2µs"'),
    ('shm_size = "1073741824"', 'stop_grace_period = "2μs"'), ('shm_size = "64mb"', 'stop_grace_period = "0"'),
    ('shm_size = "16gb"', 'ulimits = { memlock = "unlimited", stack = "unlimited" }'),
    ('name = "2024-05-01"', 'env = { A = "12:30:00", B = "2024-05-01T00:00:00Z", C = "off" }'),
    ('env = { D = "2024-05-01", E = "12:30:00" }', 'name = "2024-05-01"'),
    ('extra_mounts = [{ host = "/2024-05-01", container = "/12:30:00" }]', 'hf_cache = "/2024-05-01"'),
    ('args = ["--served-model-name", "2024-05-01", "--x", "12:30:00"]', 'gpu_memory_ceiling = 1.0'),
]
