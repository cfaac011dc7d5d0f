"""`recipegen bench` given what a careless or hostile user gives it (issue 30): options out of llama-benchy's
range refused as usage errors before anything runs, a results folder it cannot write found before the
benchmark (and figures kept when the final write fails anyway), damaged results.json named in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from generator.bench.results import BenchRun, write
from tests.test_bench import REPORT
from tests.test_import import run

ROOT = Path(__file__).resolve().parent.parent
RID = "qwen3-coder-30b-a3b-fp8"


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    shutil.copytree(ROOT / "schema", tmp_path / "schema")
    shutil.copy(ROOT / "cluster.toml", tmp_path / "cluster.toml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("args, option", [
    (["--pp", "0"], "--pp"), (["--pp=-5"], "--pp"), (["--depth=-100"], "--depth"), (["--tg", "0"], "--tg"),
    (["--concurrency", "0"], "--concurrency"), (["--concurrency", "-1"], "--concurrency"),
    (["--concurrency", "1,0"], "--concurrency"), (["--timeout", "-1"], "--timeout"),
    (["--timeout", "nan"], "--timeout"), (["--timeout", "inf"], "--timeout"), (["--timeout", "0"], "--timeout"),
    (["--pp", "99999999999999999999"], "--pp"), (["--depth", "99999999999999999999"], "--depth"),
    (["--concurrency", "100000"], "--concurrency"),
])
def test_an_option_out_of_range_is_a_usage_error_naming_it_before_anything_runs(project, monkeypatch, args,
                                                                                option):
    import generator.cli.bench

    def never(*a: object, **k: object) -> None:
        raise AssertionError("compiled: the option was not refused first")

    monkeypatch.setattr(generator.cli.bench, "compile_recipe", never)
    result = run("bench", RID, *args)
    assert result.exit_code == 2, result.output
    assert option in result.output


@pytest.mark.parametrize("command", ["up", "down", "images", "models"])
@pytest.mark.parametrize("value", ["nan", "inf", "1e999", "-inf", "-1"])
def test_lock_wait_must_be_a_finite_number_of_seconds(project, command, value):
    result = run(command, RID, "--lock-wait", value)
    assert result.exit_code == 2 and "--lock-wait" in result.output, result.output


@pytest.mark.parametrize("table, key", [("pp = [0]", "bench.pp"), ("pp = 0", "bench.pp"),
                                        ("concurrency = [0]", "bench.concurrency"),
                                        ("args = { tg = [0] }", "bench.args.tg"),
                                        ("depth = [99999999999]", "bench.depth"),
                                        ("timeout = 99999999999", "bench.timeout")])
def test_a_bench_table_value_out_of_range_is_refused_by_validate(project, table, key):
    recipe = project / "recipes" / RID / "recipe.toml"
    recipe.write_text(recipe.read_text() + f"\n[bench]\n{table}\n")
    result = run("validate", str(recipe))
    assert result.exit_code == 1 and f"error: {key}" in result.output, result.output


RUN = BenchRun(512, 32, 0, 1, 2000.0, 40.0, 250.0)


@pytest.mark.parametrize("damage", [
    b'{"runs": [{"pp": 512', b'[1, 2]', b'{"runs": [{"pp": 512}]}', b'\x89PNG\r\n\x1a\n\x00\xff',
    b'{"runs": "many"}', b'{"recipe": "x"}', b'{"runs": [{"pp": "a", "tg": 1, "depth": 0, "concurrency": 1, '
                                            b'"pp_tps": 1, "tg_tps": 1, "ttft_ms": 1}]}', b'{"runs": [7]}',
], ids=["truncated", "a-list", "missing-fields", "binary", "runs-not-a-list", "no-runs", "wrong-type",
        "run-not-a-table"])
def test_compare_over_a_damaged_results_file_is_one_line_naming_it(project, damage):
    root = project / "bench" / RID
    write(root / "20260101T000000Z", [RUN], {})
    write(root / "20260102T000000Z", [RUN], {})
    (root / "20260102T000000Z" / "results.json").write_bytes(damage)
    result = run("bench", RID, "--compare")
    assert result.exit_code == 1, result.output
    assert len(result.output.splitlines()) == 1 and "20260102T000000Z/results.json" in result.output, result.output


@pytest.fixture
def head(project, monkeypatch) -> list[str]:
    """A head that serves the recipe's model, and llama-benchy replaced by its recorded report."""
    import generator.bench.action as action

    assert run("build", RID).exit_code == 0
    calls: list[str] = []

    class Listed(set[str]):
        def __contains__(self, item: object) -> bool:
            return True

    monkeypatch.setattr(action, "llama_benchy_version", lambda: "0.4.0")
    monkeypatch.setattr(action, "served_models", lambda url: Listed())
    monkeypatch.setattr(action, "run", lambda *a, **k: calls.append("run") or REPORT)
    return calls


def test_a_results_folder_that_cannot_be_written_is_found_before_the_benchmark(project, head):
    (project / "not-a-folder").write_text("x")
    result = run("bench", RID, "--results", "not-a-folder/deeper")
    assert result.exit_code == 1, result.output
    assert "not-a-folder" in result.output and len(result.output.splitlines()) == 1, result.output
    assert head == []  # llama-benchy never started


def test_when_the_final_write_fails_the_figures_are_kept_and_the_place_named(project, head, monkeypatch,
                                                                             tmp_path_factory):
    import tempfile

    import generator.bench.action as action

    # The system's temp folder stands in a folder of this test's: the kept figures are removed with all they made.
    system_tmp = tmp_path_factory.mktemp("system-tmp")
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))

    real = action.write

    def fails_in_bench(folder: Path, *a: object) -> None:
        if project in folder.parents:
            raise OSError(28, "No space left on device")
        real(folder, *a)  # type: ignore[arg-type]

    monkeypatch.setattr(action, "write", fails_in_bench)
    result = run("bench", RID)
    assert head == ["run"] and result.exit_code == 1, result.output
    line = next(line for line in result.output.splitlines() if "No space left on device" in line)
    kept = Path(line.split("kept in ", 1)[1].split()[0])
    assert json.loads((kept / "results.json").read_text())["runs"][0]["pp"] == 512
    assert not list((project / "bench").rglob("results.json"))
    assert kept.parent.parent == system_tmp and kept.parent.name.startswith("recipegen-bench-")
    shutil.rmtree(kept.parent)  # the folder mkdtemp made, not only the results folder inside it
    assert not list(system_tmp.iterdir())


def test_the_schema_bounds_each_count_as_the_command_line_does():
    from generator.resolve.benchtable import BOUNDS

    schema = json.loads((ROOT / "schema" / "recipe.schema.json").read_text())
    for props in (schema["properties"]["bench"]["properties"], schema["definitions"]["benchOptions"]["properties"]):
        for name, (least, most) in BOUNDS.items():
            one, many = props[name]["oneOf"]
            for number in (one, many["items"]):
                assert (number["minimum"], number["maximum"]) == (least, most), name
