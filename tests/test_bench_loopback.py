"""`recipegen bench` end to end with the real llama-benchy 0.4.0, against the lab's OpenAI stand-in run as a plain
process on 127.0.0.1 (no lab, no Docker), made to forget the capital of France as a model with random weights
does: llama-benchy's coherence test fails the run unless it is skipped, from the recipe's [bench] or the command
line; and a schedule (the arena profile, narrowed to two cells) runs one llama-benchy per cell, in its order."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from generator.bench.options import ARENA_SCHEDULE
from helpers.serve import needs_llama_benchy, word_level_tokenizer

ENGINE = Path(__file__).parent / "lab" / "engine" / "python"
# The stand-in, serving `tiny`, with an answer that never names Paris.
FORGETFUL = """
import sys
import labengine.openai_api as api
from labengine.common import Log, serve
known = api.answer
api.answer = lambda prompt, n, eos: known(prompt.replace("capital of France", "capital"), n, eos)
serve(Log("vllm"), "127.0.0.1", int(sys.argv[1]), "tiny", "vllm")
"""
RECIPE = """engine = "vllm"
docker_image = "vllm/vllm-openai:v0.11.0"
model = "org/tiny"
args = ["--served-model-name", "tiny", "--port", "{port}"]
"""
CLUSTER = 'name = "loopback"\n[[nodes]]\nname = "local"\naddress = "127.0.0.1"\ncontext = "default"\n'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def head() -> Iterator[int]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ENGINE), "LAB_DECODE_TPS": "400", "LAB_PREFILL_TPS": "40000",
           "LAB_TTFT_BASE_MS": "5"}
    proc = subprocess.Popen([sys.executable, "-c", FORGETFUL, str(port)], env=env, stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, "the stand-in did not start"
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def recipegen(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "generator", *args], cwd=root, capture_output=True, text=True,
                          timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_coherence_is_skipped_from_the_recipe_or_the_command_line_and_a_schedule_runs_in_order(
        head: int, tmp_path: Path):
    needs_llama_benchy()
    for rid, bench in (("plain", ""), ("skips", "\n[bench]\nskip_coherence = true\n")):
        (tmp_path / "recipes" / rid).mkdir(parents=True)
        (tmp_path / "recipes" / rid / "recipe.toml").write_text(RECIPE.format(port=head) + bench)
    (tmp_path / "cluster.toml").write_text(CLUSTER)
    assert recipegen(tmp_path, "build").returncode == 0
    rng = random.Random(28)
    words = [f"w{i}" for i in range(300)]
    (tmp_path / "book.txt").write_text("\n".join(" ".join(rng.choice(words) for _ in range(12)) + "."
                                                 for _ in range(400)))
    tokenizer = word_level_tokenizer((tmp_path / "book.txt").read_text(), tmp_path / "tokenizer.json")
    small = ["--tokenizer", str(tokenizer), "--text", str(tmp_path / "book.txt"), "--pp", "32", "--tg", "8",
             "--runs", "1"]

    refused = recipegen(tmp_path, "bench", "plain", *small)
    assert refused.returncode == 1 and "Coherence test FAILED" in refused.stderr, refused.stderr
    assert not (tmp_path / "bench" / "plain").exists()  # nothing written

    assert recipegen(tmp_path, "bench", "skips", *small).returncode == 0

    arena = recipegen(tmp_path, "bench", "plain", *small, "--skip-coherence", "--profile", "arena",
                      "--depth", "0", "--concurrency", "2,10")
    assert arena.returncode == 0, arena.stderr
    [folder] = (tmp_path / "bench" / "plain").iterdir()
    results = json.loads((folder / "results.json").read_text())
    # the arena's order (concurrency 10 before 2 at depth 0), not llama-benchy's own (ascending as given)
    assert [c for c in ARENA_SCHEDULE if c in {(0, 2), (0, 10)}] == [(0, 10), (0, 2)]
    assert [(r["depth"], r["concurrency"]) for r in results["runs"]] == [(0, 10), (0, 2)]
    assert all((r["pp"], r["tg"]) == (32, 8) and r["tg_tps"] for r in results["runs"])
    assert results["options"]["extra"] == {"enable_prefix_caching": True, "skip_coherence": True}
