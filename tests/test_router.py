"""The router (issue 31), compile side: what `build` writes for a cluster's `[router]`, what `validate` refuses, and
the generated haproxy.cfg run for real (Debian's haproxy, stand-in OpenAI servers on loopback).

The golden case tests/golden/router holds the whole generated tree (test_golden.py compares it and runs every
YAML file through real Compose and the compose-spec schema); the tests here check one property each.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from helpers.routerkit import StandIn, chat, free_port, need_haproxy, request, start_haproxy, wait_listening
from helpers.golden import GOLDEN, REPO, recipegen, snapshot, write_project
from helpers.routerproject import CLUSTER, recipe, router_table, serving  # noqa: F401 - moved to tests/helpers/

CASE = GOLDEN / "router"


def generated_configs() -> list[Path]:
    return sorted(GOLDEN.glob("*/expected/_router/haproxy.cfg")) + sorted((REPO / "out").glob("_router/haproxy.cfg"))


# --- what build writes ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """out/_router/ of the golden case built now (the properties are the compiler's, not the recorded files')."""
    project = tmp_path_factory.mktemp("router-case") / "p"
    shutil.copytree(CASE, project, ignore=shutil.ignore_patterns("expected"))
    assert recipegen(project, "build").exit_code == 0
    return project / "out" / "_router"


def test_golden_case_routes_every_served_name(fresh: Path):
    """Each served name (--served-model-name and its aliases, `=` form too, else the model) goes to its recipe's
    head address and port; the recipe left out of the router's list is not routed."""
    config = (fresh / "haproxy.cfg").read_text("utf-8")
    routes = {line.split()[1]: line for line in config.splitlines() if line.strip().startswith("use_backend head_")}
    assert set(routes) == {"head_192.168.100.10_8000", "head_192.168.100.11_30000", "head_192.168.100.11_8001"}
    assert "-m str -- 'qwen3-coder' 'qwen3-coder-30b'" in routes["head_192.168.100.10_8000"]
    assert "'glm-4.5-air'" in routes["head_192.168.100.11_30000"]
    assert "'Qwen/Qwen3-0.6B'" in routes["head_192.168.100.11_8001"]
    servers = [line.split()[2] for line in config.splitlines() if line.strip().startswith("server head ")]
    assert servers == ["192.168.100.10:8000", "192.168.100.11:30000", "192.168.100.11:8001"]
    assert "ssl verify none" in config.splitlines()[[i for i, l in enumerate(config.splitlines())
                                                      if "server head 192.168.100.11:8001" in l][0]]
    models = json.loads(next(l for l in config.splitlines() if "/v1/models" in l and "return" in l)
                        .split(" string '", 1)[1].split("' if ", 1)[0])
    assert [m["id"] for m in models["data"]] == ["qwen3-coder", "qwen3-coder-30b", "glm-4.5-air", "Qwen/Qwen3-0.6B"]


def test_haproxy_settings_the_issue_asks_for(fresh: Path):
    config = (fresh / "haproxy.cfg").read_text("utf-8")
    for needed in ("option http-buffer-request", "option http-no-delay", "json_query('$.model')",
                   "tune.bufsize 4259840"):  # max_body 4m + 64 KiB of headers
        assert needed in config, needed
    # Each backend's check: the head lists the recipe's first name (another recipe's head at that address, the
    # node's one GPU taken in turn, does not pass); /health where the engine asks for an API key (VLLM_API_KEY).
    backends = {part.split("\n", 1)[0].strip(): part for part in config.split("\nbackend ")[1:]}
    assert "option httpchk GET /v1/models\n    http-check expect rstring '\"id\" *: *\"qwen3-coder\"'" \
        in backends["head_192.168.100.10_8000"]
    assert "http-check expect rstring '\"id\" *: *\"glm-4\\.5-air\"'" in backends["head_192.168.100.11_30000"]
    assert "option httpchk GET /health\n    http-check expect status 200" in backends["head_192.168.100.11_8001"]


