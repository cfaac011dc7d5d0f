"""The renderer from a plan built by hand (kompose's habit: transformer tests build the intermediate object
directly, with no parsing). A RecipePlan is the one object the renderer, `explain`, the deployer and the tests
read, so what it says must reach the compose file and the stack as it is, whatever built it."""

from __future__ import annotations

from pathlib import Path

import yaml

from generator.plan.types import EnvVar, NodePlan, RecipePlan, Volume
from generator.read.origin import COMPILER, Origin
from generator.read.tomldoc import TomlDocument
from generator.render.templates import render_node, render_stack
from generator.resolve.model import Arg, Cluster, ContainerOptions, Node, Recipe, Ulimits

HERE = Origin("recipe", "recipes/hand/recipe.toml")


def _node(index: int) -> Node:
    return Node(index, f"n{index}", f"10.9.0.{index + 1}", f"ctx{index}", f"n{index}.local", "spark", "/home/spark",
                {})


def _plan(tmp_path: Path) -> RecipePlan:
    nodes = (_node(0), _node(1))
    cluster = Cluster(name="hand", path=tmp_path / "cluster.toml", user="spark", hf_cache="~/.cache/huggingface",
                      gpu="nvidia", rdma=False, master_port=29501, ray_port=6379, gpu_memory_ceiling=0.9,
                      gpus_per_node=1, stop_grace_period="60s", ulimits=Ulimits(), env={}, nodes=nodes,
                      document=TomlDocument(tmp_path / "cluster.toml", "", {}))
    recipe = Recipe(id="hand", path=tmp_path / "recipes" / "hand" / "recipe.toml", engine="vllm", name="By hand",
                    docker_image="vllm/vllm-openai:v0.11.0", docker_image_dir=None, image_dir_base=tmp_path,
                    model="org/hand", required_nodes=2, nodes=None, tensor_parallel_size=2,
                    pipeline_parallel_size=1, distributed_backend="mp", shm_size="32gb",
                    entrypoint=("vllm", "serve"), args=(), mounts=(), env={})

    def rank(index: int) -> NodePlan:
        words = ["vllm", "serve", "org/hand", "--tensor-parallel-size", "2", "--node-rank", str(index)]
        return NodePlan(
            recipe_id="hand", node=nodes[index], rank=index, model="org/hand", models=("org/hand",),
            image="vllm/vllm-openai:v0.11.0", build_context=None, command=tuple(Arg(w, COMPILER) for w in words),
            entrypoint_words=2, env=(EnvVar("HAND_MADE", f"rank-{index}", HERE),), pass_env=("HF_TOKEN",),
            volumes=(Volume("/data/hf", "/root/.cache/huggingface", False, HERE),), shm_size="32gb",
            ulimits=Ulimits(), gpu="nvidia", gpus=1, rdma=False, labels=(("recipegen.recipe", "hand"),),
            stop_grace_period="60s", container=ContainerOptions(restart="never"))

    return RecipePlan(recipe=recipe, cluster=cluster, nodes=(rank(0), rank(1)), input_hash="0" * 64,
                      serve_port=8000, served_model_name="org/hand", source="recipes/hand/recipe.toml",
                      cluster_source="cluster.toml")


def test_each_nodes_compose_file_says_what_its_plan_says(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    for rank in (0, 1):
        text = render_node(plan, rank)
        assert "recipes/hand/recipe.toml" in text.split("services:", 1)[0]  # the header names the source
        [service] = yaml.safe_load(text)["services"].values()
        assert service["entrypoint"] == ["vllm", "serve"]
        assert service["command"] == ["org/hand", "--tensor-parallel-size", "2", "--node-rank", str(rank)]
        assert service["environment"]["HAND_MADE"] == f"rank-{rank}"
        assert "HF_TOKEN" in service["environment"] and service["environment"]["HF_TOKEN"] is None  # never a value
        assert "/data/hf:/root/.cache/huggingface" in [v if isinstance(v, str) else f"{v['source']}:{v['target']}"
                                                       for v in service["volumes"]]
        assert service["network_mode"] == "host" and service["shm_size"] == "32gb"
        assert service["image"] == "vllm/vllm-openai:v0.11.0"
        assert service.get("restart", "no") == "no"  # restart = "never": no group watch, nothing restarts


def test_the_stack_places_each_rank_on_its_node(tmp_path: Path) -> None:
    stack = yaml.safe_load(render_stack(_plan(tmp_path)))
    placements = [s["deploy"]["placement"]["constraints"] for s in stack["services"].values()]
    assert placements == [["node.labels.recipegen.node == n0"], ["node.labels.recipegen.node == n1"]]
