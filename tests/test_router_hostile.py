"""The router against hostile input (issue 42, items 2, 3, 7, 8): its key never reaches out/, served names cannot
inject HAProxy options or break its checks, and settings HAProxy would take but serve badly are refused by key.
Live checks run Debian's haproxy on the generated config, as tests/test_router.py does.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from helpers.routerkit import StandIn, chat, free_port, haproxy_binary, request, start_haproxy, wait_listening
from helpers.golden import recipegen, snapshot, write_project
from helpers.routerproject import CLUSTER, recipe, router_table


@pytest.fixture(scope="module")
def haproxy() -> str:
    binary = haproxy_binary()
    if binary is None:
        pytest.fail("haproxy is missing: apt-get install haproxy (.ci/run installs it)")
    return binary


def refused(project: Path, *expected: str) -> str:
    """validate and build both refuse, in one line each naming the key; build writes nothing."""
    result = recipegen(project, "validate")
    assert result.exit_code == 1, result.output
    for line in expected:
        assert line in result.output, result.output
    built = recipegen(project, "build")
    assert built.exit_code == 1 and not (project / "out").exists(), built.output
    assert "Traceback" not in built.output
    return result.output


# --- item 2: the router's key ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["cluster", "node", "recipe"])
def test_the_key_variable_given_a_value_in_an_env_is_refused(tmp_path: Path, where: str):
    cluster = CLUSTER.replace('context = "a"\n', 'context = "a"\nenv = { GATE = "sk-gate-1" }\n') \
        if where == "node" else CLUSTER
    cluster = ('env = { GATE = "sk-gate-1" }\n' if where == "cluster" else "") + cluster
    body = recipe("org/one", "a") + ('[env]\nGATE = "sk-gate-1"\n' if where == "recipe" else "")
    project = write_project(tmp_path / "p", cluster + router_table(api_key_env="GATE"), {"one": body})
    output = refused(project, "error[secret]: ", "GATE is the router's API key (api_key_env)")
    file = "recipes/one/recipe.toml" if where == "recipe" else "cluster.toml"
    assert any(line.startswith(file + ":") and "error[secret]" in line for line in output.splitlines()), output


@pytest.mark.parametrize("name", ["PATH", "HOME", "USER", "SHELL", "HF_TOKEN", "LC_ALL"])
def test_a_well_known_variable_as_the_key_is_refused(tmp_path: Path, name: str):
    project = write_project(tmp_path / "p", CLUSTER + router_table(api_key_env=name), {"one": recipe("org/x", "a")})
    refused(project, f"error[secret]: router.api_key_env: '{name}' is a well-known variable")


def test_a_key_of_its_own_passes_and_never_reaches_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GATE", "sk-gate-live")
    project = write_project(tmp_path / "p", CLUSTER + router_table(api_key_env="GATE"), {"one": recipe("org/x", "a")})
    assert recipegen(project, "build").exit_code == 0
    assert not [p for p, data in snapshot(project / "out").items() if data and b"sk-gate-live" in data]


# --- item 3: served names that HAProxy would read as syntax ---------------------------------------------------------

def build_config(tmp_path: Path, *args: str) -> Path:
    project = write_project(tmp_path / "p", CLUSTER + router_table(), {"one": recipe("org/one", "a", *args)})
    built = recipegen(project, "build")
    assert built.exit_code == 0, built.output
    return project / "out" / "_router" / "haproxy.cfg"


def haproxy_check(haproxy: str, config: Path) -> None:
    run = subprocess.run([haproxy, "-c", "-f", str(config)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0 and "WARNING" not in run.stdout + run.stderr, run.stdout + run.stderr


def test_leading_dash_names_are_names_not_options(tmp_path: Path, haproxy: str):
    config = build_config(tmp_path, "--served-model-name=-f", "/etc/passwd")
    haproxy_check(haproxy, config)
    rule = next(line for line in config.read_text().splitlines() if line.strip().startswith("use_backend head_"))
    assert "-m str -- '-f' '/etc/passwd' }" in rule


def test_many_aliases_are_split_below_haproxys_64_words_a_line(tmp_path: Path, haproxy: str):
    config = build_config(tmp_path, "--served-model-name", *(f"alias-{i}" for i in range(130)))
    haproxy_check(haproxy, config)
    rules = [line for line in config.read_text().splitlines() if line.strip().startswith("use_backend head_")]
    assert len(rules) == 3 and all(len(line.split()) <= 64 for line in rules)
    assert sum(line.count("'alias-") for line in rules) == 130


def live(tmp_path: Path, served: str, *args: str):
    port, router = free_port(), free_port()
    project = write_project(tmp_path / "p", CLUSTER + router_table(port=router, health_interval="200ms"), {
        "one": recipe("org/one", "a", "--port", str(port), *args)})
    assert recipegen(project, "build").exit_code == 0
    head = StandIn("127.0.0.1", port, served).start()
    proc = start_haproxy(project / "out" / "_router" / "haproxy.cfg")
    wait_listening("127.0.0.1", router)
    time.sleep(0.8)  # two checks at 200 ms to come up
    return router, head, proc


@pytest.mark.parametrize("served, args", [
    ('say"hi', ("--served-model-name", "'say\"hi'")),
    ("-x", ("--served-model-name=-x",)),
])
def test_such_a_name_is_routed_and_its_head_is_up(tmp_path: Path, haproxy: str, served: str, args: tuple[str, ...]):
    """A `"` in a name: the check looks for it as JSON writes it (`\\"`), so the head comes up."""
    router, head, proc = live(tmp_path, served, *args)
    try:
        answer = request("127.0.0.1", router, "POST", "/v1/chat/completions", chat(served, 3))
        assert answer.status == 200, answer.body
        models = request("127.0.0.1", router, "GET", "/v1/models").json()
        assert [m["id"] for m in models["data"]] == [served]
    finally:
        proc.kill()
        proc.wait(timeout=10)
        head.stop()


# --- item 7: router settings ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("key, value, said", [
    ("max_body", "0", "router.max_body: '0': a body must be allowed more than 0 bytes and at most 1g"),
    ("max_body", "2g", "router.max_body: '2g': a body must be allowed more than 0 bytes and at most 1g"),
    ("max_body", "10t", "router.max_body: '10t'"),
    ("timeout", "0s", "router.timeout: '0s': must be at least 1ms"),
    ("timeout", "-5s", "router.timeout: '-5s': must be at least 1ms"),
    ("health_interval", "0", "router.health_interval: '0': must be at least 1ms"),
    ("image", "Not An Image!", "router.image: 'Not An Image!' is not an image reference"),
    ("image", "haproxy:2.6 --privileged", "router.image: 'haproxy:2.6 --privileged' is not an image reference"),
])
def test_a_router_setting_haproxy_would_serve_badly_is_refused(tmp_path: Path, key: str, value: str, said: str):
    project = write_project(tmp_path / "p", CLUSTER + router_table(**{key: value}), {"one": recipe("org/x", "a")})
    refused(project, f"error[router-setting]: {said}")


def test_a_router_port_below_1024_is_a_warning(tmp_path: Path):
    project = write_project(tmp_path / "p", CLUSTER + router_table(port=80), {"one": recipe("org/x", "a")})
    result = recipegen(project, "validate")
    assert result.exit_code == 0
    assert ("cluster.toml:15:8: warning[router-setting]: router.port: 80: the official haproxy image runs as a "
            "non-root user, which cannot bind a port under 1024") in result.output, result.output


# --- item 8 ---------------------------------------------------------------------------------------------------------

def test_one_name_at_two_ports_of_one_node_says_so(tmp_path: Path):
    project = write_project(tmp_path / "p", CLUSTER + router_table(), {
        "one": recipe("org/same", "a"), "two": recipe("org/same", "a", "--port", "8001")})
    result = recipegen(project, "validate")
    assert result.exit_code == 1
    assert ("recipe 'two' serves 'org/same', and so does recipe 'one' on the same node at another port (8000, this "
            "one 8001)") in result.output, result.output
    assert "at another head" not in result.output

