"""A recipe's `[bench]` table: sparkrun's `benchmark:` block (flat keys and `args`), validated by the schema with
the file, line and key of a mistake, inherited key by key, and its options those llama-benchy's CLI accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from generator.cli import main
from generator.resolve.benchtable import BLOCK_KEYS, OPTIONS, SWITCH_OPTIONS, BenchTable
from generator.resolve.load import load_recipe

BASE = '''engine = "vllm"
docker_image = "img"
model = "org/m"
'''


def recipe(tmp_path: Path, rid: str, text: str) -> Path:
    folder = tmp_path / "recipes" / rid
    folder.mkdir(parents=True)
    (folder / "recipe.toml").write_text(text)
    return folder / "recipe.toml"


def test_sparkruns_documented_block_loads_with_args_winning_over_flat_keys(tmp_path: Path):
    # RECIPES.md of spark-arena/sparkrun, in TOML; plus a flat key that `args` overrides and sparkrun's alias.
    path = recipe(tmp_path, "r", BASE + '''
[bench]
framework = "llama-benchy"
timeout = 3600
pp = [512]
prefix_caching = true
runs = 2
[bench.args]
pp = [2048]
tg = [32, 128]
concurrency = [1, 2, 5]
''')
    table = load_recipe(path).bench
    assert table == BenchTable(framework="llama-benchy", timeout=3600, options={
        "pp": [2048], "tg": [32, 128], "concurrency": [1, 2, 5], "enable_prefix_caching": True, "runs": 2})


def test_a_child_replaces_its_parents_keys_and_merges_args(tmp_path: Path):
    recipe(tmp_path, "parent", BASE + '[bench]\ntimeout = 60\ntg = [64]\nargs = { pp = [1024], depth = [0, 4096] }\n')
    child = recipe(tmp_path, "child", 'extends = "parent"\n[bench]\ntg = [16]\nargs = { pp = [128] }\n')
    table = load_recipe(child, tmp_path / "recipes").bench
    assert table.timeout == 60
    assert table.options == {"tg": [16], "pp": [128], "depth": [0, 4096]}


def test_no_bench_table_means_llama_benchys_own_defaults(tmp_path: Path):
    assert load_recipe(recipe(tmp_path, "r", BASE)).bench == BenchTable()


@pytest.mark.parametrize("line, message", [
    ("concurency = [1]", "concurency"),
    ("pp = [\"x\"]", "pp"),
    ("model = \"org/other\"", "model"),  # recipegen passes the served name itself
    ("args = { base_url = \"http://x\" }", "base_url"),
])
def test_a_bad_key_is_one_error_naming_file_line_and_key(tmp_path: Path, line: str, message: str):
    path = recipe(tmp_path, "r", BASE + "\n[bench]\n" + line + "\n")
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert f"{path}:6:" in result.output and message in result.output, result.output


def test_the_schema_lists_exactly_the_block_keys_and_options():
    schema = json.loads((Path(__file__).parent.parent / "schema" / "recipe.schema.json").read_text())
    bench = schema["properties"]["bench"]
    assert set(bench["properties"]) == set(BLOCK_KEYS) | set(OPTIONS)
    assert set(schema["definitions"]["benchOptions"]["properties"]) == set(OPTIONS)


def test_every_option_is_one_llama_benchys_cli_accepts():
    """The peer's own parser is the oracle: each option (and its kind) as llama-benchy 0.4.0 declares it."""
    pytest.importorskip("llama_benchy")
    import argparse
    import sys
    from unittest import mock

    from llama_benchy.config import BenchmarkConfig

    parsers: list[argparse.ArgumentParser] = []
    real_parse = argparse.ArgumentParser.parse_args

    def capture(self, *args, **kwargs):
        parsers.append(self)
        raise SystemExit(0)

    with mock.patch.object(argparse.ArgumentParser, "parse_args", capture), mock.patch.object(sys, "argv", ["x"]):
        with pytest.raises(SystemExit):
            BenchmarkConfig.from_args()
    assert real_parse is argparse.ArgumentParser.parse_args
    actions = {a.dest: a for a in parsers[0]._actions}
    flags = {s for a in parsers[0]._actions for s in a.option_strings}
    for option in OPTIONS:
        if option == "prefix_caching":
            continue  # sparkrun's alias
        assert f"--{option.replace('_', '-')}" in flags, option
    for option in SWITCH_OPTIONS:
        action = actions.get(option) or actions["adapt_prompt"]
        assert action.nargs == 0, option
