"""One-off, re-runnable: move what test modules import from other test modules into tests/helpers/ (issue 41).

For each (test module, helper module, names) below, the named top-level definitions, and the module-level
definitions they use (transitively), are cut from the test module and written to tests/helpers/<helper>.py with
the test module's imports; the test module imports them back; every `from test_x import ...` in tests/ and
benchmarks/ becomes `from helpers.<helper> import ...`. Run from the repository root after
`git mv tests/{watchwords,routerkit,unprivileged}.py tests/helpers/`; it stops on a name it cannot place.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

TESTS = Path("tests")
MOVES: list[tuple[str, str, list[str]]] = [
    ("test_golden", "golden", ["GOLDEN", "REPO", "recipegen", "snapshot", "write_project", "compose_binary",
                               "compose_env"]),
    ("test_corpus", "corpus", ["Expect", "assert_expected", "run_inprocess"]),
    ("test_lint", "lint", ["CLUSTER", "ROOT", "findings", "run", "tmp_recipe", "validate"]),
    ("test_deploy_lab", "deploylab", ["MODEL", "SERVED", "IMAGE", "containers", "models", "project", "put_model",
                                      "run", "vllm_recipe", "sglang_recipe"]),
    ("test_lab_smoke", "labsmoke", ["run_detached", "wait_http", "wait_log"]),
    ("test_lab_engine", "labengine", ["IFNAMES", "worker_env"]),
    ("test_ray_lab", "raylab", ["HEAD_ONLY", "ray_project"]),
    ("test_serve_lab", "serve", ["needs_llama_benchy", "word_level_tokenizer"]),
    ("test_actions", "actions", ["deployment", "FakeBackend", "up"]),
    ("test_probe", "probe", ["spark", "write"]),
    ("test_launch", "launch", ["CLUSTER", "build"]),
    ("test_router", "routerproject", ["CLUSTER", "recipe", "serving"]),
    ("test_cli_safety", "clisafety", ["interruptible"]),
    ("test_hostile_values", "hostile", ["ACCEPTED", "cluster_text", "recipe_text"]),
]
SHARED = {"watchwords", "routerkit", "unprivileged"}  # moved whole with git mv


def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _start(lines: list[str], node: ast.stmt) -> int:
    """First line (0-based) of a definition: its decorators and the comment lines right above it."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    while first > 0 and lines[first - 1].startswith("#") and not lines[first - 1].startswith("# ---"):
        first -= 1
    return first


def move(source: str, helper: str, names: list[str]) -> list[str]:
    path = TESTS / f"{source}.py"
    text = path.read_text("utf-8")
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    top = {name: node for node in tree.body for name in _defined(node)}
    imported = {(a.asname or a.name).split(".")[0] for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    passed_on = [n for n in names if n not in top and n in imported]  # the helper imports it as the module did
    names = [n for n in names if n not in passed_on]
    missing = [n for n in names if n not in top]
    if missing:
        sys.exit(f"{path}: no top-level {missing}")
    chosen: list[ast.stmt] = []
    todo = list(names)
    while todo:  # the names asked for and the module-level definitions they use
        node = top[todo.pop()]
        if node in chosen:
            continue
        chosen.append(node)
        todo += [n for n in _used(node) if n in top and top[n] not in chosen]
    chosen.sort(key=lambda n: n.lineno)
    moved = sorted({name for node in chosen for name in _defined(node)})
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    used = set().union(*(_used(n) for n in chosen)) | {
        a.value.id for n in chosen for a in ast.walk(n) if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name)
    } | set(passed_on)
    header = "".join("".join(lines[n.lineno - 1:n.end_lineno]) for n in imports  # those the moved code uses
                     if not (isinstance(n, ast.ImportFrom) and n.module == "__future__")
                     and any((a.asname or a.name).split(".")[0] in used for a in n.names))
    body = "\n\n".join("".join(lines[_start(lines, n):n.end_lineno]).rstrip() + "\n" for n in chosen)
    body = re.sub(r"Path\(__file__\)(\.resolve\(\))?\.parent", "TESTS", body)
    if "from pathlib import Path" not in header:
        header += "from pathlib import Path\n"
    out = TESTS / "helpers" / f"{helper}.py"
    out.write_text(f'"""Shared by the tests: moved from tests/{source}.py, which uses them too."""\n\n'
                   f"from __future__ import annotations\n\n{header}\nTESTS = Path(__file__).resolve().parent.parent\n"
                   f"\n\n{body}", "utf-8")
    keep = [True] * len(lines)
    for node in chosen:
        for i in range(_start(lines, node), node.end_lineno):
            keep[i] = False
    last_import = max(n.end_lineno for n in imports)
    back = f"from helpers.{helper} import {', '.join(moved)}  # noqa: F401 - moved to tests/helpers/\n"
    kept = [line for i, line in enumerate(lines[:last_import]) if keep[i]] + [back] + \
        [line for i, line in enumerate(lines[last_import:], last_import) if keep[i]]
    path.write_text(re.sub(r"\n{4,}", "\n\n\n", "".join(kept)), "utf-8")
    return moved + passed_on


def rewrite_imports(where: dict[str, tuple[str, list[str]]]) -> None:
    files = (sorted(TESTS.glob("*.py")) + sorted((TESTS / "helpers").glob("*.py")) + sorted(Path("benchmarks").glob("*.py"))
             + [TESTS / "fixtures" / "docker" / "capture.py"])
    for path in files:
        text = path.read_text("utf-8")

        def swap(m: re.Match[str]) -> str:
            module = m[2]
            if module in SHARED:
                return f"{m[1]}from helpers.{module} import"
            helper, moved = where[module]
            names = re.findall(r"\w+", m[3].split("#")[0].replace("import", ""))
            stray = [n for n in names if n not in moved]
            if stray:
                sys.exit(f"{path}: imports {stray} from {module}, which were not moved")
            return f"{m[1]}from helpers.{helper} import"

        new = re.sub(r"^(\s*)from (" + "|".join(sorted(SHARED | set(where))) + r") import((?:[^\n(]*\n)|(?:\s*\([^)]*\)))",
                     lambda m: swap(m) + m[3], text, flags=re.M)
        if new != text:
            path.write_text(new, "utf-8")


def main() -> None:
    (TESTS / "helpers").mkdir(exist_ok=True)
    init = TESTS / "helpers" / "__init__.py"
    if not init.exists():
        init.write_text('"""What several test modules share: no test module imports from another (issue 41)."""\n')
    where = {source: (helper, move(source, helper, names)) for source, helper, names in MOVES}
    rewrite_imports(where)
    for source, (helper, moved) in where.items():
        print(f"tests/{source}.py -> tests/helpers/{helper}.py: {', '.join(moved)}")


if __name__ == "__main__":
    main()
