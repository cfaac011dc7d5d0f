"""Issue 15 through the real lab: `recipegen models` copies a model and its draft model node to node with helper
containers of the engine image (python3, no nc/wget), resumably, refusing a target without room, and none of
the bytes pass through this machine."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lab import IMAGE, Lab
from helpers.clisafety import interruptible  # Ctrl-C reaches the child however this run started

pytestmark = pytest.mark.lab

MODEL = "lab-org/tiny-model"
DRAFT = "lab-org/tiny-draft"
COMMIT = "ab" * 20
RECIPE = f'''engine = "vllm"
docker_image = "{IMAGE}"
model = "{MODEL}"
required_nodes = 3
tensor_parallel_size = 3
distributed_backend = "mp"
shm_size = "1gb"
args = ["--served-model-name", "tiny", "--speculative-config",
        "'{{\\"model\\": \\"{DRAFT}\\", \\"num_speculative_tokens\\": 3}}'"]

[env]
HF_HUB_OFFLINE = "1"
LAB_JOIN_TIMEOUT = "5"
'''



def repo(root: Path, model: str) -> Path:
    return root / "hub" / ("models--" + model.replace("/", "--"))


def put_model(cache: Path, model: str, size: int) -> int:
    """The layout `hf download` leaves: an LFS blob named by its sha256, config.json by its git blob id,
    snapshot links relative, refs/main. Returns the bytes of its blobs."""
    weights, config = os.urandom(size), b'{"architectures": ["Tiny"]}'
    blobs = {hashlib.sha256(weights).hexdigest(): weights,
             hashlib.sha1(b"blob %d\0" % len(config) + config).hexdigest(): config}
    base = repo(cache, model)
    (base / "blobs").mkdir(parents=True)
    for name, data in blobs.items():
        (base / "blobs" / name).write_bytes(data)
    snap = base / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    names = list(blobs)
    (snap / "model.safetensors").symlink_to(f"../../blobs/{names[0]}")
    (snap / "config.json").symlink_to(f"../../blobs/{names[1]}")
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(COMMIT)
    return len(weights) + len(config)


def layout(cache: Path, model: str) -> dict[str, object]:
    """sha256 of every file and every link's target: what must be identical across nodes."""
    base = repo(cache, model)
    found: dict[str, object] = {}
    for path in sorted(base.rglob("*")) if base.exists() else []:
        rel = str(path.relative_to(base))
        if path.is_symlink():
            found[rel] = "-> " + os.readlink(path)
        elif path.is_file():
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture
def project(tmp_path: Path, clean_lab: Lab):
    lab = clean_lab
    for node in lab.nodes[:3]:  # caches of an earlier test
        subprocess.run(["rm", "-rf", str(node.hf_cache / "hub")], check=True)
    (tmp_path / "recipes" / "spec").mkdir(parents=True)
    (tmp_path / "recipes" / "spec" / "recipe.toml").write_text(RECIPE)
    lab.write_cluster(tmp_path / "cluster.toml", lab.nodes[:3])
    return tmp_path


def recipegen(lab: Lab, cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["recipegen", *args], cwd=cwd, env=lab.env, capture_output=True, text=True,
                          timeout=timeout)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def models(lab: Lab, cwd: Path) -> subprocess.CompletedProcess[str]:
    return recipegen(lab, cwd, "models", "spec")


def counters(name: str) -> int:
    stats = Path("/sys/class/net") / name / "statistics"
    return int((stats / "rx_bytes").read_text()) + int((stats / "tx_bytes").read_text())


def helpers_left(lab: Lab) -> list[str]:
    return [line for node in lab.nodes[:3] for line in
            lab.docker(node, "ps", "-a", "-q", "--filter", "label=dev.recipegen.transfer").stdout.split()]


