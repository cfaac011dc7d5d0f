#!/usr/bin/env python3
"""Where a build's time goes: a tree of 100 recipes x 8 nodes (benchmarks/treegen.py, as benchmarks/run.py
builds it) compiled in this one process, each stage timed, then the functions with the most own time under
cProfile. Run from anywhere:

    python3 benchmarks/build_profile.py [--recipes 100] [--top 15]

The stages are timed by wrapping the names generator.build calls (load_recipe, lint_recipe, plan_recipe,
render_node, render_stack, verify_compose), so the script reads any version of recipegen that has them.
One process, no pool: the figures are CPU time per stage, which `build` spreads over the cores.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import pstats
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from treegen import make_tree  # noqa: E402

STAGES = {"load_recipe": "load", "lint_recipe": "lint", "plan_recipe": "plan", "render_node": "render",
          "render_stack": "render", "verify_compose": "verify"}


def timed(spent: dict[str, float], stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[stage] += time.perf_counter() - start
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", type=int, default=100)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()

    started = time.perf_counter()
    import generator.build as build  # what a `recipegen build` process imports before it compiles
    imported = time.perf_counter() - started
    spent: dict[str, float] = defaultdict(float)
    for name, stage in STAGES.items():
        setattr(build, name, timed(spent, stage, getattr(build, name)))

    seed = HERE.parent / "recipes" / "deepseek-v4-flash-eugr" / "recipe.toml"
    with tempfile.TemporaryDirectory(prefix=".profile-", dir=HERE.parent) as tmp:
        tree = make_tree(Path(tmp) / "tree", args.recipes, seed)
        cluster, _ = build.load_checked_cluster(tree / "cluster.toml")
        recipes = sorted((tree / "recipes").glob("*/recipe.toml"))
        start = time.perf_counter()
        for path in recipes:
            build.compile_one(path, cluster, tree, tree / "out")
        total = time.perf_counter() - start
        print(f"import generator.build: {imported * 1000:.0f} ms")
        print(f"compile {len(recipes)} recipes x 8 nodes in one process: {total:.3f} s "
              f"({total / len(recipes) * 1000:.1f} ms per recipe)")
        for stage in dict.fromkeys(STAGES.values()):
            print(f"  {stage:<8} {spent[stage]:.3f} s  {spent[stage] / total * 100:4.0f} %")
        print(f"  other    {total - sum(spent.values()):.3f} s")

        profile = cProfile.Profile()
        profile.enable()
        for path in recipes:
            build.compile_one(path, cluster, tree, tree / "out")
        profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(args.top)
    print(f"\nmost own time under cProfile (its overhead inflates small calls), top {args.top}:")
    lines = text.getvalue().splitlines()
    start_at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls"))
    for line in lines[start_at:start_at + args.top + 1]:
        print("  " + re.sub(r"/\S*/(site-packages|python3\.\d+)/", "", line.replace(str(HERE.parent) + "/", "")))


if __name__ == "__main__":
    main()
