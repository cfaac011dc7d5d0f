"""Import every peer recipe file given, then validate and build each on a cluster of N nodes: one line per file
(OK, or the one-line reason it stops at), then the counts. The figures in docs/import.md come from it.

    python3 tools/import_census.py --nodes 4 [--mods-dir DIR ...] FILE...

Each file is imported into a fresh scratch project (a copy of schema/ and tests/peers/cluster.toml grown to N nodes),
with HOME pointing at an empty folder (so no sparkrun checkout on this machine plays a part) unless --home is given.
Not imported by the package; it runs `python3 -m generator` as a user would.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def scratch_project(nodes: int) -> Path:
    project = Path(tempfile.mkdtemp(prefix="recipegen-census-"))
    shutil.copytree(ROOT / "schema", project / "schema")
    text = (ROOT / "tests" / "peers" / "cluster.toml").read_text("utf-8").replace("../../schema", "./schema")
    for i in range(3, nodes + 1):
        text += (f'\n[[nodes]]\nname = "spark{i}"\naddress = "192.168.100.{9 + i}"\ncontext = "spark{i}"\n'
                 f'ssh_host = "spark{i}.local"\n')
    (project / "cluster.toml").write_text(text, "utf-8")
    (project / "recipes").mkdir()
    return project


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--mods-dir", action="append", default=[])
    parser.add_argument("--home", type=Path, help="HOME for the imports (sparkrun's checkout under it)")
    args = parser.parse_args()
    project = scratch_project(args.nodes)
    env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(args.home or project / "home"))
    counts: Counter[str] = Counter()

    def recipegen(*words: str) -> tuple[int, str]:
        done = subprocess.run([sys.executable, "-m", "generator", *words], cwd=project, env=env,
                              capture_output=True, text=True)
        return done.returncode, (done.stderr.strip().splitlines() or [""])[-1]

    for n, path in enumerate(args.files):
        rid = f"r{n}"
        mods = [w for d in args.mods_dir for w in ("--mods-dir", d)]
        code, why = recipegen("import", "--id", rid, *mods, str(path.resolve()))
        outcome = "refused at import" if code else ""
        if not code:
            code, why = recipegen("validate", f"recipes/{rid}/recipe.toml")
            outcome = "VALIDATE REFUSES" if code else ""
        if not code:
            code, why = recipegen("build", rid)
            outcome = "BUILD REFUSES" if code else "OK"
        counts[outcome] += 1
        print(f"{outcome}\t{path}\t{why if code else ''}")
    shutil.rmtree(project, ignore_errors=True)
    print(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
