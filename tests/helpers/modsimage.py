"""Shared by the tests: moved from tests/test_mods_image.py, which uses them too."""

from __future__ import annotations

from pathlib import Path
from click.testing import CliRunner
from generator.cli import main

TESTS = Path(__file__).resolve().parent.parent


ROOT = TESTS.parent


CLUSTER = (ROOT / "tests" / "golden" / "mods-image" / "cluster.toml").read_text()


RECIPE = '''engine = "vllm"
docker_image = "nvcr.io/nvidia/vllm:25.10-py3"
model = "org/model"
required_nodes = 2
tensor_parallel_size = 2
mods = {mods}
{extra}
'''


def project(tmp: Path, files: dict[str, bytes], mods: str = '["mods/m"]', extra: str = "") -> Path:
    (tmp / "recipes" / "r").mkdir(parents=True)
    (tmp / "recipes" / "r" / "recipe.toml").write_text(RECIPE.format(mods=mods, extra=extra))
    (tmp / "cluster.toml").write_text(CLUSTER)
    for name, data in files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return tmp


def build(root: Path, monkeypatch) -> tuple[int, str]:
    monkeypatch.chdir(root)
    result = CliRunner().invoke(main, ["build"])
    assert "Traceback" not in result.output
    return result.exit_code, result.output


SMALL = {"recipes/r/mods/m/run.sh": b"#!/bin/sh\necho hi\n"}


def compose(root: Path) -> str:
    return (root / "out" / "r" / "spark1" / "compose.yaml").read_text()
