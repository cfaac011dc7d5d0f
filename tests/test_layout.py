"""The tests' own layout (issue 41): what test modules share lives in tests/helpers/, and no module imports from a
test module, so a test file can be renamed, split or deleted without breaking another."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def test_no_module_imports_a_test_module() -> None:
    files = [*TESTS.glob("*.py"), *(TESTS / "helpers").glob("*.py"), *(TESTS / "fixtures").rglob("*.py"),
             *(TESTS.parent / "benchmarks").glob("*.py")]
    offenders = {f"{path.relative_to(TESTS.parent)}: {module}" for path in files
                 for module in _imported_modules(path) if module.split(".")[0].startswith("test_")}
    assert not offenders, sorted(offenders)


def test_the_shared_helpers_are_a_package() -> None:
    assert (TESTS / "helpers" / "__init__.py").is_file()
    assert {"watchwords.py", "routerkit.py", "unprivileged.py"} <= {p.name for p in (TESTS / "helpers").iterdir()}
    assert not [p.name for p in TESTS.glob("*.py") if not p.name.startswith(("test_", "conftest"))]
