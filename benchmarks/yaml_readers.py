#!/usr/bin/env python3
"""Which YAML parser reads our generated files back (generator/write/verify.py): correctness first, then speed.

    python3 benchmarks/yaml_readers.py [--runs 5]

Correctness: values a recipe can carry (dates, times, YAML 1.1 booleans, numbers, unicode, ...) are rendered
by the real renderer (render.yaml_scalar / render.key) into `KEY: VALUE` lines and read back; a parser fails a
value when it does not give back exactly the string (Compose's yaml.v3 never types a quoted scalar). Speed: the
compose.yaml and stack.yaml files of a generated 100-recipe x 8-node tree, each parsed once per run; the
median milliseconds per file are printed. Candidates whose module is not installed are listed as such.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from functools import cache
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from treegen import make_tree  # noqa: E402

# Strings a YAML 1.1 (or sloppy) resolver types: each must come back as the same string.
TRICKY = ["2024-05-01", "12:30:00", "2024-05-01T00:00:00Z", "2024-05-01 10:00:00", "1:30", "190:20:30", "on", "off",
          "yes", "no", "y", "n", "Y", "N", "ON", "True", "FALSE", "~", "null", "Null", "", "0x1F", "0o17", "017",
          "0b101", "1_000", "1e3", "+1", "-1", ".inf", "-.Inf", ".nan", "NaN", "=", "<<", "1.0", "3.", "é", "\u2028",
          "a: b", "- x", "#c", "!!str", "*a", "&a", "%YAML", "$x", "it's", 'say "hi"', "back\\slash", "\ttab",
          "line\nbreak", "\x7f", "\ufeff", "\U0001f600"]
# Plain (unquoted) scalars as Compose's yaml.v3 reads them into `any`: only true/false, null and numbers are typed;
# v3 reads a plain timestamp into `any` as a string. The templates write few plain scalars, but these must agree.
PLAIN = {"on": "on", "yes": "yes", "y": "y", "off": "off", "2024-05-01": "2024-05-01", "12:30:00": "12:30:00",
         "1:30": "1:30", "true": True, "false": False, "null": None, "~": None, "0x1F": 31, "0o17": 15, "-1": -1,
         "all": "all"}
KEYS = ["HF_HUB_OFFLINE", "on", "yes", "NULL", "True", "E1", "NaN", "inf", "_0", "_1E5", "A.B", "a-b", "y", "n"]


@cache
def _yaml12_loader() -> type:
    """libyaml's parser with the YAML 1.2 core schema's resolvers (PyYAML's own are YAML 1.1's)."""
    import re

    import yaml

    class Yaml12Loader(yaml.CSafeLoader):
        pass

    Yaml12Loader.yaml_implicit_resolvers = {}
    for tag, pattern, first in (
            ("null", r"~|null|Null|NULL|", "~nN"),
            ("bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
            ("int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", "-+0123456789"),
            ("float", r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)",
             "-+0123456789.")):
        Yaml12Loader.add_implicit_resolver(f"tag:yaml.org,2002:{tag}", re.compile(f"^(?:{pattern})$"),
                                           list(first) + ([""] if tag == "null" else []))

    def int_12(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
        text = loader.construct_scalar(node)
        return int(text[2:], 8) if text.startswith("0o") else int(text, 0 if text.startswith("0x") else 10)

    Yaml12Loader.add_constructor("tag:yaml.org,2002:int", int_12)  # 1.1's reads 017 as octal, 1:30 as 90
    return Yaml12Loader


def candidates() -> dict[str, Callable[[str], Any] | str]:
    found: dict[str, Callable[[str], Any] | str] = {}
    try:
        import yaml_rs

        found["yaml-rs 0.1 (Rust)"] = yaml_rs.loads
    except ImportError:
        found["yaml-rs 0.1 (Rust)"] = "not installed"
    try:
        import yaml

        found["PyYAML CSafeLoader, YAML 1.1 resolver"] = lambda t: yaml.load(t, Loader=yaml.CSafeLoader)
        found["PyYAML CSafeLoader, YAML 1.2 core resolvers"] = lambda t: yaml.load(t, Loader=_yaml12_loader())
    except ImportError:
        found["PyYAML"] = "not installed"
    try:
        from ruamel.yaml import YAML

        pure, c = YAML(typ="safe", pure=True), YAML(typ="safe")
        found["ruamel.yaml safe, pure Python (YAML 1.2)"] = pure.load
        found["ruamel.yaml safe, C loader"] = c.load
    except ImportError:
        found["ruamel.yaml"] = "not installed"
    try:
        import ryaml

        found["ryaml 0.5 (Rust) (chosen: verify.read_yaml)"] = ryaml.loads
    except ImportError:
        found["ryaml 0.5 (Rust)"] = "not installed"
    try:
        import fast_yaml

        found["fastyaml-rs 0.7 safe_load (Rust)"] = fast_yaml.safe_load
    except ImportError:
        found["fastyaml-rs 0.7 safe_load (Rust)"] = "not installed"
    try:
        import libfyaml

        found["libfyaml 1.0.0b2 (C), to_python()"] = lambda t: libfyaml.loads(t).to_python()
    except ImportError:
        found["libfyaml 1.0.0b2 (C)"] = "not installed"
    # rapidyaml (C++) is not listed: its Python API gives a node tree, not Python objects; a hand-written walk
    # over it in Python costs what PyYAML's constructor costs.
    return found


def correctness(parse: Callable[[str], Any]) -> list[str]:
    from generator.render.templates import key, yaml_scalar

    failures = []
    for value in TRICKY:
        try:
            got = parse(f"v: {yaml_scalar(value)}\n")["v"]
        except Exception as exc:  # noqa: BLE001 - a parser error is a failure to record
            got = f"<error {type(exc).__name__}>"
        want = value.replace("$", "$$")  # the renderer doubles `$` on purpose: Compose interpolates `$`
        if got != want or type(got) is not str:
            failures.append(f"value {value!r} -> {got!r}")
    for name in KEYS:
        try:
            got_keys = list(parse(f"{yaml_scalar(key(name))}: x\n"))  # as the template's finalize does
        except Exception as exc:  # noqa: BLE001
            got_keys = [f"<error {type(exc).__name__}>"]
        if got_keys != [name] or type(got_keys[0]) is not str:
            failures.append(f"key {name!r} -> {got_keys!r}")
    for plain, want in PLAIN.items():
        try:
            got = parse(f"v: {plain}\n")["v"]
        except Exception as exc:  # noqa: BLE001
            got = f"<error {type(exc).__name__}>"
        if got != want or type(got) is not type(want):
            failures.append(f"plain {plain} -> {got!r}")
    try:  # yaml.v3 refuses a repeated key ("mapping key already defined"); keeping the last hides a renderer bug
        parse("a: 1\na: 2\n")
        failures.append("duplicate key accepted")
    except Exception:  # noqa: BLE001 - any parse error is the right answer
        pass
    return failures


def generated_files(tmp: Path) -> list[str]:
    from click.testing import CliRunner

    from generator.cli import main

    seed = ROOT / "recipes" / "deepseek-v4-flash-eugr" / "recipe.toml"
    tree = make_tree(tmp / "t100", 100, seed)
    import os

    cwd = os.getcwd()
    os.chdir(tree)
    try:
        result = CliRunner().invoke(main, ["build", "--out", str(tree / "out")])
    finally:
        os.chdir(cwd)
    if result.exit_code != 0:
        sys.exit(f"build failed: {result.output}")
    return [p.read_text("utf-8") for p in sorted((tree / "out").rglob("*.yaml"))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        texts = generated_files(Path(tmp))
    print(f"{len(texts)} generated files (100 recipes x 8 nodes), {sum(map(len, texts)) // len(texts)} bytes each; "
          f"{len(TRICKY)} values, {len(KEYS)} keys; median of {runs} runs\n")
    print(f"| {'candidate':<62} | correctness failures | ms per file |")
    print(f"|{'-' * 64}|----------------------|-------------|")
    for name, parse in candidates().items():
        if isinstance(parse, str):
            print(f"| {name:<62} | {parse:<20} |             |")
            continue
        failures = correctness(parse)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            for text in texts:
                parse(text)
            times.append((time.perf_counter() - start) * 1000 / len(texts))
        shown = f"{len(failures)}" + (f" ({'; '.join(failures[:3])})" if failures else "")
        print(f"| {name:<62} | {shown:<20} | {statistics.median(times):11.3f} |")


if __name__ == "__main__":
    main()
