#!/usr/bin/env python3
"""The floor of a no-change `recipegen build` (issue 41): what no build can do without, in one Python process.

    python3 benchmarks/floor.py PROJECT [OUT]

Reads and hashes every input (every file under PROJECT/recipes, the cluster file, recipegen's templates/, schema/
and its package's code), and stats every entry of OUT (default PROJECT/out). benchmarks/run.py times this plus
`recipegen --help` (the CLI's own start-up), and prints the no-change build and `build --check` beside it.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "generator"


def hash_tree(top: Path, digest: "hashlib._Hash") -> None:
    if top.is_file():
        digest.update(top.read_bytes())
        return
    for folder, dirs, files in os.walk(top):
        dirs.sort()
        for name in sorted(files):
            with open(os.path.join(folder, name), "rb") as fh:
                digest.update(hashlib.sha256(fh.read()).digest())


def stat_tree(top: Path) -> int:
    count = 0
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            os.lstat(os.path.join(folder, name))
            count += 1
    return count


def main() -> None:
    project = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else project / "out"
    digest = hashlib.sha256()
    for top in (project / "recipes", project / "cluster.toml", PACKAGE.parent / "templates",
                PACKAGE.parent / "schema", PACKAGE):
        hash_tree(top, digest)
    stat_tree(out)


if __name__ == "__main__":
    main()
