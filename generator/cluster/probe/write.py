"""Writing the proposed cluster file without ever replacing one by accident."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_atomic(path: Path, text: str, force: bool) -> None:
    """Write through a temporary file in the same folder; never replace an existing file unless force."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    tmp.write_text(text, "utf-8")
    try:
        if force:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if the path exists: no window where another file is overwritten
    except FileExistsError:
        raise FileExistsError(f"{path} exists; pass --force to replace it") from None
    finally:
        if tmp.exists():
            tmp.unlink()
