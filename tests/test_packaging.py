"""A real (non-editable) install carries every package, template and schema: pyproject lists packages by hand."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "generator").rglob("__init__.py")}
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
    # the data folders at the root ship inside the package, with every file recipegen reads from them
    assert config["package-dir"]["generator._templates"] == "templates"
    assert config["package-dir"]["generator._schema"] == "schema"
    data = config["package-data"]
    assert all(any(p.match(pattern) for pattern in data["generator._templates"])
               for p in (ROOT / "templates").iterdir())
    assert all(any(p.match(pattern) for pattern in data["generator._schema"]) for p in (ROOT / "schema").iterdir())
    assert all(any(p.relative_to(ROOT / "generator").match(pattern) for pattern in data["generator"])
               for p in (ROOT / "generator" / "data").iterdir())
