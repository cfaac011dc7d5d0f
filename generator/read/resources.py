"""Find the data files shipped with recipegen: templates/ and schema/.

They live at the repository root (the contract's layout); a wheel carries them inside the package as
generator/_templates and generator/_schema (pyproject's package-dir). A checkout or an editable install
reads the root folders directly, so an edited template or schema takes effect at once.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # generator/, above this read/ stage


@cache
def data_dir(name: str) -> Path:
    for candidate in (_PACKAGE.parent / name, _PACKAGE / f"_{name}"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"recipegen's {name}/ folder is missing from the installation")


def read_data(name: str, filename: str) -> str:
    return (data_dir(name) / filename).read_text("utf-8")