def test_model_and_draft_reach_every_node_identical_without_this_machine(project: Path, clean_lab: Lab) -> None:
    lab = clean_lab
    a, b, c = lab.nodes[:3]
    size = put_model(a.hf_cache, MODEL, 24 << 20) + put_model(a.hf_cache, DRAFT, 3 << 20)
    bridge, veth = counters(lab.bridge), counters(a.veth_host)
    proc = models(lab, project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for model in (MODEL, DRAFT):
        assert layout(a.hf_cache, model) == layout(b.hf_cache, model) == layout(c.hf_cache, model) != {}
    # The bytes went out of spark1's veth (to spark2, the chain's first link); this machine's end of the bridge
    # carried none of them (docker talks to the nodes over unix sockets).
    assert counters(a.veth_host) - veth > size
    assert counters(lab.bridge) - bridge < size // 100
    assert "copied from spark1" in proc.stdout
    assert helpers_left(lab) == []
    again = models(lab, project)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "copied" not in again.stdout and again.stdout.count("present") == 4, again.stdout
    # the engine's own preflight (`up`) finds both models on every node and the ranks start
    assert recipegen(lab, project, "build").returncode == 0
    try:
        up = recipegen(lab, project, "up", "spec", "--timeout", "60")
        assert up.returncode == 0, up.stderr
    finally:
        recipegen(lab, project, "down", "spec")
    # a blob gone under a snapshot link: preflight calls the model incomplete on that node alone
    weights = (repo(c.hf_cache, DRAFT) / "snapshots" / COMMIT / "model.safetensors").resolve()
    weights.unlink()
    up = recipegen(lab, project, "up", "spec", "--timeout", "30")
    assert up.returncode == 1
    assert f"spark3: preflight: draft model {DRAFT} is incomplete in this node's Hugging Face cache" in up.stderr
    assert "spark1: preflight" not in up.stderr and "spark2: preflight" not in up.stderr


def test_interrupted_copy_leaves_nothing_running_and_resumes(project: Path, clean_lab: Lab) -> None:
    """Ctrl-C midway (the link slowed so there is a midway): every helper container on every node is gone, no
    node shows a snapshot of the half-copied model, and the next run finishes it identical."""
    lab = clean_lab
    a, b, c = lab.nodes[:3]
    put_model(a.hf_cache, MODEL, 32 << 20)
    put_model(a.hf_cache, DRAFT, 1 << 20)
    shape = ["ip", "netns", "exec", a.netns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "40mbit",
             "burst", "64kb", "latency", "200ms"]
    subprocess.run(shape, check=True)
    try:
        proc = subprocess.Popen(["recipegen", "models", "spec"], cwd=project, env=lab.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=interruptible)
        partial = repo(b.hf_cache, MODEL) / "blobs"
        deadline = time.monotonic() + 60
        while not (partial.exists() and any(p.name.endswith(".recipegen-partial") and p.stat().st_size > 1 << 20
                                            for p in partial.iterdir())):
            assert time.monotonic() < deadline and proc.poll() is None, "the copy never got under way"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=90)
    finally:
        subprocess.run(["ip", "netns", "exec", a.netns, "tc", "qdisc", "del", "dev", "eth0", "root"], check=False)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and "interrupted" in err
    assert helpers_left(lab) == []
    assert not (repo(b.hf_cache, MODEL) / "snapshots").exists()
    assert not (repo(c.hf_cache, MODEL) / "snapshots").exists()
    assert recipegen(lab, project, "build").returncode == 0
    up = recipegen(lab, project, "up", "spec", "--timeout", "30")
    assert up.returncode == 1
    assert f"spark2: preflight: model {MODEL} is not in this node's Hugging Face cache" in up.stderr
    assert "(`recipegen models spec` copies it from a node that has it)" in up.stderr
    again = models(lab, project)
    assert again.returncode == 0, again.stdout + again.stderr
    for model in (MODEL, DRAFT):
        assert layout(a.hf_cache, model) == layout(b.hf_cache, model) == layout(c.hf_cache, model)


def test_a_target_without_room_is_refused_before_anything_is_copied(project: Path, clean_lab: Lab) -> None:
    lab = clean_lab
    a, b, c = lab.nodes[:3]
    put_model(a.hf_cache, MODEL, 8 << 20)
    put_model(a.hf_cache, DRAFT, 1 << 20)
    c.hf_cache.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(c.hf_cache)], check=True)
    try:
        proc = models(lab, project)
        on_c = sorted(p.name for p in c.hf_cache.rglob("*") if p.is_file())
    finally:
        subprocess.run(["umount", "-l", str(c.hf_cache)], check=True)
    assert proc.returncode == 1
    assert "spark3" in proc.stderr.splitlines()[-1] and "spark2" not in proc.stderr.splitlines()[-1]
    assert "refused: needs" in " ".join(proc.stdout.split()), proc.stdout
    assert on_c == []  # nothing at all was written there
    assert layout(b.hf_cache, MODEL) == layout(a.hf_cache, MODEL)


