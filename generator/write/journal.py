"""The journal of a build's swap (`out/.recipegen-journal.json`, written atomically before the first rename): a
build killed half-way leaves out/ recoverable, and the next `build` finishes the swap (`recover`); `build --check`
names what an interrupted build left.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from generator.diagnostics import Diagnostic, Severity, display_path
from generator.write.compare import fail

JOURNAL = ".recipegen-journal.json"
STAGING_PREFIX = ".recipegen-staging-"
TRASH_PREFIX = ".recipegen-old-"


def leftovers(out_dir: Path) -> list[Path]:
    """What an interrupted build left in out/: its journal, staging and trash folders."""
    if not out_dir.is_dir():
        return []
    return sorted(p for p in out_dir.iterdir()
                  if p.name == JOURNAL or p.name.startswith((STAGING_PREFIX, TRASH_PREFIX, JOURNAL + ".")))


def leftover_problems(out_dir: Path) -> list[Diagnostic]:
    """For `build --check`: an interrupted build is a difference of its own, named."""
    found = leftovers(out_dir)
    if not found:
        return []
    if (out_dir / JOURNAL).is_file():
        message = "an interrupted build left out/ half-swapped; `recipegen build` finishes it"
        return [Diagnostic(display_path(out_dir / JOURNAL), None, None, None, message)]
    return [Diagnostic(display_path(p), None, None, None,
                       "left over by an interrupted build; `recipegen build` removes it") for p in found]


def write_journal(out_dir: Path, record: dict[str, Any]) -> None:
    tmp = out_dir / (JOURNAL + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())  # the journal is the one file that must be whole after a power cut
    os.replace(tmp, out_dir / JOURNAL)


def recover(out_dir: Path) -> list[Diagnostic]:
    """Finish (or, when the staged files are gone, roll back) a commit a kill interrupted, then remove what it
    left; returns one warning line per thing done, so the user is told."""
    said: list[Diagnostic] = []
    journal = out_dir / JOURNAL
    journalled = journal.is_file()
    if journalled:
        try:
            record = json.loads(journal.read_text("utf-8"))
            staging, trash = out_dir / record["staging"], out_dir / record["trash"]
            names, new = list(record["names"]), set(record["new"])
            # The journal is a file in out/: it may only move plain names inside out/.
            if not all(isinstance(n, str) and n not in ("", ".", "..") and Path(n).name == n
                       for n in (record["staging"] or "x", record["trash"], *names, *new)):
                raise ValueError("a name in it is not a plain folder name")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise fail(journal, f"cannot read the journal of an interrupted build ({exc}); check out/ by hand, "
                                 "then delete it") from None
        finished, rolled_back = [], []
        for name in names:
            if name in new and not (staging / name).exists() and not (out_dir / name).exists():
                if (trash / name).exists():  # the staged copy is gone: put the previous one back
                    os.replace(trash / name, out_dir / name)
                rolled_back.append(name)
                continue
            if name in new and (staging / name).exists():
                if (out_dir / name).exists():
                    trash.mkdir(exist_ok=True)
                    os.replace(out_dir / name, trash / name)
                os.replace(staging / name, out_dir / name)
            elif name not in new and (out_dir / name).exists():
                trash.mkdir(exist_ok=True)
                os.replace(out_dir / name, trash / name)
            finished.append(name)
        if finished:
            said.append(Diagnostic(display_path(out_dir), None, None, None,
                                   "finished the swap an interrupted build left half-done: "
                                   + ", ".join(finished), Severity.WARNING))
        if rolled_back:
            said.append(Diagnostic(display_path(out_dir), None, None, None,
                                   "rolled back (staged files missing) the interrupted swap of: "
                                   + ", ".join(rolled_back), Severity.WARNING))
    for path in leftovers(out_dir):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        if not journalled and not path.name.startswith(JOURNAL):  # after a recovery, its folders go quietly
            said.append(Diagnostic(display_path(path), None, None, None,
                                   "removed what an interrupted build left", Severity.WARNING))
    return said