def test_compose_file_carries_the_config_and_no_key(fresh: Path):
    compose = yaml.safe_load((fresh / "spark1" / "compose.yaml").read_text("utf-8"))
    config = (fresh / "haproxy.cfg").read_text("utf-8")
    assert compose["configs"]["haproxy.cfg"]["content"].replace("$$", "$") == config
    service = compose["services"]["router"]
    assert service["network_mode"] == "host"
    assert service["environment"] == {"RECIPEGEN_ROUTER_API_KEY": None}  # from the deploying shell, never a value
    stack = yaml.safe_load((fresh / "stack.yaml").read_text("utf-8"))
    assert stack["configs"]["haproxy.cfg"]["file"] == "./haproxy.cfg"
    assert stack["services"]["router-spark1"]["deploy"]["placement"]["constraints"] == [
        "node.labels.recipegen.node == spark1"]


def test_a_key_in_the_environment_never_reaches_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("RECIPEGEN_ROUTER_API_KEY", "sk-live-secret-123")
    project = tmp_path / "p"
    shutil.copytree(CASE, project, ignore=shutil.ignore_patterns("expected"))
    assert recipegen(project, "build").exit_code == 0
    assert not [p for p, data in snapshot(project / "out").items() if data and b"sk-live-secret-123" in data]


def test_output_is_deterministic(tmp_path: Path):
    outs = []
    for i in range(2):
        project = tmp_path / str(i)
        shutil.copytree(CASE, project, ignore=shutil.ignore_patterns("expected"))
        assert recipegen(project, "build").exit_code == 0
        outs.append(snapshot(project / "out" / "_router"))
    assert outs[0] == outs[1] and outs[0]


def test_a_one_recipe_build_leaves_out_current_and_removing_the_router_prunes(tmp_path: Path):
    """Issue 43: `recipegen build <one recipe>` with a cluster that has a [router] rebuilds out/_router/ too (it
    is compiled from every recipe of the project), so `build --check` passes right after it."""
    project = tmp_path / "p"
    shutil.copytree(CASE, project, ignore=shutil.ignore_patterns("expected"))
    assert recipegen(project, "build").exit_code == 0
    (project / "recipes" / "glm-air" / "recipe.toml").write_text(
        (project / "recipes" / "glm-air" / "recipe.toml").read_text() .replace("glm-4.5-air", "glm-air-renamed"))
    built = recipegen(project, "build", "glm-air")
    assert built.exit_code == 0, built.output
    assert "glm-air-renamed" in (project / "out" / "_router" / "haproxy.cfg").read_text()
    assert recipegen(project, "build", "--check").exit_code == 0
    cluster = project / "cluster.toml"
    cluster.write_text(cluster.read_text().split("[router]")[0])
    assert recipegen(project, "build", "glm-air").exit_code == 0  # a one-recipe build drops it as well
    assert not (project / "out" / "_router").exists()
    assert recipegen(project, "build", "--check").exit_code == 0


def test_a_one_recipe_build_says_why_the_router_is_not_rebuilt(tmp_path: Path):
    """Another recipe that does not load: the router (built from every recipe) is left as it was, said in one
    line; the recipe named is built."""
    project = tmp_path / "p"
    shutil.copytree(CASE, project, ignore=shutil.ignore_patterns("expected"))
    assert recipegen(project, "build").exit_code == 0
    before = snapshot(project / "out" / "_router")
    (project / "recipes" / "qwen3-coder" / "recipe.toml").write_text("engine = \n")
    built = recipegen(project, "build", "glm-air")
    assert built.exit_code == 0, built.output
    assert ("out/_router: warning: not rebuilt: recipes/qwen3-coder/recipe.toml does not load (`recipegen "
            "validate` says why), and this stack is built from every recipe") in built.output, built.output
    assert snapshot(project / "out" / "_router") == before


# --- what validate refuses ------------------------------------------------------------------------------------------

