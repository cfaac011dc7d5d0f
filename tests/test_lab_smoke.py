"""The lab itself works: nodes reach each other, Compose and Swarm deploy on them for real, and the
engine stand-ins keep the real engines' rank protocol. The deploy acceptance tests build on this."""

from __future__ import annotations

import json
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import jsonschema
import pytest

from lab import IFNAME, IMAGE, LAB_MEMLOCK, LIGHT_RAY, RAY_IMAGE, Lab, Node
from lab.netlab import SCHEMA
from helpers.labsmoke import HTTP_TIMEOUT, http_get, run_detached, wait_http, wait_log  # noqa: F401 - moved to tests/helpers/

pytestmark = pytest.mark.lab

MODEL = "org/model"
# A real engine image name: alias_image tags the stand-in so (nothing can be pulled here).
REAL_IMAGE = "vllm/vllm-openai:latest"
# Nothing listens there on any node: a worker pointed at it must give up.
DEAD_PORT = 29599
# Workers in these tests give up quickly instead of after the stand-ins' default 20 s.
FAST_FAIL = {"LAB_JOIN_TIMEOUT": "3"}


# --- helpers -------------------------------------------------------------------------------


def compose_file(path: Path, node: Node, head: Node, command: list[str],
                 env: dict[str, str] | None = None, image: str = IMAGE) -> Path:
    """A per-node compose.yaml of the shape the compiler emits (JSON is YAML)."""
    service = {
        "image": image,
        "network_mode": "host",
        "ipc": "host",
        "shm_size": "1gb",
        "ulimits": {"memlock": {"soft": LAB_MEMLOCK, "hard": LAB_MEMLOCK},
                    "stack": {"soft": 67108864, "hard": 67108864}},
        "environment": {"NCCL_SOCKET_IFNAME": IFNAME, "VLLM_HOST_IP": node.address,
                        "MASTER_ADDR": head.address, **(env or {})},
        "command": command,
        "volumes": [{"type": "bind", "source": str(node.hf_cache),
                     "target": "/root/.cache/huggingface", "bind": {"create_host_path": True}}],
        "deploy": {"resources": {"reservations": {"devices": [
            {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]}}},
        "restart": "on-failure:3",
        "stop_grace_period": "5s",
    }
    path.write_text(json.dumps({"name": "demo", "services": {"engine": service}}, indent=2))
    return path


def vllm_rank(rank: int, nnodes: int, head: Node) -> list[str]:
    argv = ["vllm", "serve", MODEL, "--tensor-parallel-size", str(nnodes),
            "--pipeline-parallel-size", "1", "--nnodes", str(nnodes), "--node-rank", str(rank),
            "--master-addr", head.address, "--master-port", "29501"]
    return argv + ["--headless"] if rank else argv


def wait_exit(lab: Lab, node: Node, container: str, timeout: float = 60) -> int:
    """Wait until a container has exited (bounded) and return its exit code."""
    out = lab.docker(node, "wait", container, timeout=timeout).stdout
    return int(out.strip())


def inspect(lab: Lab, node: Node, container: str) -> dict:
    return json.loads(lab.docker(node, "inspect", container).stdout)[0]


def compose(lab: Lab, node: Node, file: Path, *args: str):
    return lab.docker(node, "compose", "-f", str(file), *args, timeout=180)


def models_of(body: bytes) -> list[str]:
    listing = json.loads(body)
    assert listing["object"] == "list"
    return [m["id"] for m in listing["data"]]


# --- the lab as such -----------------------------------------------------------------------


def test_nodes_are_reachable_and_have_the_image(lab: Lab):
    assert len(lab.nodes) >= 3
    assert len({n.address for n in lab.nodes}) == len(lab.nodes)
    for node in lab.nodes:
        assert node.hf_cache.is_dir()
        assert lab.docker(node, "image", "inspect", IMAGE, "--format", "{{.Id}}").stdout
        info = json.loads(lab.docker(node, "info", "--format", "{{json .}}").stdout)
        assert info["Name"] == node.name
        assert lab.docker(node, "compose", "version").stdout.startswith("Docker Compose")


def test_cluster_file_matches_schema(lab: Lab, tmp_path: Path):
    path = lab.write_cluster(tmp_path / "cluster.toml", nodes=lab.nodes[:2])
    text = path.read_text()
    assert text.startswith(f"#:schema {SCHEMA}\n")
    cluster = tomllib.loads(text)
    schema = json.loads(SCHEMA.read_text())
    jsonschema.validate(cluster, schema, format_checker=jsonschema.FormatChecker())
    assert [n["name"] for n in cluster["nodes"]] == ["spark1", "spark2"]
    assert cluster["nodes"][1] == {"name": "spark2", "address": lab.nodes[1].address,
                                   "context": lab.nodes[1].context,
                                   "home": str(lab.nodes[1].home)}
    assert cluster["ulimits"]["memlock"] == LAB_MEMLOCK
    assert cluster["env"]["NCCL_SOCKET_IFNAME"] == IFNAME


def test_dockerd_can_be_stopped_and_started(clean_lab: Lab):
    lab, node = clean_lab, clean_lab.nodes[1]
    lab.stop_dockerd(node)
    assert not lab.dockerd_running(node)
    assert lab.docker(node, "info", check=False).returncode != 0
    lab.start_dockerd(node)
    assert lab.docker(node, "image", "inspect", IMAGE, "--format", "{{.Id}}").stdout


# --- compose across nodes ------------------------------------------------------------------


def test_compose_two_ranks_serve(clean_lab: Lab, tmp_path: Path):
    lab = clean_lab
    head, worker = lab.nodes[:2]
    files = {}
    for rank, node in enumerate((head, worker)):
        argv = vllm_rank(rank, 2, head)
        if rank == 0:  # flags the stand-in must skip, in the forms real recipes use them
            argv += ["--max-model-len", "32768", "--enable-prefix-caching",
                     "--override-generation-config", '{"temperature": 0.6, "top_p": 0.95}',
                     "--served-model-name=demo-model", "--gpu-memory-utilization=0.8"]
        files[node.name] = compose_file(tmp_path / f"{node.name}.yaml", node, head, argv,
                                        image=REAL_IMAGE)
    lab.alias_image(REAL_IMAGE, nodes=(head, worker))
    try:
        for node in (head, worker):
            compose(lab, node, files[node.name], "up", "-d")
        wait_http(f"http://{head.address}:8000/health")
        body = wait_http(f"http://{head.address}:8000/v1/models")
        assert json.loads(body) == {"object": "list", "data": [
            {"id": "demo-model", "object": "model", "owned_by": "vllm"}]}
        assert_engine_container(lab, worker, files[worker.name])
        worker_id = compose(lab, worker, files[worker.name], "ps", "-q", "engine").stdout.strip()
        assert "joined" in lab.docker(worker, "logs", worker_id).stdout
    finally:
        for node in (head, worker):
            compose(lab, node, files[node.name], "down", "--timeout", "5")
    for node in (head, worker):
        assert lab.docker(node, "ps", "-aq").stdout.strip() == ""


def assert_engine_container(lab: Lab, node: Node, file: Path) -> None:
    """What docker inspect shows of a compose engine service, as the compiler means it."""
    container = compose(lab, node, file, "ps", "-q", "engine").stdout.strip()
    info = inspect(lab, node, container)
    host = info["HostConfig"]
    assert host["NetworkMode"] == "host"
    assert host["IpcMode"] == "host"
    assert host["ShmSize"] == 1 << 30
    assert [r["Driver"] for r in host["DeviceRequests"]] == ["nvidia"]
    assert host["DeviceRequests"][0]["Capabilities"] == [["gpu"]]
    assert {u["Name"]: u["Hard"] for u in host["Ulimits"]}["memlock"] == LAB_MEMLOCK
    assert f"NCCL_SOCKET_IFNAME={IFNAME}" in info["Config"]["Env"]
    assert info["State"]["Running"]
    logs = lab.docker(node, "logs", container).stdout
    assert f"[vllm] env: NCCL_SOCKET_IFNAME={IFNAME}" in logs
    assert f"[vllm] env: VLLM_HOST_IP={node.address}" in logs


def test_worker_without_head_fails_clearly(clean_lab: Lab):
    lab = clean_lab
    head, worker = lab.nodes[:2]
    argv = vllm_rank(1, 2, head)
    argv[argv.index("--master-port") + 1] = str(DEAD_PORT)
    name = run_detached(lab, worker, "orphan", argv, FAST_FAIL)
    assert wait_exit(lab, worker, name) != 0
    logs = lab.docker(worker, "logs", name)
    assert f"cannot reach head at {head.address}:{DEAD_PORT}" in logs.stderr
    lab.docker(worker, "rm", name)


# --- the other engines' protocols ----------------------------------------------------------


def test_vllm_ray_head_waits_for_ray_worker(ray_lab: Lab):
    """The stand-in vLLM on real Ray serves only once ray.nodes() shows tensor x pipeline live nodes."""
    lab = ray_lab
    head, worker = lab.nodes[:2]
    serve = (f"ray start --head --port=6379 --node-ip-address={head.address} {' '.join(LIGHT_RAY)} "
             "--include-dashboard=false && "
             f"exec vllm serve {MODEL} --tensor-parallel-size 2 --port 8001 "
             "--distributed-executor-backend ray")
    run_detached(lab, head, "ray-head", ["sh", "-c", serve], image=RAY_IMAGE)
    wait_log(lab, head, "ray-head", "waiting for 1 Ray workers", 120)
    time.sleep(2)
    assert http_get_or_none(f"http://{head.address}:8001/health") is None  # no worker yet
    run_detached(lab, worker, "ray-worker",
                 ["ray", "start", "--block", f"--address={head.address}:6379",
                  f"--node-ip-address={worker.address}", *LIGHT_RAY], image=RAY_IMAGE)
    assert models_of(wait_http(f"http://{head.address}:8001/v1/models", timeout=180)) == [MODEL]
    lab.remove_containers(lab.nodes[:2])


def test_sglang_three_ranks(clean_lab: Lab):
    lab = clean_lab
    nodes = lab.nodes[:3]
    head = nodes[0]
    for rank, node in enumerate(nodes):
        argv = ["python3", "-m", "sglang.launch_server", "--model-path", MODEL, "--tp", "3",
                "--dist-init-addr", f"{head.address}:29501", "--nnodes", "3",
                "--node-rank", str(rank), "--host", "0.0.0.0", "--trust-remote-code",
                "--served-model-name", "glm", "--context-length", "131072"]
        run_detached(lab, node, f"sglang{rank}", argv)
        if rank == 1:  # one of two workers: the head must not serve yet
            time.sleep(1)
            assert http_get_or_none(f"http://{head.address}:30000/health") is None
    assert models_of(wait_http(f"http://{head.address}:30000/v1/models")) == ["glm"]
    # Workers serve no HTTP.
    assert http_get_or_none(f"http://{nodes[1].address}:30000/health") is None
    lab.remove_containers(nodes)


def http_get_or_none(url: str) -> int | None:
    try:
        return http_get(url)[0]
    except OSError:
        return None


# --- swarm ---------------------------------------------------------------------------------


def test_swarm_places_gpu_task_on_labelled_node(clean_lab: Lab, tmp_path: Path):
    lab = clean_lab
    first, second = lab.nodes[:2]
    manager = lab.init_swarm([first, second])
    stack = {
        "services": {"probe": {
            "image": IMAGE,
            "command": ["sh", "-c", "env; df /dev/shm; exec sleep 3600"],
            "networks": ["hostnet"],
            "volumes": [{"type": "tmpfs", "target": "/dev/shm", "tmpfs": {"size": 1 << 30}}],
            "deploy": {
                "placement": {"constraints": [f"node.labels.recipegen.node=={second.name}"]},
                "resources": {"reservations": {"generic_resources": [
                    {"discrete_resource_spec": {"kind": "NVIDIA_GPU", "value": 1}}]}},
                "restart_policy": {"condition": "on-failure", "max_attempts": 3},
            },
        }},
        "networks": {"hostnet": {"external": True, "name": "host"}},
    }
    file = tmp_path / "stack.yaml"
    file.write_text(json.dumps(stack))
    try:
        lab.docker(manager, "stack", "deploy", "-c", str(file), "demo", timeout=120)
        container = wait_container(lab, second, "com.docker.stack.namespace=demo")
        env = inspect(lab, second, container)["Config"]["Env"]
        assert f"DOCKER_RESOURCE_NVIDIA_GPU={second.gpu_id}" in env
        assert lab.docker(first, "ps", "-q").stdout.strip() == ""
    finally:
        lab.leave_swarm()
        lab.remove_containers([first, second])


def wait_container(lab: Lab, node: Node, label: str, timeout: float = 60) -> str:
    """The id of a running container with label on node, waiting for it (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ids = lab.docker(node, "ps", "-q", "--filter", f"label={label}").stdout.split()
        if ids:
            return ids[0]
        time.sleep(0.5)
    pytest.fail(f"no running container labelled {label} on {node.name} within {timeout:.0f}s")


# --- more nodes ----------------------------------------------------------------------------


def test_factory_grows_the_lab(lab_factory):
    lab = lab_factory(4)
    assert [n.name for n in lab.nodes[:4]] == ["spark1", "spark2", "spark3", "spark4"]
    newest, first = lab.nodes[3], lab.nodes[0]
    assert lab.docker(newest, "info", "--format", "{{.Name}}").stdout.strip() == newest.name
    ping = lab.docker(newest, "run", "--rm", "--network", "host", IMAGE,
                      "ping", "-c", "1", "-W", "2", first.address)
    assert "1 packets received" in ping.stdout
