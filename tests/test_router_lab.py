"""Issue 31's proof, through the real lab: two recipes on two nodes and one router on a third, deployed the way a
user deploys them.

- plain `docker compose up` of out/_router/<node>/compose.yaml starts the router, as for every other file;
- `recipegen up` of each recipe finds the router and says where it serves the model;
- a streamed chat to each model through the router; an unknown model gets a JSON 404;
- a recipe changed and `up` again: the router is reloaded in place while a stream to the other model runs through
  it, and that stream loses nothing;
- `down` of one recipe: the router takes its backend out, its model gets a fast OpenAI-shaped error while the other
  model keeps streaming; `ps` shows the router and the backend's health; `up` again and it is back;
- `smoke --via-router`.

The router image is Debian's haproxy 2.6 in a layer over the engine stand-in's image (lab/routerimage.py), tagged
as the image the compose file names.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from lab import Lab, routerimage
from helpers.routerkit import Answer, chat, request, wait_listening
from helpers.deploylab import IMAGE, MODEL, put_model, run

pytestmark = pytest.mark.lab

PORT = 4000
STREAM_TOKENS = 1000  # 20 s at the stand-in's 50 tokens/s: it outlasts an `up` or a `down` (checked)


def recipe(served: str, node: str, port: int) -> str:
    return f'''engine = "vllm"
docker_image = "{IMAGE}"
model = "{MODEL}"
required_nodes = 1
nodes = ["{node}"]
shm_size = "1gb"
args = ["--served-model-name", "{served}", "--port", "{port}"]

[env]
HF_HUB_OFFLINE = "1"
'''


@pytest.fixture
def routed(clean_lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    lab = clean_lab
    missing = routerimage.unavailable_reason()
    if missing:  # as the lab's other prerequisites: in CI (.ci/run fetches the .debs) a failure, not a skip
        (pytest.fail if os.environ.get("CI") else pytest.skip)(missing)
    monkeypatch.delenv("RECIPEGEN_ROUTER_API_KEY", raising=False)
    one, two, three = lab.nodes[:3]
    root = tmp_path
    for rid, text in {"alpha": recipe("alpha", one.name, 8000), "beta": recipe("beta", two.name, 8001)}.items():
        (root / "recipes" / rid).mkdir(parents=True)
        (root / "recipes" / rid / "recipe.toml").write_text(text)
    cluster = lab.write_cluster(root / "cluster.toml", lab.nodes[:3])
    cluster.write_text(cluster.read_text() + f'\n[router]\nnodes = ["{three.name}"]\nport = {PORT}\n')
    put_model(lab, [one, two])
    routerimage.provide(lab, [three], "haproxy:2.6")
    run(lab, root, "build", check=True)
    try:
        yield lab, root, f"{three.address}"
    finally:
        for rid in ("alpha", "beta"):
            run(lab, root, "down", rid)
        lab.docker(three, "compose", "-f", str(root / "out" / "_router" / three.name / "compose.yaml"), "down",
                   check=False)


def stream_in_background(host: str, model: str) -> tuple[threading.Thread, list[Answer]]:
    answers: list[Answer] = []
    thread = threading.Thread(target=lambda: answers.append(
        request(host, PORT, "POST", "/v1/chat/completions", chat(model, STREAM_TOKENS), timeout=60)))
    thread.start()
    time.sleep(0.5)  # under way
    return thread, answers


def whole(answer: Answer) -> bool:
    """The stream arrived complete, without a stall (the stand-in sends a token every 20 ms)."""
    gaps = [b - a for a, b in zip(answer.arrivals, answer.arrivals[1:])]
    return answer.status == 200 and answer.chunks == STREAM_TOKENS and b"[DONE]" in answer.body and max(gaps) < 1.0


def test_one_endpoint_for_two_recipes_on_two_nodes(routed):
    lab, root, host = routed
    three = lab.nodes[2]
    compose_file = root / "out" / "_router" / three.name / "compose.yaml"

    def said() -> str:  # what the router's node says, for a failure's message
        ps = lab.docker(three, "ps", "-a", check=False).stdout
        logs = lab.docker(three, "logs", "--tail", "40", "recipegen-router-router-1", check=False)
        return f"\n--- docker ps -a on {three.name}:\n{ps}\n--- router log:\n{logs.stdout}{logs.stderr}"

    # The router's file runs as it is, like every other generated file.
    lab.docker(three, "compose", "-f", str(compose_file), "up", "-d", timeout=120)
    try:
        wait_listening(host, PORT, timeout=20)
    except TimeoutError as exc:
        pytest.fail(f"{exc}{said()}")
    assert request(host, PORT, "GET", "/health").status == 200
    assert [m["id"] for m in request(host, PORT, "GET", "/v1/models").json()["data"]] == ["alpha", "beta"]

    for rid in ("alpha", "beta"):
        up = run(lab, root, "up", rid, "--timeout", "120", timeout=300)
        assert up.returncode == 0, up.stdout + up.stderr + said()
        assert f"router {three.name}: unchanged" in up.stdout + up.stderr
        assert f"{rid}: also at http://{host}:{PORT}/v1 (the router on {three.name})" in up.stdout

    for model in ("alpha", "beta"):
        answer = request(host, PORT, "POST", "/v1/chat/completions", chat(model, 20))
        assert answer.status == 200 and answer.chunks == 20 and f'"model": "{model}"'.encode() in answer.body
    unknown = request(host, PORT, "POST", "/v1/chat/completions", chat("gamma"))
    assert unknown.status == 404 and "`gamma`" in unknown.json()["error"]["message"]

    # beta renamed and brought up again: the router reloads in place while alpha streams through it.
    text = (root / "recipes" / "beta" / "recipe.toml").read_text()
    (root / "recipes" / "beta" / "recipe.toml").write_text(text.replace('"beta"', '"beta-2"'))
    run(lab, root, "build", check=True)
    thread, answers = stream_in_background(host, "alpha")
    up = run(lab, root, "up", "beta", "--timeout", "120", timeout=300)
    assert thread.is_alive(), "the stream ended before `up` did: it does not prove the reload kept it"
    thread.join(60)
    assert up.returncode == 0 and f"router {three.name}: reloaded" in up.stdout + up.stderr, \
        up.stdout + up.stderr + said()
    assert whole(answers[0]), (answers, said())
    assert request(host, PORT, "POST", "/v1/chat/completions", chat("beta-2", 5)).status == 200
    assert request(host, PORT, "POST", "/v1/chat/completions", chat("beta", 5)).status == 404

    # beta down: its backend taken out, its model a fast JSON error, alpha still streaming.
    thread, answers = stream_in_background(host, "alpha")
    down = run(lab, root, "down", "beta")
    assert down.returncode == 0 and f"router {three.name}: beta taken out" in down.stdout, \
        down.stdout + down.stderr + said()
    failed = request(host, PORT, "POST", "/v1/chat/completions", chat("beta-2"), timeout=10)
    assert thread.is_alive(), "the stream ended before `down` did: it does not prove alpha kept streaming"
    assert failed.status == 503 and failed.total < 1.0
    assert "model beta-2 is not available" in failed.json()["error"]["message"]
    thread.join(60)
    assert whole(answers[0]), (answers, said())

    ps = run(lab, root, "ps", "beta")
    assert "router (lab)" in ps.stdout and "DOWN" in ps.stdout, ps.stdout
    ps = run(lab, root, "ps", "alpha")
    assert "UP (L7OK)" in ps.stdout, ps.stdout

    # beta back: the router routes to it again.
    up = run(lab, root, "up", "beta", "--timeout", "120", timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    assert request(host, PORT, "POST", "/v1/chat/completions", chat("beta-2", 5)).status == 200
    smoke = run(lab, root, "smoke", "beta", "--via-router")
    assert smoke.returncode == 0 and "beta: TTFT" in smoke.stdout, smoke.stdout + smoke.stderr