def test_up_sync_puts_the_models_in_place_then_serves(project: Path, clean_lab: Lab) -> None:
    lab = clean_lab
    a, b, c = lab.nodes[:3]
    put_model(a.hf_cache, MODEL, 2 << 20)
    put_model(a.hf_cache, DRAFT, 1 << 20)
    assert recipegen(lab, project, "build").returncode == 0
    try:
        up = recipegen(lab, project, "up", "spec", "--sync", "--timeout", "60")
        assert up.returncode == 0, up.stdout + up.stderr
    finally:
        recipegen(lab, project, "down", "spec")
    assert "copied from spark1" in up.stdout
    assert layout(a.hf_cache, MODEL) == layout(b.hf_cache, MODEL) == layout(c.hf_cache, MODEL)


STAND_IN_HF = r'''#!/usr/bin/python3
"""A stand-in of the Hugging Face CLI (no network in the lab): `hf download MODEL [--revision R]` writes the
cache layout the real one writes, and refuses without the token a gated repo needs."""
import hashlib, os, sys
args = sys.argv[1:]
if args[:1] != ["download"]:
    sys.exit("usage: hf download MODEL")
model = args[1]
if hashlib.sha256(os.environ.get("HF_TOKEN", "").encode()).hexdigest() != "TOKEN_SHA256":
    sys.exit("401 Client Error: a token is needed for " + model)
base = os.path.join(os.environ.get("HF_HOME", "/root/.cache/huggingface"), "hub", "models--" + model.replace("/", "--"))
weights = hashlib.sha256(model.encode()).digest() * 65536
name = hashlib.sha256(weights).hexdigest()
commit = hashlib.sha1(model.encode()).hexdigest()
for d in ("blobs", "snapshots/" + commit, "refs"):
    os.makedirs(os.path.join(base, d), exist_ok=True)
with open(os.path.join(base, "blobs", name), "wb") as f:
    f.write(weights)
os.symlink("../../blobs/" + name, os.path.join(base, "snapshots", commit, "config.json"))
with open(os.path.join(base, "refs", "main"), "w") as f:
    f.write(commit)
print(os.path.join(base, "snapshots", commit))
'''


