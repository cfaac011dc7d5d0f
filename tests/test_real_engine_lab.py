"""Issue 28 acceptance: the real vLLM (PyPI's CPU build, lab/vllmimage.py) boots from recipegen's own files across
two lab nodes, and every serving proof runs against it: `up`'s probe, `smoke`, `bench` with llama-benchy, `down`;
TP=2 and PP=2 on Compose, TP=2 on Swarm; a recipe the engine refuses at boot.

The recipes are the user's own, examples/cpu/recipes/ as committed (no special case in the code, nothing rewritten
here): only the cluster file is the lab's (its nodes, gpu = "none", each rank on a core of its own). The model is the
tiny Llama made here (lab/tinymodel.py), in each node's Hugging Face cache as `hf download` leaves it.

One boot serves several proofs (the module's `tp2` deployment: probe, smoke, bench, then its group restarts after a
killed worker, a killed head and each node rebooted): a boot costs about half a minute of the two shared cores. Its
tests run in file order; the PP=2 test downs it, so it comes last of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab import LAB_MEMLOCK, Lab, metricsimage, tinymodel
from helpers.deploylab import containers, run

pytestmark = pytest.mark.lab

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "cpu"
SERVED = "tiny"
# Each rank on a core of its own: with vLLM's default both ranks sat on core 0 and a request took 8x longer.
BIND = [{"VLLM_CPU_OMP_THREADS_BIND": "0"}, {"VLLM_CPU_OMP_THREADS_BIND": "1"}]


def cpu_project(lab: Lab, root: Path, recipes: tuple[str, ...] = ("tiny-llama-tp2", "tiny-llama-pp2"),
                extra: dict[str, str] | None = None, router=None, metrics=None) -> Path:
    """A user's repository holding the example's recipes as committed, and the lab's cluster file (with a router
    on the node `router`, its image loaded there), built."""
    (root / "recipes").mkdir(parents=True)
    for rid in recipes:
        shutil.copytree(EXAMPLE / "recipes" / rid, root / "recipes" / rid)
    for rid, text in (extra or {}).items():
        (root / "recipes" / rid).mkdir()
        (root / "recipes" / rid / "recipe.toml").write_text(text)
    # The module's one boot takes seven group restarts in a few minutes: a bound of its own, above the default 5 in
    # 30m; and a wedge probe of 8 s (20 s by default), so each frozen-engine case costs the two cores less.
    cluster = lab.write_cluster(root / "cluster.toml", lab.nodes[:2], gpu="none", node_env=BIND,
                                extra='restart_limit = 20\nwedge_timeout = "8s"')
    if router is not None:
        from lab import routerimage

        routerimage.provide(lab, [router], "haproxy:2.6")
        cluster.write_text(cluster.read_text() + f'\n[router]\nnodes = ["{router.name}"]\nport = {ROUTER_PORT}\n')
    if metrics is not None:  # the metrics stack: Prometheus on `metrics`, node exporters on both nodes
        provide_metrics_images(lab)
        cluster.write_text(cluster.read_text() + f'\n[metrics]\nnode = "{metrics.name}"\nscrape_interval = "5s"\n')
    run(lab, root, "build", check=True)
    return root


def first_request(output: str) -> tuple[float, float, str]:
    """TTFT (ms), tok/s and the answer's text from up's `first request:` line or smoke's line."""
    line = next(li for li in output.splitlines() if re.search(r"TTFT \d+ ms", li))
    ttft = float(re.search(r"TTFT (\d+) ms", line).group(1))
    rate = float(re.search(r"([\d.]+) tok/s", line).group(1))
    text = re.search(r': "(.*)"$', line).group(1)
    return ttft, rate, text


def test_compiled_files_need_no_gpu_and_carry_the_recipes_cpu_settings(vllm_lab: Lab, tmp_path: Path):
    """The files `up` deploys: no device request (gpu = "none"), the recipe's CPU environment, the lab's memlock."""
    root = cpu_project(vllm_lab, tmp_path)
    for rank, node in enumerate(("spark1", "spark2")):
        text = (root / "out" / "tiny-llama-tp2" / node / "compose.yaml").read_text()
        assert "driver: nvidia" not in text and "capabilities" not in text
        assert '"--node-rank"\n      - "%d"' % rank in text
        assert 'VLLM_CPU_KVCACHE_SPACE: "1"' in text and f'VLLM_CPU_OMP_THREADS_BIND: "{rank}"' in text
        assert f"soft: {LAB_MEMLOCK}" in text