def test_a_served_name_two_recipes_claim_is_an_error(tmp_path: Path):
    project = write_project(tmp_path / "p", CLUSTER + router_table(), {
        "one": recipe("org/one", "a", "--served-model-name", "chat", "one-alias"),
        "two": recipe("org/two", "b", "--max-num-seqs", "4", "--served-model-name", "two", "chat")})
    result = recipegen(project, "validate")
    assert result.exit_code == 1
    line = ("recipes/two/recipe.toml:5:62: error[served-name]: args: recipe 'two' serves 'chat', and so does recipe "
            "'one'")
    assert line in result.output, result.output
    built = recipegen(project, "build")
    assert built.exit_code == 1 and line in built.output and not (project / "out").exists()


def test_a_model_served_twice_is_an_error_unless_the_router_lists_one(tmp_path: Path):
    recipes = {"one": recipe("org/same", "a"), "two": recipe("org/same", "b")}
    project = write_project(tmp_path / "p", CLUSTER + router_table(), recipes)
    result = recipegen(project, "validate")
    assert "recipes/two/recipe.toml:3:1: error[served-name]: model: recipe 'two' serves 'org/same'" in result.output
    project = write_project(tmp_path / "q", CLUSTER + router_table(recipes=["two"]), recipes)
    assert recipegen(project, "validate").exit_code == 0
    assert recipegen(project, "build").exit_code == 0
    assert "127.0.0.2:8000" in (project / "out" / "_router" / "haproxy.cfg").read_text()


def test_two_profiles_at_one_head_share_their_name(tmp_path: Path):
    """A recipe and one extending it (the shipped deepseek-v4-flash-eugr and its agent profile): one name at the same
    head address and port. Only one can run there at a time and the router sends the name to that address either
    way, so it is no clash: the name is listed once and routed to the first recipe's backend."""
    base = recipe("org/big", "a", "--served-model-name", "big")
    project = write_project(tmp_path / "p", CLUSTER + router_table(), {
        "big": base, "big-agent": 'extends = "big"\nargs = ["--max-num-seqs", "6"]\n'})
    assert recipegen(project, "validate", "--strict").exit_code == 0
    assert recipegen(project, "build").exit_code == 0
    config = (project / "out" / "_router" / "haproxy.cfg").read_text()
    assert config.count('{"id":"big",') == 1 and '"owned_by":"big"' in config
    # Issue 41: one backend per head endpoint, so no second rule for the same name that could never match, and
    # one health check (`ps` says which recipe holds the head, from its container's label).
    rules = [line.split()[1] for line in config.splitlines() if line.strip().startswith("use_backend head_")]
    assert rules == ["head_127.0.0.1_8000"]
    assert [line for line in config.splitlines() if line.startswith("backend head_")] == [
        "backend head_127.0.0.1_8000"]
    assert "of recipe(s): big big-agent" in config
    moved = write_project(tmp_path / "q", CLUSTER + router_table(), {
        "big": base, "big-agent": 'extends = "big"\nnodes = ["b"]\n'})
    result = recipegen(moved, "validate")
    assert result.exit_code == 1 and "error[served-name]" in result.output and "at another head" in result.output


def test_without_a_router_two_recipes_may_serve_one_name(tmp_path: Path):
    project = write_project(tmp_path / "p", CLUSTER, {"one": recipe("org/same", "a"), "two": recipe("org/same", "b")})
    assert recipegen(project, "validate").exit_code == 0


@pytest.mark.parametrize("table, recipes, expected", [
    (router_table(port=8000), {"one": recipe("org/one", "a")},
     "cluster.toml:15:8: error[port-collision]: router.port: the router's port 8000 is also the API port of 'one'"),
    (router_table(port=29501), {},
     "cluster.toml:15:8: error[port-collision]: router.port: the router's port 29501 is also master_port"),
    (router_table(nodes=["a", "c"]), {},
     "cluster.toml:14:15: error: router.nodes[1]: the cluster has no node 'c' (it has a, b)"),
    (router_table(), {"one": recipe("org/one", "a", "--host", "127.0.0.1")},
     "recipes/one/recipe.toml:5:9: error[router-reach]: args: --host 127.0.0.1: the router reaches 'one' at its "
     "head's fabric address 127.0.0.1"),
    (router_table(), {"one": recipe("org/one", "a", "--served-model-name", "\"it's\"")},
     "recipes/one/recipe.toml:5:32: error[router-name]: args: served name \"it's\" holds a quote"),
])
def test_router_problems_name_file_line_and_key(tmp_path: Path, table: str, recipes: dict[str, str], expected: str):
    project = write_project(tmp_path / "p", CLUSTER + table, recipes or {"x": recipe("org/x", "b")})
    result = recipegen(project, "validate")
    assert result.exit_code == 1 and expected in result.output, result.output
    built = recipegen(project, "build")
    assert built.exit_code == 1 and expected in built.output and not (project / "out").exists(), built.output
    assert "Traceback" not in built.output


