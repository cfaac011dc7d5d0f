"""Issue 12 acceptance, through the real lab: setup commands and a mod run in every rank's container before the
engine, shipped inside the compose files only (no SSH, no file on the nodes), started with plain
`docker --context X compose up` per node, and the head's healthcheck makes `up --wait` return once it serves.

The engine stand-in refuses to start when its path-like `--chat-template` is missing, as vLLM does: the mod
writes that template into the image's working directory (WORKSPACE_DIR), as sparkrun's chat-template mods do.
The mod itself checks that setup ran first.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from lab import IMAGE, Lab

pytestmark = pytest.mark.lab

MODEL = "lab-org/tiny-model"
SERVED = "tiny"
# Bytes the template must arrive with: `$` (Compose interpolates it), quotes, a backslash, unicode, no final newline.
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }} $HOME \"q\" 'a' \\n ✓\n{{ m.content }}{% endfor %}"

RECIPE = f'''engine = "vllm"
docker_image = "{IMAGE}"
model = "{MODEL}"
required_nodes = 2
tensor_parallel_size = 2
shm_size = "1gb"
health_start_period = "2m"
setup = ["mkdir -p /tmp/lab-setup && echo \\"setup ran in $(pwd)\\" > /tmp/lab-setup/done"]
mods = ["chat-template"]
args = ["--served-model-name", "{SERVED}", "--chat-template", "lab-template.jinja"]

[env]
HF_HUB_OFFLINE = "1"
LAB_JOIN_TIMEOUT = "60"
'''
RUN_SH = """#!/bin/sh
# A chat-template mod in sparkrun's layout: the template beside run.sh goes to the engine's working directory.
set -e
test -f /tmp/lab-setup/done || { echo "setup did not run before the mod" >&2; exit 1; }
cp template.jinja "$WORKSPACE_DIR/lab-template.jinja"
echo "mod: template installed in $WORKSPACE_DIR"
"""


def compose(lab: Lab, node, file: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "--context", node.context, "compose", "-f", str(file), *args],
                          env=lab.env, capture_output=True, text=True, timeout=timeout)


def build_project(root: Path, lab: Lab, nodes) -> Path:
    (root / "recipes" / "templated").mkdir(parents=True)
    (root / "recipes" / "templated" / "recipe.toml").write_text(RECIPE)
    mod = root / "mods" / "chat-template"
    mod.mkdir(parents=True)
    (mod / "run.sh").write_text(RUN_SH)
    (mod / "template.jinja").write_bytes(TEMPLATE.encode("utf-8"))
    lab.write_cluster(root / "cluster.toml", nodes)
    for node in nodes:  # the model in each node's Hugging Face cache
        snap = Path(node.hf_cache) / "hub" / f"models--{MODEL.replace('/', '--')}" / "snapshots" / "0123abc"
        snap.mkdir(parents=True, exist_ok=True)
        (snap / "config.json").write_text("{}")
    done = subprocess.run(["recipegen", "build"], cwd=root, env=lab.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return root / "out" / "templated"


def test_setup_and_mod_run_before_the_engine_on_every_node_with_plain_compose(tmp_path: Path, clean_lab: Lab):
    lab = clean_lab
    nodes = lab.nodes[:2]
    out = build_project(tmp_path, lab, nodes)
    files = {node.name: out / node.name / "compose.yaml" for node in nodes}
    try:
        worker = compose(lab, nodes[1], files[nodes[1].name], "up", "-d")
        assert worker.returncode == 0, worker.stderr
        # --wait returns once the head's healthcheck (python3 asking /health) passes, or fails.
        head = compose(lab, nodes[0], files[nodes[0].name], "up", "-d", "--wait", "--wait-timeout", "150",
                       timeout=200)
        logs = {n.name: compose(lab, n, files[n.name], "logs", "--no-color").stdout for n in nodes}
        assert head.returncode == 0, f"{head.stderr}\n{logs}"

        state = json.loads(lab.docker(nodes[0], "inspect", "--format", "{{json .State}}",
                                      "templated-engine-1").stdout)
        assert state["Health"]["Status"] == "healthy"
        for node in nodes:
            log = logs[node.name]
            setup_at, mod_at = log.find("recipegen: setup 1/1"), log.find("recipegen: mod 1/1: chat-template")
            engine_at = log.find("[vllm] ")
            assert -1 < setup_at < mod_at < engine_at, f"{node.name}: steps out of order:\n{log}"
            assert "mod: template installed in /root" in log
            # The mod's file arrived byte for byte through the Docker API, and setup's file is there.
            copied = lab.docker(node, "exec", "templated-engine-1", "cat", "/root/lab-template.jinja").stdout
            assert copied == TEMPLATE
            assert "setup ran in /root" in lab.docker(node, "exec", "templated-engine-1", "cat",
                                                      "/tmp/lab-setup/done").stdout
    finally:
        for node in nodes:
            compose(lab, node, files[node.name], "down", "--timeout", "5")


def test_a_failing_mod_fails_the_rank_before_the_engine(tmp_path: Path, clean_lab: Lab):
    lab = clean_lab
    node = lab.nodes[0]
    (tmp_path / "recipes" / "broken").mkdir(parents=True)
    (tmp_path / "recipes" / "broken" / "recipe.toml").write_text(
        RECIPE.replace("required_nodes = 2\ntensor_parallel_size = 2\n", "")
        .replace('setup = ["mkdir', 'setup = ["true", "mkdir'))
    mod = tmp_path / "mods" / "chat-template"
    mod.mkdir(parents=True)
    (mod / "run.sh").write_text("#!/bin/sh\necho 'mod: failing on purpose' >&2\nexit 3\n")
    lab.write_cluster(tmp_path / "cluster.toml", [node])
    done = subprocess.run(["recipegen", "build"], cwd=tmp_path, env=lab.env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    file = tmp_path / "out" / "broken" / node.name / "compose.yaml"
    try:
        up = compose(lab, node, file, "up", "-d", "--wait", "--wait-timeout", "60", timeout=100)
        assert up.returncode != 0
        log = compose(lab, node, file, "logs", "--no-color").stdout
        assert "mod: failing on purpose" in log and "[vllm] " not in log, log
    finally:
        compose(lab, node, file, "down", "--timeout", "5")