ROUTER_PORT = 4000


@pytest.fixture(scope="module")
def tp2(lab: Lab, tmp_path_factory: pytest.TempPathFactory):
    """The TP=2 example recipe up on spark1 and spark2 through Compose (one boot for the module's tests), with the
    cluster's router on spark2 in front of it (when the router's image can be made: the router test says why not).
    Both example recipes serve `tiny` at spark1:8000: two profiles of one head, routed alike."""
    from lab import routerimage
    from lab.plugin import prepare_vllm

    prepare_vllm(lab)
    router = lab.nodes[1] if routerimage.unavailable_reason() is None else None
    metrics = lab.nodes[1] if metricsimage.unavailable_reason() is None else None
    lab.env[GRAFANA_PASSWORD_ENV] = "lab-only-password"  # `up` passes it to Grafana's container, never to a file
    root = cpu_project(lab, tmp_path_factory.mktemp("cpu"), router=router, metrics=metrics)
    up = run(lab, root, "up", "tiny-llama-tp2", "--timeout", "600", timeout=900)
    yield root, up
    run(lab, root, "down", "tiny-llama-tp2", timeout=300)
    if router is not None:
        lab.docker(router, "compose", "-f", str(root / "out" / "_router" / router.name / "compose.yaml"), "down",
                   check=False, timeout=120)
    if metrics is not None:
        for node in lab.nodes[:2]:
            lab.docker(node, "compose", "-f", str(root / "out" / "_metrics" / node.name / "compose.yaml"), "down",
                       "-v", check=False, timeout=120)


def test_tp2_up_boots_the_real_engine_and_ends_with_its_first_request(tp2, lab: Lab):
    root, up = tp2
    assert up.returncode == 0, up.stdout + up.stderr
    head = lab.nodes[0]
    assert f"serving {SERVED} at http://{head.address}:8000" in up.stdout
    ttft, rate, text = first_request(up.stdout)
    assert ttft > 0 and rate > 0 and text  # the real engine's figures: not a stand-in's known rates
    # The engine is vLLM itself: its own log lines, on both ranks.
    logs = {n.name: lab.docker(n, "logs", containers(lab, n, "tiny-llama-tp2")[0]["ID"]).stderr
            + lab.docker(n, "logs", containers(lab, n, "tiny-llama-tp2")[0]["ID"]).stdout for n in lab.nodes[:2]}
    assert "vLLM API server version 0.32.0" in logs["spark1"] or "version 0.32.0" in logs["spark1"], logs["spark1"]
    assert "world_size=2" in logs["spark1"] or "tensor_parallel_size=2" in logs["spark1"]


def test_tp2_smoke_passes_with_the_same_answer(tp2, lab: Lab):
    root, up = tp2
    assert up.returncode == 0
    smoke = run(lab, root, "smoke", "tiny-llama-tp2", timeout=300)
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert first_request(smoke.stdout)[2] == first_request(up.stdout)[2]  # greedy: the same text again


def test_tp2_bench_quick_writes_llama_benchys_results_from_the_real_engine(tp2, lab: Lab, tmp_path: Path):
    from helpers.serve import needs_llama_benchy

    needs_llama_benchy()
    root, up = tp2
    assert up.returncode == 0
    snapshot = next((lab.nodes[0].hf_cache / "hub" / "models--recipegen-lab--tiny-llama" / "snapshots").iterdir())
    text = tmp_path / "book.txt"
    text.write_text("\n".join(tinymodel.training_text()))
    bench = run(lab, root, "bench", "tiny-llama-tp2", "--profile", "quick", "--tokenizer", str(snapshot),
                "--text", str(text), timeout=600)
    assert bench.returncode == 0, bench.stdout + bench.stderr
    folder = next((root / "bench" / "tiny-llama-tp2").iterdir())
    results = json.loads((folder / "results.json").read_text())
    assert results["served_model_name"] == SERVED and results["runs"]
    for row in results["runs"]:  # figures, not None: every request of the test answered
        assert row["pp"] == 512 and row["tg"] == 32, row
        assert (row["tg_tps"] or 0) > 0 and (row["ttft_ms"] or 0) > 0, (row, bench.stdout, bench.stderr)


