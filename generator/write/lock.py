"""One writer at a time per project folder: an exclusive `flock` on the folder that holds what is written (the
project root for recipes/ and cluster.toml, out/'s parent for out/), held from the last check to the swap. A
second `import`, `build` or `cluster probe --write` started meanwhile waits, then checks again and finds what
the first one wrote. The lock lives on the open folder, not in a file, so nothing is left behind after a kill
(the kernel lets go of it with the process)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def held(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor lets go of the lock
