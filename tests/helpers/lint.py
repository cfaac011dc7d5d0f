"""Shared by the tests: moved from tests/test_lint.py, which uses them too."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from click.testing import CliRunner
from generator.cli import main

TESTS = Path(__file__).resolve().parent.parent


ROOT = TESTS.parent


LINT = ROOT / "tests" / "lint"


CLUSTER = LINT / "cluster.toml"


FINDING = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): (?P<severity>error|warning|note)\[(?P<rule>[a-z-]+)\]: "
                     r"(?P<key>[^:\n]+): (?P<message>.*)$", re.M)


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    col: int
    severity: str
    rule: str
    key: str
    message: str


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def findings(result) -> list[Finding]:
    return [Finding(m["file"], int(m["line"]), int(m["col"]), m["severity"], m["rule"], m["key"], m["message"])
            for m in FINDING.finditer(result.stderr)]


def validate(path: Path | str, *extra: str):
    return run("validate", str(path), "--cluster", str(CLUSTER), *extra)


HEAD = '''engine = "{engine}"
docker_image = "{image}"
model = "Qwen/Qwen3-32B"
required_nodes = {nodes}
tensor_parallel_size = {nodes}
args = [
{args}]
'''


def tmp_recipe(tmp_path: Path, args: str, engine: str = "vllm", env: str = "",
               image: str = "vllm/vllm-openai:v0.34.0", nodes: int = 2) -> Path:
    """A recipe with these args. The flag-data tests use one node on old vLLM images: two-node `mp` there gets
    the engine-release warning (no --nnodes before 0.31), which is not what they test."""
    path = tmp_path / "case" / "recipe.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEAD.format(engine=engine, args=args, image=image, nodes=nodes)
                    + (f"\n[env]\n{env}" if env else ""),
                    "utf-8")
    return path