def test_a_model_on_no_node_is_downloaded_on_one_then_fanned_out(project: Path, clean_lab: Lab) -> None:
    """The image's own `hf` downloads it on the head node, with the token passed by name (pass_env); then the
    chain copies it to the others. The token is in no file recipegen wrote."""
    lab = clean_lab
    image = "lab-org/engine-with-hf:1"
    context = project / "hf-image"
    context.mkdir()
    token = "hf_lab_secret"
    (context / "hf").write_text(STAND_IN_HF.replace("TOKEN_SHA256", hashlib.sha256(token.encode()).hexdigest()))
    (context / "hf").chmod(0o755)
    (context / "Dockerfile").write_text(f"FROM {IMAGE}\nCOPY hf /usr/bin/hf\n")
    for node in lab.nodes[:3]:
        subprocess.run(["docker", "--context", node.context, "build", "-q", "-t", image, str(context)],
                       env={**lab.env, "DOCKER_BUILDKIT": "0"}, check=True, capture_output=True)
    recipe = project / "recipes" / "spec" / "recipe.toml"
    recipe.write_text(RECIPE.replace(f'docker_image = "{IMAGE}"', f'docker_image = "{image}"')
                      .replace("[env]", 'pass_env = ["HF_TOKEN"]\n\n[env]'))
    env = {**lab.env, "HF_TOKEN": token}
    try:
        proc = subprocess.run(["recipegen", "models", "spec"], cwd=project, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"{MODEL}: on none of the nodes" in proc.stderr and "downloading it on spark1" in proc.stderr
        for model in (MODEL, DRAFT):
            found = layout(lab.nodes[0].hf_cache, model)
            assert found and found == layout(lab.nodes[1].hf_cache, model) == layout(lab.nodes[2].hf_cache, model)
        places = [*project.rglob("*"), *(p for n in lab.nodes[:3] for p in n.hf_cache.rglob("*"))]
        written = [p for p in places if p.is_file() and token.encode() in p.read_bytes()]
        assert written == []
        # without the token the download fails, named, and nothing is copied
        for node in lab.nodes[:3]:
            subprocess.run(["rm", "-rf", str(node.hf_cache / "hub")], check=True)
        denied = subprocess.run(["recipegen", "models", "spec"], cwd=project, env=lab.env, capture_output=True,
                                text=True, timeout=300)
        assert denied.returncode == 1 and "401" in " ".join(denied.stdout.split()), denied.stdout + denied.stderr
        assert "spark1, spark2, spark3" in denied.stderr
    finally:
        for node in lab.nodes[:3]:
            lab.docker(node, "rmi", image, check=False)


def test_a_target_whose_cache_is_not_writable_is_refused(project: Path, clean_lab: Lab) -> None:
    lab = clean_lab
    a, b, c = lab.nodes[:3]
    put_model(a.hf_cache, MODEL, 1 << 20)
    put_model(a.hf_cache, DRAFT, 1 << 20)
    b.hf_cache.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(b.hf_cache), str(b.hf_cache)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(b.hf_cache)], check=True)
        proc = models(lab, project)
    finally:
        subprocess.run(["umount", "-l", str(b.hf_cache)], check=True)
    assert proc.returncode == 1
    assert "spark2" in proc.stderr.splitlines()[-1] and "spark3" not in proc.stderr.splitlines()[-1]
    assert "is not writable" in " ".join(proc.stdout.split()), proc.stdout
    assert layout(c.hf_cache, MODEL) == layout(a.hf_cache, MODEL)


def test_progress_on_a_terminal_shows_each_receiving_node(project: Path, clean_lab: Lab) -> None:
    """On a terminal the copy draws rich progress rows, one per receiving node (bytes, rate, ETA)."""
    import pty

    lab = clean_lab
    put_model(lab.nodes[0].hf_cache, MODEL, 8 << 20)
    put_model(lab.nodes[0].hf_cache, DRAFT, 1 << 20)
    main, side = pty.openpty()
    proc = subprocess.Popen(["recipegen", "models", "spec"], cwd=project, env={**lab.env, "COLUMNS": "160"},
                            stdin=side, stdout=side, stderr=side)
    os.close(side)
    seen = b""
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the terminal closed: the program ended
            break
        if not data:
            break
        seen += data
    os.close(main)
    assert proc.wait(timeout=120) == 0, seen.decode(errors="replace")
    text = seen.decode(errors="replace")
    assert "Traceback" not in text
    for node in ("spark2", "spark3"):
        assert f"{node} {MODEL}" in text
    assert "MiB" in text and "models of spec" in text


def test_a_node_without_the_image_is_named_with_the_fix(project: Path, clean_lab: Lab) -> None:
    lab = clean_lab
    image = "lab-org/only-here:1"
    lab.docker(lab.nodes[0], "tag", IMAGE, image)
    lab.docker(lab.nodes[1], "tag", IMAGE, image)
    recipe = project / "recipes" / "spec" / "recipe.toml"
    recipe.write_text(RECIPE.replace(f'docker_image = "{IMAGE}"', f'docker_image = "{image}"'))
    put_model(lab.nodes[0].hf_cache, MODEL, 1 << 20)
    put_model(lab.nodes[0].hf_cache, DRAFT, 1 << 20)
    try:
        proc = models(lab, project)
    finally:
        for node in lab.nodes[:2]:
            lab.docker(node, "rmi", image, check=False)
    assert proc.returncode == 1
    text = " ".join(proc.stdout.split())
    assert f"image {image} is not on this node (the helpers run it): `recipegen images spec` first" in text, text
    assert proc.stderr.splitlines()[-1].startswith("spec: models not in place on spark3 ")
    assert layout(lab.nodes[1].hf_cache, MODEL) == layout(lab.nodes[0].hf_cache, MODEL)