def test_a_listed_recipe_the_project_lacks_is_a_warning(tmp_path: Path):
    """A cluster file shared between projects may name recipes this one lacks: the others are still routed."""
    project = write_project(tmp_path / "p", CLUSTER + router_table(recipes=["one", "nope"]),
                            {"one": recipe("org/one", "a")})
    result = recipegen(project, "validate")
    assert result.exit_code == 0
    assert ("cluster.toml:15:19: warning[router-name]: router.recipes[1]: no recipe 'nope' in the project: not "
            "routed") in result.output
    assert recipegen(project, "validate", "--strict").exit_code == 1
    assert recipegen(project, "build").exit_code == 0
    assert "'org/one'" in (project / "out" / "_router" / "haproxy.cfg").read_text()


# --- the generated config, run for real -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def haproxy() -> str:
    return need_haproxy()


@pytest.mark.parametrize("path", generated_configs(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_haproxy_accepts_the_config(path: Path, haproxy: str):
    """`haproxy -c`: the config parses, with no warning (a warning is a rule HAProxy reorders or ignores)."""
    run = subprocess.run([haproxy, "-c", "-f", str(path)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "WARNING" not in run.stdout + run.stderr, run.stdout + run.stderr


@pytest.fixture
def routed(tmp_path: Path, haproxy: str, monkeypatch: pytest.MonkeyPatch):
    """Two recipes on two 'nodes' (127.0.0.1, 127.0.0.2), stand-ins as their heads, the built router running."""
    monkeypatch.setenv("LAB_DECODE_TPS", "200")
    monkeypatch.setenv("LAB_TTFT_BASE_MS", "5")
    with serving(tmp_path / "p", {"alpha": "127.0.0.1", "beta": "127.0.0.2"}) as (_, router, heads):
        yield router, heads


def test_streams_reach_each_model_unbuffered(routed):
    port, _ = routed
    for model in ("alpha", "beta"):
        answer = request("127.0.0.1", port, "POST", "/v1/chat/completions", chat(model, max_tokens=40))
        assert answer.status == 200 and answer.chunks == 40, answer.body[:300]
        assert f'"model": "{model}"'.encode() in answer.body
        # 40 tokens at 200/s take ~0.2 s: the first arrives long before the last (nothing holds the stream back).
        assert answer.arrivals[-1] - answer.arrivals[0] > 0.15 and answer.ttft < 0.1, answer.arrivals


def test_unknown_model_and_no_model_get_openai_shaped_404(routed):
    port, _ = routed
    answer = request("127.0.0.1", port, "POST", "/v1/chat/completions", chat("gamma"))
    assert answer.status == 404
    error = answer.json()["error"]
    assert error["code"] == 404 and error["param"] == "model" and "`gamma`" in error["message"]
    assert "alpha, beta" in error["message"]
    quoted = request("127.0.0.1", port, "POST", "/v1/completions", {"model": 'a"b\\c', "prompt": "x"})
    assert quoted.status == 404 and "`a\"b\\c`" in quoted.json()["error"]["message"]  # valid JSON, escaped
    assert request("127.0.0.1", port, "GET", "/v1/nothing").json()["error"]["code"] == 404


def test_models_lists_every_served_name(routed):
    port, _ = routed
    answer = request("127.0.0.1", port, "GET", "/v1/models")
    assert answer.status == 200 and [m["id"] for m in answer.json()["data"]] == ["alpha", "beta"]


def test_a_stopped_backend_fails_fast_naming_the_model_and_comes_back(routed):
    port, heads = routed
    heads["beta"].stop()
    start = time.monotonic()
    while True:  # what a client sees from the stop on: an OpenAI-shaped 503 naming the model, within a second
        answer = request("127.0.0.1", port, "POST", "/v1/chat/completions", chat("beta"), timeout=5)
        assert answer.status == 503 and answer.total < 1.5, (answer.status, answer.total)
        error = answer.json()["error"]
        assert error["code"] == 503 and "model beta is not available" in error["message"], error
        if "its head does not pass the router check" in error["message"]:
            break  # taken out by its health checks: answered at once, without trying it
        assert time.monotonic() - start < 3, "the health checks did not take the stopped head out"
    assert answer.total < 0.2
    assert request("127.0.0.1", port, "POST", "/v1/chat/completions", chat("alpha")).status == 200
    heads["beta"].start()
    start = time.monotonic()
    while request("127.0.0.1", port, "POST", "/v1/chat/completions", chat("beta")).status != 200:
        assert time.monotonic() - start < 3
        time.sleep(0.1)


def test_body_larger_than_max_body_gets_413(routed):
    port, _ = routed
    big = json.dumps({**chat("alpha"), "pad": "x" * (2 * 1024 * 1024 + 10)}).encode()
    answer = request("127.0.0.1", port, "POST", "/v1/chat/completions", big)
    assert answer.status == 413 and answer.json()["error"]["code"] == 413


def test_api_key_from_the_environment(tmp_path: Path, haproxy: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LAB_TTFT_BASE_MS", "5")
    with serving(tmp_path / "p", {"alpha": "127.0.0.1"}, key="k-123") as (_, router, _heads):
        denied = request("127.0.0.1", router, "POST", "/v1/chat/completions", chat("alpha"))
        assert denied.status == 401 and denied.json()["error"]["type"] == "AuthenticationError"
        wrong = request("127.0.0.1", router, "GET", "/v1/models", headers={"Authorization": "Bearer k-12"})
        assert wrong.status == 401
        ok = request("127.0.0.1", router, "POST", "/v1/chat/completions", chat("alpha"),
                     headers={"Authorization": "Bearer k-123"})
        assert ok.status == 200 and ok.chunks == 16
        assert request("127.0.0.1", router, "GET", "/health").status == 200  # probes need no key


def test_recipes_taking_turns_at_one_head_share_one_backend(tmp_path: Path, haproxy: str):
    """One GPU per node: recipes take turns at a node's address and port (the bundled cluster's qwen3-coder and
    deepseek both serve spark1:8000). One backend for that endpoint (issue 41): while alpha runs there, a request
    for beta reaches alpha's engine, which answers its own OpenAI 404 naming beta; with nothing there, the router's
    fast 503 names the model and both recipes."""
    port = free_port()
    router = free_port()
    project = write_project(tmp_path / "p", CLUSTER + router_table(port=router, health_interval="200ms"), {
        model: recipe(f"org/{model}", "a", "--served-model-name", model, "--port", str(port))
        for model in ("alpha", "beta")})
    assert recipegen(project, "build").exit_code == 0
    head = StandIn("127.0.0.1", port, "alpha").start()  # alpha runs at the shared address
    proc = start_haproxy(project / "out" / "_router" / "haproxy.cfg")
    try:
        wait_listening("127.0.0.1", router)
        time.sleep(0.8)  # health checks every 200 ms, two to change a server's state
        assert request("127.0.0.1", router, "POST", "/v1/chat/completions", chat("alpha", 3)).status == 200
        beta = request("127.0.0.1", router, "POST", "/v1/chat/completions", chat("beta", 3))
        assert beta.status == 404 and "`beta` does not exist" in beta.json()["error"]["message"], beta.body
        head.stop()
        time.sleep(0.8)
        beta = request("127.0.0.1", router, "POST", "/v1/chat/completions", chat("beta", 3))
        assert beta.status == 503 and "(recipe alpha or beta;" in beta.json()["error"]["message"], beta.body
    finally:
        proc.kill()
        proc.wait(timeout=10)
        head.stop()
