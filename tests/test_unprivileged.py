"""The unprivileged child of the permission cases (tests/helpers/unprivileged.py) can run recipegen wherever the checkout
and its venv lie: "Set up" puts the venv inside the clone, and a clone under a 0700 folder (/root, `mktemp -d`) is
closed to that user, so the child must need nothing from there."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from helpers.unprivileged import dependency_site, drop_root, interpreter, reachable, run_python

# What `python3 -m generator` imports at its first use (pyproject.toml's dependencies, by module name).
MODULES = ("click", "jinja2", "ryaml", "jsonschema", "jsonschema_rs", "check_jsonschema", "tree_sitter",
           "tree_sitter_toml", "rich", "yaml")


def test_the_child_imports_every_dependency_from_a_folder_it_can_reach() -> None:
    as_user = drop_root("test_the_child_imports_every_dependency_from_a_folder_it_can_reach")
    base = Path(tempfile.mkdtemp(prefix="recipegen-child-"))
    try:
        base.chmod(0o755)
        run = run_python(["-c", f"import {', '.join(MODULES)}; import sys; print(sys.path)"], as_user, base)
        assert run.returncode == 0, run.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_nothing_the_child_runs_lies_in_a_closed_folder(tmp_path: Path) -> None:
    """The interpreter and the copied packages are open to every user; a 0700 folder above a file is caught."""
    assert reachable(interpreter())
    site = dependency_site()
    assert reachable(site) and (site / "click" / "__init__.py").is_file()
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    (closed / "python").write_text("")
    (closed / "python").chmod(0o755)
    closed.chmod(0o700)
    assert not reachable(closed / "python")