def streamed_chat(host: str, port: int, model: str, max_tokens: int) -> tuple[int, list[str], bytes]:
    """A streamed chat completion: the status, each content delta as it arrived (vLLM's compact JSON), the body."""
    import http.client

    conn = http.client.HTTPConnection(host, port, timeout=120)
    body = {"model": model, "messages": [{"role": "user", "content": "Say something"}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True}
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        if not response.getheader("Content-Type", "").startswith("text/event-stream"):
            return response.status, [], response.read()
        deltas, raw = [], b""
        while line := response.readline():
            raw += line
            if line.startswith(b"data: {"):
                choice = json.loads(line[6:])["choices"][0]
                if (choice.get("delta") or {}).get("content"):
                    deltas.append(choice["delta"]["content"])
        return response.status, deltas, raw
    finally:
        conn.close()


def test_the_router_streams_the_real_engine_as_a_client_sends_it(tp2, lab: Lab):
    """Issue 31 on the real vLLM: `up` brought the cluster's router up beside the recipe and said where; a streamed
    chat through it arrives as the engine streams it, token by token; smoke --via-router gets the same greedy text
    as the direct probe; an unknown model is a JSON 404 naming it."""
    from lab import routerimage

    missing = routerimage.unavailable_reason()
    if missing:  # as the lab's other prerequisites: in CI (.ci/run fetches the .debs) a failure, not a skip
        (pytest.fail if os.environ.get("CI") else pytest.skip)(missing)
    root, up = tp2
    assert up.returncode == 0
    router = lab.nodes[1]
    url = f"http://{router.address}:{ROUTER_PORT}"
    assert f"tiny-llama-tp2: also at {url}/v1 (the router on {router.name})" in up.stdout, up.stdout + up.stderr
    status, deltas, raw = streamed_chat(router.address, ROUTER_PORT, SERVED, 24)
    assert status == 200 and len(deltas) > 1 and b"data: [DONE]" in raw, raw[-500:]
    direct = streamed_chat(lab.nodes[0].address, 8000, SERVED, 24)
    assert direct[0] == 200 and "".join(direct[1]) == "".join(deltas)  # greedy: the router changed no byte
    smoke = run(lab, root, "smoke", "tiny-llama-tp2", "--via-router", timeout=300)
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert first_request(smoke.stdout)[2] == first_request(up.stdout)[2]
    status, _, body = streamed_chat(router.address, ROUTER_PORT, "no-such-model", 4)
    assert status == 404 and "`no-such-model`" in json.loads(body)["error"]["message"]
    ps = run(lab, root, "ps", "tiny-llama-tp2")
    assert "router (" in ps.stdout and "UP (L7OK)" in ps.stdout, ps.stdout  # the router's row, its backend up


# --- the metrics stack (issue 40) on the real engine: Debian's prometheus and exporters in lab images ---------------

GRAFANA_PASSWORD_ENV = "RECIPEGEN_GRAFANA_PASSWORD"


def provide_metrics_images(lab: Lab) -> None:
    """Debian's prometheus and exporters (and Grafana's stand-in) on both nodes, tagged as the generated compose
    files name them (the schema's default images)."""
    from generator.read.schemas import schema
    from lab import metricsimage

    props = schema("cluster")["properties"]["metrics"]["properties"]
    metricsimage.provide(lab, lab.nodes[:2], {role: props[f"{key}_image"]["default"] for role, key in (
        ("prometheus", "prometheus"), ("node_exporter", "node_exporter"), ("blackbox", "blackbox"),
        ("grafana", "grafana"))})


def metrics_ready(lab: Lab) -> str:
    """Prometheus's base URL; skipped (failed in CI) when the metrics images cannot be made here."""
    from lab import metricsimage

    missing = metricsimage.unavailable_reason()
    if missing:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(missing)
    return f"http://{lab.nodes[1].address}:9090"


def promql(base: str, expr: str) -> dict:
    """Prometheus's answer to an instant query (its JSON), whatever the status: a bad query is an `error`."""
    import urllib.error
    import urllib.parse
    import urllib.request

    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:  # 400 and 422 carry the reason as JSON
        return json.loads(exc.read())


def test_prometheus_scrapes_the_real_head_the_router_and_the_node_exporters(tp2, lab: Lab):
    """`up` brought the metrics stack up and put the recipe's target in; Debian's prometheus, running the generated
    config, scrapes the real vLLM head (labelled recipe, engine, nodes, tp, pp), the router's HAProxy exporter and
    a node exporter on each node."""
    base = metrics_ready(lab)
    root, up = tp2
    assert f"tiny-llama-tp2: scraped by {base}" in up.stdout, up.stdout + up.stderr
    wanted = {("engine", "tiny-llama-tp2"), ("router", "spark2"), ("node", "spark1"), ("node", "spark2")}
    seen: dict = {}

    def scraped() -> bool:
        seen.update({(r["metric"]["job"], r["metric"].get("recipe") or r["metric"].get("node")): r
                     for r in promql(base, "up == 1")["data"]["result"]})
        return wanted <= set(seen)

    wait_until("every target scraped", scraped, timeout=90)
    engine = seen[("engine", "tiny-llama-tp2")]["metric"]
    assert {k: engine[k] for k in ("engine", "nodes", "tp", "pp", "head")} == {
        "engine": "vllm", "nodes": "spark1,spark2", "tp": "2", "pp": "1", "head": "spark1"}
    ps = run(lab, root, "ps", "tiny-llama-tp2")
    assert "tiny-llama-tp2 target: scraped (up=1)" in ps.stdout, ps.stdout


def dashboard_of(root: Path) -> dict:
    text = (root / "out" / "_metrics" / "grafana" / "dashboard.json").read_text()
    return json.loads("".join(li for li in text.splitlines(True) if not li.startswith("#")))


def test_every_dashboard_query_is_valid_promql_and_returns_data_from_the_real_engine(tp2, lab: Lab):
    """After a few requests, each query of the generated dashboard (the served recipe's row, each node's, the
    router's) is valid PromQL to Debian's prometheus and returns data; the JSON is checked as Grafana lays it out."""
    base = metrics_ready(lab)
    root, _ = tp2
    for _ in range(3):
        assert streamed_chat(lab.nodes[1].address, ROUTER_PORT, SERVED, 16)[0] == 200
    panels = dashboard_of(root)["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    assert all(0 <= p["gridPos"]["x"] and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24 for p in panels)
    queries, row = [], ""
    for panel in panels:
        if panel["type"] == "row":
            row = panel["title"]
            continue
        assert panel["datasource"]["uid"] == "recipegen-prometheus"
        for target in panel["targets"]:
            assert promql(base, target["expr"])["status"] == "success", target["expr"]
            if "tiny-llama-pp2" not in row:  # the other recipe never ran here: nothing to show for it
                queries.append(target["expr"])
    assert len(queries) >= 15
    empty: list[str] = []

    def all_have_data() -> bool:
        empty[:] = [q for q in queries if not promql(base, q)["data"]["result"]]
        return not empty

    try:
        wait_until("data for every query", all_have_data, timeout=90)
    except AssertionError:
        raise AssertionError(f"queries without data: {empty}") from None
    if os.environ.get("RECIPEGEN_RECORD_METRICS"):  # the fixture of tests/test_top.py, recorded from this engine
        import urllib.request

        with urllib.request.urlopen(f"http://{lab.nodes[0].address}:8000/metrics", timeout=10) as response:
            Path(os.environ["RECIPEGEN_RECORD_METRICS"]).write_bytes(response.read())


def test_top_in_a_real_terminal_shows_the_real_heads_numbers(tp2, lab: Lab):
    """`recipegen top` in tmux against the real head: its row's numbers are the head's own /metrics (running,
    waiting, KV cache) and Prometheus's histogram_quantile of the same TTFT buckets."""
    from helpers.topkit import row_of, screen_of

    base = metrics_ready(lab)
    root, _ = tp2
    assert streamed_chat(lab.nodes[0].address, 8000, SERVED, 8)[0] == 200
    time.sleep(6)  # one scrape after the request: Prometheus holds the same buckets as the idle head
    screen = screen_of(["recipegen", "top", "tiny-llama-tp2", "--interval", "1"], root, lab.env, "idle")
    row = row_of(screen, "tiny-llama-tp2")
    assert row["nodes"] == "spark1,spark2" and row["state"] == "idle", screen
    assert row["running"] == "0" and row["waiting"] == "0" and row["tok/s"] == "0.0", screen
    kv = promql(base, 'max(vllm:kv_cache_usage_perc{recipe="tiny-llama-tp2"})')["data"]["result"]
    assert row["KV %"] == f"{100 * float(kv[0]['value'][1]):.1f}", (row, kv)
    p50 = promql(base, 'histogram_quantile(0.5, sum by (le) '
                       '(vllm:time_to_first_token_seconds_bucket{recipe="tiny-llama-tp2"}))')["data"]["result"]
    assert row["TTFT p50"] == f"{1000 * float(p50[0]['value'][1]):.0f} ms", (row, p50)
    assert row["restarts"] == "0", screen


def engine_pid(lab: Lab, node, recipe: str) -> tuple[int, int]:
    """(the container's main process: the group watch, the engine: its child) as host pids."""
    return lab.pids(node, containers(lab, node, recipe)[0]["ID"])


def serves_again(lab: Lab, since: float, timeout: float = 420) -> float:
    """Seconds from `since` until the head answers a chat completion again (the probe `up` ends with); then, before
    the next fault, until the head's watch has seen /health answer too (its record says the group served): a fault
    a second after the first answer would otherwise hit a boot, which the boot bound ends, not a watched group."""
    from generator.deploy.probe import probe

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe(f"http://{lab.nodes[0].address}:8000", SERVED, timeout=30).ok:
            took = time.monotonic() - since
            wait_until("the head's watch to see /health answer", lambda: watching(lab), timeout=30)
            return took
        time.sleep(2)
    raise AssertionError(f"the recipe did not serve again within {timeout:.0f}s")


def watching(lab: Lab) -> bool:
    """The head's group record (what `ps` reads) says its watch has seen this boot serve."""
    from generator.plan.types import GROUP_STATE

    head = containers(lab, lab.nodes[0], "tiny-llama-tp2")[0]["ID"]
    record = lab.docker(lab.nodes[0], "exec", head, "cat", GROUP_STATE, check=False)
    try:
        return record.returncode == 0 and json.loads(record.stdout).get("served_once") is True
    except ValueError:  # read while the watch replaced it
        return False


def wait_until(what: str, check, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f}s"
        time.sleep(1)


def test_a_killed_worker_engine_brings_the_whole_group_back_serving(tp2, lab: Lab):
    """Issue 35: the worker's engine killed as the OOM killer does (-9, from the host); the group restarts and
    serves again with no command typed, and `ps` says what happened."""
    root, up = tp2
    assert up.returncode == 0
    kill_until_served_again(lab, engine_pid(lab, lab.nodes[1], "tiny-llama-tp2")[1], "worker engine killed")
    ps = run(lab, root, "ps", "tiny-llama-tp2")
    assert ps.returncode == 0, ps.stderr
    assert re.search(r"\d+ group restart\(s\)", ps.stdout) and "rank 1 (spark2)" in ps.stdout, ps.stdout
    assert "rank 1 (spark2): the engine exited with status" in ps.stdout, ps.stdout


def kill_until_served_again(lab: Lab, pid: int, what: str) -> float:
    """kill -9 pid (from the host), see the head stop serving, and time until it serves again: no command typed."""
    start = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    wait_until("group restart", lambda: probe_fails(lab))
    took = serves_again(lab, start)
    print(f"\n{what}: serving again after {took:.1f}s")
    return took


def probe_fails(lab: Lab) -> bool:
    from generator.deploy.probe import probe

    return not probe(f"http://{lab.nodes[0].address}:8000", SERVED, timeout=10).ok


def test_a_killed_head_brings_the_group_back_serving(tp2, lab: Lab):
    """The head container's main process (its group watch) killed -9: Docker restarts the head, the worker's watch
    sees it gone and restarts too, and the group meets afresh."""
    root, up = tp2
    assert up.returncode == 0
    kill_until_served_again(lab, engine_pid(lab, lab.nodes[0], "tiny-llama-tp2")[0], "head killed")


@pytest.mark.parametrize("which", [1, 0], ids=["worker", "head"])
def test_a_rebooted_node_comes_back_serving(tp2, lab: Lab, which: int):
    """A Spark's reboot: its dockerd stopped (it stops its containers) and started again, data kept."""
    root, up = tp2
    assert up.returncode == 0
    node = lab.nodes[which]
    start = time.monotonic()
    lab.stop_dockerd(node)
    try:
        assert probe_fails(lab)
    finally:
        lab.start_dockerd(node)
    print(f"\n{node.name} rebooted: serving again after {serves_again(lab, start):.1f}s")


GROUP_PORT = 29680  # the cluster's default group_port


def group_string(root: Path) -> str:
    """The committed `--group` word a stranger who read out/ would send."""
    words = (root / "out" / "tiny-llama-tp2" / "spark1" / "compose.yaml").read_text().split("\n")
    at = next(i for i, line in enumerate(words) if line.strip() == '- "--group"')
    return words[at + 1].strip()[3:-1]


STRANGER = """
import json, socket, sys, time
host, port, group = sys.argv[1], int(sys.argv[2]), sys.argv[3]
idle = []
for _ in range(200):
    try:
        idle.append(socket.create_connection((host, port), timeout=3))
    except OSError:
        pass
for payload in [json.dumps({"hello": 1, "node": "spark2", "group": group}).encode() + b"\\n"] * 7 + [
        b"[" * 50000 + b"\\n", b"x" * (1 << 20)]:
    try:
        with socket.create_connection((host, port), timeout=3) as s:
            s.sendall(payload)
            time.sleep(0.3)
    except OSError:
        pass
time.sleep(6)
print(len(idle), "idle connections held")
"""


def restart_count(lab: Lab, root: Path) -> int:
    """The group restarts ps counts (the module's earlier faults made some: the line must be there)."""
    ps = run(lab, root, "ps", "tiny-llama-tp2")
    found = re.search(r"(\d+) group restart\(s\)", ps.stdout)
    assert found, ps.stdout
    return int(found[1])


def test_strangers_on_the_fabric_cannot_restart_the_group(tp2, lab: Lab):
    """Issue 39: whoever reaches the group port with the group string committed in out/ (seven hellos), a 1 MiB
    line, JSON nested 50,000 deep and 200 idle connections held open changes nothing: from the machine that
    deploys (not a rank's address) and from the worker's own node (a rank's address, without the group's key)."""
    root, up = tp2
    assert up.returncode == 0
    before = restart_count(lab, root)
    group = group_string(root)
    head = lab.nodes[0].address
    subprocess.run([sys.executable, "-c", STRANGER, head, str(GROUP_PORT), group], check=True, timeout=120)
    subprocess.run(["nsenter", f"--net=/var/run/netns/{lab.nodes[1].netns}", "/usr/bin/python3", "-c", STRANGER,
                    head, str(GROUP_PORT), group], check=True, timeout=120)
    assert not probe_fails(lab)
    assert restart_count(lab, root) == before


def engine_tree(pid: int) -> list[int]:
    """Every process under pid (the container's group watch): the engine and all its children, on the host."""
    rows = [line.split() for line in subprocess.run(["ps", "-e", "-o", "pid=,ppid=,comm="], capture_output=True,
                                                    text=True, check=True).stdout.splitlines()]
    children: dict[int, list[tuple[int, str]]] = {}
    for row in rows:
        children.setdefault(int(row[1]), []).append((int(row[0]), " ".join(row[2:])))
    found, todo = [], [pid]
    while todo:
        for child, _ in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def freeze_until_served_again(lab: Lab, root: Path, pids: list[int], what: str, cause: str) -> float:
    """SIGSTOP pids (from the host: the watch stays alive), see the head stop answering, and time until it
    serves again with no command typed; ps then names the cause."""
    assert pids
    start = time.monotonic()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        wait_until("the head to stop answering", lambda: probe_fails(lab))
        try:
            took = serves_again(lab, start)
        except AssertionError:  # what the ranks say, for the failure's report
            print(run(lab, root, "ps", "tiny-llama-tp2").stdout)
            print(run(lab, root, "logs", "tiny-llama-tp2", "--tail", "40").stdout)
            raise
    finally:
        for pid in pids:  # the restart killed them; a survivor must not stay stopped
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    print(f"\n{what}: serving again after {took:.1f}s")
    ps = run(lab, root, "ps", "tiny-llama-tp2").stdout
    assert re.search(rf"the last at [^\n]* \({cause}\)", ps), ps
    return took


def test_a_frozen_worker_engine_is_healed(tp2, lab: Lab):
    """Every process of the worker's engine stopped, its watch alive: the head answers nothing; its watch finds the
    wedge (a one-token completion gets no answer, twice) and the group restarts."""
    root, up = tp2
    watch = engine_pid(lab, lab.nodes[1], "tiny-llama-tp2")[0]
    freeze_until_served_again(lab, root, engine_tree(watch), "worker engine frozen", "wedged")


def test_a_frozen_head_engine_core_is_healed(tp2, lab: Lab):
    """The head's engine core alone stopped: its API server still answers /health; the wedge probe does not."""
    root, up = tp2
    watch = engine_pid(lab, lab.nodes[0], "tiny-llama-tp2")[0]
    cores = [pid for pid in engine_tree(watch) if comm(pid).startswith("VLLM::EngineCor")]
    freeze_until_served_again(lab, root, cores, "head engine core frozen", "wedged")


def test_a_frozen_head_engine_is_healed(tp2, lab: Lab):
    """Every process of the head's engine stopped: /health, /metrics and the probe get no answer; the probe's two
    misses (or the lost /health, whichever comes first) end the group."""
    root, up = tp2
    watch = engine_pid(lab, lab.nodes[0], "tiny-llama-tp2")[0]
    freeze_until_served_again(lab, root, engine_tree(watch), "head engine frozen", "(wedged|health-lost)")


def test_pp2_serves_the_same_greedy_text_as_tp2(tp2, lab: Lab):
    """PP=2 after TP=2 on the same nodes (down first): the same weights split another way answer the same."""
    root, up = tp2
    assert up.returncode == 0
    tp_text = first_request(up.stdout)[2]
    assert run(lab, root, "down", "tiny-llama-tp2", timeout=300).returncode == 0
    pp = run(lab, root, "up", "tiny-llama-pp2", "--timeout", "600", timeout=900)
    try:
        assert pp.returncode == 0, pp.stdout + pp.stderr
        assert first_request(pp.stdout)[2] == tp_text
    finally:
        down = run(lab, root, "down", "tiny-llama-pp2", timeout=300)
    assert down.returncode == 0, down.stderr
    # `down` stays down: no reboot brings anything of either recipe back.
    for node in lab.nodes[:2]:
        lab.stop_dockerd(node)
        lab.start_dockerd(node)
    for node in lab.nodes[:2]:
        assert containers(lab, node, "tiny-llama-pp2") == [] and containers(lab, node, "tiny-llama-tp2") == []


def test_a_max_model_len_beyond_the_model_fails_up_with_vllms_own_error(vllm_lab: Lab, tmp_path: Path):
    """What validate cannot know (the model's own limits) fails `up` with the engine's error line, every rank's log
    lines, and nothing left running."""
    recipe = (EXAMPLE / "recipes" / "tiny-llama-tp2" / "recipe.toml").read_text().replace(
        '"--max-model-len", "2048"', '"--max-model-len", "65536"')
    root = cpu_project(vllm_lab, tmp_path, recipes=(), extra={"too-long": recipe})
    up = subprocess.run(["recipegen", "up", "too-long", "--timeout", "300"], cwd=root, env=vllm_lab.env,
                        capture_output=True, text=True, timeout=600)
    assert up.returncode == 1, up.stdout + up.stderr
    # The engine's own traceback is shown among its log lines (each prefixed by its node); recipegen adds none.
    assert not [li for li in up.stderr.splitlines() if "Traceback" in li and not li.startswith("spark")], up.stderr
    assert "max_model_len" in up.stderr and "65536" in up.stderr  # vLLM's own words
    assert "--- last log lines of spark1 ---" in up.stderr and "--- last log lines of spark2 ---" in up.stderr
    for node in vllm_lab.nodes[:2]:
        assert containers(vllm_lab, node, "too-long") == []


def test_a_flag_this_vllm_does_not_have_is_refused_by_validate_before_any_boot(tmp_path: Path):
    """The other kind of mistake, caught first: no vLLM release has --max-model-length (the flag data is read from
    vLLM's own sources). The lab image's tag names no release, so validate warns (an image naming its release
    makes it an error); `validate --strict`, as CI and the pre-commit hook run it, refuses it, and nothing boots."""
    (tmp_path / "recipes" / "typo").mkdir(parents=True)
    recipe = (EXAMPLE / "recipes" / "tiny-llama-tp2" / "recipe.toml").read_text().replace(
        '"--max-model-len"', '"--max-model-length"')
    (tmp_path / "recipes" / "typo" / "recipe.toml").write_text(recipe)
    shutil.copy(EXAMPLE / "cluster.toml", tmp_path / "cluster.toml")
    done = subprocess.run(["recipegen", "validate", "--strict"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert "--max-model-length" in done.stderr and "did you mean '--max-model-len'?" in done.stderr


def test_tp2_on_swarm_serves_and_a_killed_worker_task_brings_the_group_back(vllm_lab: Lab, tmp_path: Path):
    """The same recipe as a Swarm stack, with a setup step (so each task runs recipegen's launcher, under the group
    watch): it serves (the probe at the end of `up`), and a worker task whose engine is killed brings the whole
    group back through Swarm's own restarts (each a new task), the setup step run again in the new task."""
    lab = vllm_lab
    recipe = (EXAMPLE / "recipes" / "tiny-llama-tp2" / "recipe.toml").read_text()
    recipe = recipe.replace("\n[", '\nsetup = ["echo recipegen-setup-ran"]\n\n[', 1)
    assert "recipegen-setup-ran" in recipe
    root = cpu_project(lab, tmp_path, recipes=(), extra={"tiny-llama-tp2": recipe})
    try:
        setup = run(lab, root, "swarm", "setup", "--init")
        assert setup.returncode == 0, setup.stdout + setup.stderr
        up = run(lab, root, "up", "--swarm", "tiny-llama-tp2", "--timeout", "600", timeout=900)
        assert up.returncode == 0, up.stdout + up.stderr
        ttft, rate, text = first_request(up.stdout)
        assert ttft > 0 and rate > 0 and text

        def worker_task() -> str:
            return lab.docker(lab.nodes[1], "ps", "-q", "--filter",
                              "label=com.docker.swarm.service.name=tiny-llama-tp2_spark2").stdout.split()[0]

        first = worker_task()
        watch, engine = lab.pids(lab.nodes[1], first)
        assert "group-watch.py" in Path(f"/proc/{watch}/cmdline").read_text()  # the launcher runs under the watch
        kill_until_served_again(lab, engine, "Swarm worker task's engine killed")
        second = worker_task()
        assert second != first
        logs = lab.docker(lab.nodes[1], "logs", second).stdout + lab.docker(lab.nodes[1], "logs", second).stderr
        assert "recipegen-setup-ran" in logs, logs[-2000:]
    finally:
        down = run(lab, root, "down", "--swarm", "tiny-llama-tp2", timeout=300)
        lab.leave_swarm()
    assert down.returncode == 0, down.stderr
