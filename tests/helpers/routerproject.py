"""Shared by the tests: moved from tests/test_router.py, which uses them too."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Iterator
from helpers.routerkit import StandIn, chat, free_port, need_haproxy, request, start_haproxy, wait_listening
from helpers.golden import GOLDEN, REPO, recipegen, snapshot, write_project

TESTS = Path(__file__).resolve().parent.parent


CLUSTER = """name = "loop"
gpu = "none"
rdma = false
[[nodes]]
name = "a"
address = "127.0.0.1"
context = "a"
[[nodes]]
name = "b"
address = "127.0.0.2"
context = "b"
"""


def recipe(model: str, node: str, *args: str) -> str:
    words = ", ".join(json.dumps(a) for a in args)
    return (f'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\nmodel = "{model}"\n'
            f'nodes = ["{node}"]\nargs = [{words}]\n')


def router_table(**keys: object) -> str:
    lines = ["", "[router]"] + [f"{k} = {json.dumps(v)}" for k, v in {"nodes": ["a"], **keys}.items()]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def serving(folder: Path, hosts: dict[str, str], key: str = "") -> Iterator[tuple[Path, int, dict[str, StandIn]]]:
    """A project whose recipes (one per model: its head's host) sit behind a built router, their stand-in heads
    and the router running (haproxy on the generated config, `key` as the API key): (project, port, heads)."""
    nodes = {"127.0.0.1": "a", "127.0.0.2": "b"}
    ports = {model: free_port(host) for model, host in hosts.items()}
    router = free_port()
    project = write_project(folder, CLUSTER + router_table(port=router, health_interval="200ms"), {
        model: recipe(f"org/{model}", nodes[host], "--served-model-name", model, "--port", str(ports[model]))
        for model, host in hosts.items()})
    assert recipegen(project, "build").exit_code == 0
    heads = {model: StandIn(host, ports[model], model).start() for model, host in hosts.items()}
    proc = start_haproxy(project / "out" / "_router" / "haproxy.cfg", {"RECIPEGEN_ROUTER_API_KEY": key})
    try:
        wait_listening("127.0.0.1", router)
        time.sleep(0.6)  # health checks every 200 ms, two to change a server's state
        yield project, router, heads
    finally:
        proc.kill()
        proc.wait(timeout=10)
        for head in heads.values():
            head.stop()
