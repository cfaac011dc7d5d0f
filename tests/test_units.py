"""Sizes and durations accepted exactly where Docker and Go accept them: go-units' parseSize (RAMInBytes for
shm_size and memory_limit, FromHumanSize for log max-size) checked against the real Compose binary as oracle, and
the schema's formats accepting what the issue found refused (`110GiB`, `100M`, `"0"`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from generator.read.units import human_size, log_size_ok, size_bytes, start_period_ok
from helpers.golden import compose_binary, compose_env

SIZES = ["32g", "32G", "32gb", "32GiB", "32 GiB", "32 gb", "110GiB", "1.5t", "0.5k", ".5g", "1.", "1e3k", "+5",
         "5", "5b", "5B", "5 b", "1 ", "100M", "100MB", "100mib", "8191p", "0x1p4", "0X10P-2k",
         "32gigs", "-1", "32i", "32ib", "1  g", " 1", "1.2.3", "g", "", "5bb", "5kb ", "1_000",
         "1e400", "5\u212a", "1e18", "1__0", "_1", "1_", "1_.5", "1._5", "0x_1p4", "1_0e1_0", "0x1.8p1"]
# Go's int64(float64) is undefined beyond int64: on amd64 Compose then writes -9223372036854775808, which dockerd
# refuses ("SHM size can not be less than 0"); on arm64 (the Sparks) it saturates. recipegen refuses them.
UNDEFINED = ["8192p", "inf b", "nan b", "9223372036854775807", "9223372036854775296"]


def _compose_reads(tmp_path: Path, values: list[str]) -> dict[str, int | None]:
    """shm_size as real Compose reads each value (RAMInBytes): bytes, or None where it refuses the file."""
    found: dict[str, int | None] = {}
    for i, value in enumerate(values):
        path = tmp_path / f"c{i}.yaml"
        path.write_text(f"services:\n  s:\n    image: x\n    shm_size: {json.dumps(value)}\n", "utf-8")
        run = subprocess.run([str(compose_binary()), "-f", str(path), "config", "--format", "json"],
                             capture_output=True, text=True, env=compose_env(tmp_path), timeout=60)
        shm = json.loads(run.stdout)["services"]["s"].get("shm_size") if run.returncode == 0 else None
        found[value] = None if shm is None else int(shm)
    return found


def test_sizes_read_as_compose_reads_them(tmp_path: Path) -> None:
    compose = _compose_reads(tmp_path, SIZES + UNDEFINED)
    differ = {v: (size_bytes(v), compose[v]) for v in SIZES if size_bytes(v) != compose[v]}
    assert all(compose[v] == -2**63 and size_bytes(v) is None for v in UNDEFINED), compose
    assert not differ, f"recipegen vs Compose (bytes or None = refused): {differ}"


@pytest.mark.parametrize("text, binary, decimal", [
    ("100M", 100 * 2**20, 100_000_000), ("1.5k", 1536, 1500), ("32GiB", 32 * 2**30, 32_000_000_000),
    ("-1", None, None), ("32gigs", None, None)])
def test_binary_and_decimal_multiples(text: str, binary: int | None, decimal: int | None) -> None:
    assert (size_bytes(text), human_size(text)) == (binary, decimal)


@pytest.mark.parametrize("text, ok", [("100m", True), ("100M", True), ("1g", True), ("1.5k", True), ("", True),
                                      ("0", False), ("0.1", False), ("100x", False), ("-1m", False)])
def test_log_max_size_as_dockerd_reads_it(text: str, ok: bool) -> None:
    """json-file: FromHumanSize, and more than 0 bytes ("max-size must be a positive number")."""
    assert log_size_ok(text) is ok


@pytest.mark.parametrize("text, ok", [("0", True), ("30m", True), ("1ms", True), ("1.5h", True), (".5s", True),
                                      ("500us", False), ("-1s", False), ("1", False), ("ns", False)])
def test_health_start_period_as_go_and_dockerd_read_it(text: str, ok: bool) -> None:
    """time.ParseDuration, then dockerd: 0 (none) or at least 1 ms."""
    assert start_period_ok(text) is ok


def test_values_docker_takes_validate(tmp_path: Path) -> None:
    """The issue's three (refused before) and a spaced size: schema and lint accept what Docker accepts."""
    from click.testing import CliRunner

    from generator.cli import main

    recipe = tmp_path / "recipes" / "sizes" / "recipe.toml"
    recipe.parent.mkdir(parents=True)
    recipe.write_text('engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\nmodel = "Qwen/Qwen3-32B"\n'
                      'memory_limit = "110GiB"\nlog_max_size = "100M"\nhealth_start_period = "0"\n'
                      'shm_size = "32 GB"\n', "utf-8")
    result = CliRunner().invoke(main, ["validate", str(recipe)])
    assert result.exit_code == 0, result.output


def test_schema_patterns_are_the_shapes_the_formats_assume() -> None:
    """The formats leave a value of the wrong shape to the pattern (one message per value): both must agree."""
    from generator.read.schemas import schema
    from generator.read.units import DURATION_SHAPE, SIZE_SHAPE

    shapes = {"shm_size": SIZE_SHAPE, "memory_limit": SIZE_SHAPE, "health_start_period": DURATION_SHAPE,
              "stop_grace_period": DURATION_SHAPE}
    for kind in ("recipe", "cluster"):
        for key, prop in schema(kind)["properties"].items():
            if key in shapes:
                assert prop["pattern"] == f"^{shapes[key].pattern}$", (kind, key)
    for value in SIZES + UNDEFINED:  # every size Docker reads has the shape
        assert size_bytes(value) is None or SIZE_SHAPE.fullmatch(value), value
