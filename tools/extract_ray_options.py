#!/usr/bin/env python3
"""Extract the options `ray start` accepts from a Ray wheel, into generator/data/ray_options.json (read by
`recipegen validate` and by the compiler, which gives the head-only options to the Ray head only).

Regenerate (needs PyPI for --download; reads the wheel's sources, imports nothing of Ray):

    python3 tools/extract_ray_options.py --download /tmp/ray-wheels --version 2.60.0

or, with a wheel at hand: `python3 tools/extract_ray_options.py path/to/ray-2.60.0-...whl`.

How an option is found (static `ast` reading of what click builds at run time):
- `start` in ray/scripts/scripts.py is a click command; each `@click.option(...)` decorator gives its spellings
  (the string arguments starting with `-`) and whether it takes a value: `is_flag=True` and `count=True` take
  none, everything else takes exactly one (`--x v` or `--x=v`). `type=int|float|bool|click.Choice([...])` is
  recorded; `type=json.loads`, or a help text saying JSON, marks a JSON value. `@add_click_logging_options` adds
  the `CLICK_LOGGING_OPTIONS` list of ray/autoscaler/_private/cli_logger.py, read the same way.
- The head-only options are the keys of the `head_only_flags` dict in `start`'s body: a worker's `ray start`
  aborts on them ("`--port` should only be specified when starting head node with `--head`.").
- `start` takes no positional argument: click refuses a stray word ("Got unexpected extra argument").
Click takes no abbreviations and no `_` for `-`: only the exact spellings are recorded.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "generator" / "data" / "ray_options.json"
SCRIPTS = "ray/scripts/scripts.py"
CLI_LOGGER = "ray/autoscaler/_private/cli_logger.py"
# Why this release: vLLM's requirements/cuda.txt asks `ray[cgraph]>=2.48.0` (a lower bound only), so the vLLM
# images people run (vllm/vllm-openai, eugr's spark-vllm-docker builds) install the newest Ray of their build date.
WHY = ("the newest Ray on PyPI when this file was made: vLLM asks only ray[cgraph]>=2.48.0, so its images ship the "
       "newest release of their build date")


def _read(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as zf:
        return {name: zf.read(name).decode("utf-8") for name in (SCRIPTS, CLI_LOGGER)}


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise SystemExit(f"no function {name} in {SCRIPTS}")


def _is_click_option(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "option"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "click")


def _option(call: ast.Call) -> tuple[list[str], dict[str, Any]]:
    """The spellings of one click.option call and what its value is."""
    names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
             and a.value.startswith("-")]
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    help_text = " ".join(n.value for n in ast.walk(kw["help"]) if isinstance(n, ast.Constant)
                         and isinstance(n.value, str)) if "help" in kw else ""

    def true(key: str) -> bool:
        return isinstance(kw.get(key), ast.Constant) and kw[key].value is True  # type: ignore[attr-defined]

    spec: dict[str, Any]
    if true("is_flag") or true("count"):
        spec = {"value": None}
    else:
        kind = kw.get("type")
        text = ast.unparse(kind) if kind is not None else "str"
        if text in ("int", "float", "bool"):
            spec = {"value": text}
        elif text == "json.loads" or re.search(r"\bJSON\b", help_text):
            spec = {"value": "json"}
        elif isinstance(kind, ast.Call) and ast.unparse(kind.func) == "click.Choice":
            choices = kind.args[0]
            if isinstance(choices, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) for e in choices.elts):
                spec = {"value": "choice", "choices": [e.value for e in choices.elts]}  # type: ignore[attr-defined]
            else:
                spec = {"value": "str"}  # choices computed at run time (VALID_LOG_STYLES): not guessed
        else:
            spec = {"value": "str"}
    if true("hidden"):
        spec["hidden"] = True
    return names, spec


def _head_only(start: ast.FunctionDef) -> list[str]:
    for node in ast.walk(start):
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "head_only_flags"
                                                 for t in node.targets) and isinstance(node.value, ast.Dict)):
            return sorted(k.value for k in node.value.keys if isinstance(k, ast.Constant))
    raise SystemExit(f"no head_only_flags in `start` of {SCRIPTS}")


def extract(files: dict[str, str]) -> dict[str, Any]:
    start = _function(ast.parse(files[SCRIPTS]), "start")
    calls: list[ast.Call] = []
    for deco in start.decorator_list:
        if _is_click_option(deco):
            calls.append(deco)  # type: ignore[arg-type]
        elif isinstance(deco, ast.Name) and deco.id == "add_click_logging_options":
            for node in ast.parse(files[CLI_LOGGER]).body:
                if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "CLICK_LOGGING_OPTIONS":
                    calls += [c for c in node.value.elts if _is_click_option(c)]  # type: ignore[attr-defined]
    options: dict[str, Any] = {}
    aliases: dict[str, str] = {}
    for call in calls:
        names, spec = _option(call)
        long = next((n for n in names if n.startswith("--")), names[0])
        options[long] = spec
        aliases.update({n: long for n in names if n != long})
    return {"options": dict(sorted(options.items())), "aliases": dict(sorted(aliases.items())),
            "head_only": _head_only(start)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel", nargs="?", type=Path, help="a ray wheel (.whl)")
    parser.add_argument("--download", type=Path, metavar="DIR", help="pip download the wheel into DIR first")
    parser.add_argument("--version", help="the Ray release to download")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    wheel = args.wheel
    if args.download:
        if not args.version:
            parser.error("--download needs --version")
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--platform", "manylinux2014_x86_64", "--python-version", "3.11", "--implementation", "cp",
                        "-d", str(args.download), f"ray=={args.version}"], check=True)
        wheel = next(args.download.glob(f"ray-{args.version}-*.whl"))
    if wheel is None:
        parser.error("give a wheel, or --download DIR --version V")
    version = wheel.name.split("-")[1]
    data = {"format": 1, "regenerate": f"python3 tools/extract_ray_options.py --download /tmp/ray-wheels "
                                       f"--version {version}",
            "ray": version, "why": WHY, **extract(_read(wheel))}
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{args.out}: ray {version}, {len(data['options'])} options, head-only {', '.join(data['head_only'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
