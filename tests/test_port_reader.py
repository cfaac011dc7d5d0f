"""One reader of the engine's `--port` (issues 42 item 4, 43 item 5): read as the engines read it (argparse's
`type=int`, Python's int()), 1 to 65535 or a `flag-value` error, and the same number for the router, the
healthcheck, the group watch's --health and the port-collision rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.engines.ranks import port_number, port_problem
from helpers.corpus import run_inprocess
from helpers.golden import recipegen, snapshot
from helpers.lint import findings

RECIPE = ('engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.34.0"\nmodel = "Qwen/Qwen3-32B"\n'
          'args = ["--port", "{port}"]\n')
CLUSTER = 'name = "lab"\n[[nodes]]\nname = "n1"\naddress = "10.9.0.1"\ncontext = "n1"\n'


@pytest.mark.parametrize("word, number", [("4000", 4000), ("+4000", 4000), (" 4000", 4000), ("4000 ", 4000),
                                          ("9_000", 9000), ("1", 1), ("65535", 65535)])
def test_a_port_is_what_int_reads(word: str, number: int) -> None:
    assert port_number(word) == number and port_problem(word) is None


@pytest.mark.parametrize("word", ["0", "65536", "99999", "99999999999999999999", "-1", "²", "4k", "", "1" * 5000],
                         ids=lambda w: w[:20] or "empty")
def test_not_a_port(word: str) -> None:
    assert port_number(word) is None and port_problem(word)


def _project(tmp_path: Path, port: str) -> Path:
    project = tmp_path / "p"
    (project / "recipes" / "pr").mkdir(parents=True)
    (project / "cluster.toml").write_text(CLUSTER, "utf-8")
    (project / "recipes" / "pr" / "recipe.toml").write_text(RECIPE.replace("{port}", port), "utf-8")
    return project


@pytest.mark.parametrize("port", ["99999", "0", "65536", "99999999999999999999", "²", "abc"])
def test_validate_and_build_refuse_a_bad_port(tmp_path: Path, port: str, monkeypatch) -> None:
    project = _project(tmp_path, port)
    monkeypatch.chdir(project)
    run = run_inprocess("validate", "--strict")
    assert run.crash is None and run.exit_code == 1, run.stderr
    (f,) = [f for f in findings(run) if f.rule == "flag-value"]
    assert (f.line, f.key) == (4, "args") and "--port" in f.message, run.stderr
    before = snapshot(project)
    built = run_inprocess("build")
    assert built.crash is None and built.exit_code == 1 and "flag-value" in built.stderr, built.stderr
    assert snapshot(project) == before  # nothing written


@pytest.mark.parametrize("port", ["+4000", " 4000", "4_000"])
def test_a_port_int_reads_reaches_the_healthcheck(tmp_path: Path, port: str) -> None:
    project = _project(tmp_path, port)
    result = recipegen(project, "build")
    assert result.exit_code == 0, result.output
    compose = (project / "out" / "pr" / "n1" / "compose.yaml").read_text("utf-8")
    assert "10.9.0.1:4000/health" in compose or "127.0.0.1:4000/health" in compose, compose
    assert ":8000/health" not in compose


def test_a_signed_port_collides_as_its_number(tmp_path: Path) -> None:
    """`--port +29700` is the cluster's transfer_port 29700 to the engine: the collision rule must see it."""
    project = _project(tmp_path, "+29700")
    run = run_inprocess("validate", str(project / "recipes" / "pr" / "recipe.toml"), "--cluster",
                        str(project / "cluster.toml"))
    assert [f.rule for f in findings(run) if f.rule == "port-collision"] == ["port-collision"], run.stderr
