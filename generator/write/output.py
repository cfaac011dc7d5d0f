"""Write generated files all-or-nothing: each changed recipe folder is staged inside out/, then swapped in whole.

Like copier, it refuses to write outside its destination: every path is `<recipe-id>/<node>/compose.yaml` or
`<recipe-id>/stack.yaml`, names checked by the schemas, and checked again here on their text.

A person's file in out/ is never lost: a file whose checksum (generator/write/compare.py) does not match (edited,
or copied and edited) or that has none (written by hand, or by a recipegen older than the checksum) stops the
build, named; `--force` discards it. Swapping folders in is journalled (generator/write/journal.py): a build killed
half-way leaves out/ recoverable, and the next `build` finishes the swap.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from generator.diagnostics import RecipegenError
from generator.write.compare import Difference, check_replaceable, differences, fail, removed
from generator.write.journal import JOURNAL, STAGING_PREFIX, TRASH_PREFIX, write_journal

# Test-only: after this many renames of a commit, say so on stderr and wait to be killed (tests/test_cli_safety.py
# kills a real `recipegen build` there to check the next run repairs out/). Unset in normal use.
PAUSE_ENV = "RECIPEGEN_TEST_PAUSE_COMMIT_AFTER"


def _inside(out_dir: Path, relative: str) -> None:
    """`relative` must name a file below out/: not absolute, no `.` or `..` part, nothing that normalises elsewhere.
    Checked on the text alone: files are written into a staging folder this build has just made, where no link
    can lead them elsewhere (resolving each path cost more than writing it)."""
    parts = relative.split("/")
    if not relative or relative.startswith("/") or any(p in ("", ".", "..") for p in parts) \
            or posixpath.normpath(relative) != relative:
        raise fail(out_dir, f"refusing to write outside it: {relative}")


def _pause_for_test(renames: int) -> None:
    if os.environ.get(PAUSE_ENV) == str(renames):
        sys.stderr.write("recipegen-test: paused in commit\n")
        sys.stderr.flush()
        time.sleep(60)


class Stager:
    """Stages each changed recipe folder inside out/ as soon as its files are known (while other recipes still
    compile), then swaps the folders in whole at `commit`; leaving the block without committing (an error in any
    recipe) removes everything staged, so out/ is never half-written. Unchanged folders are left untouched."""

    def __init__(self, out_dir: Path, force: bool = False):
        self.out_dir = out_dir
        self.force = force
        self.diffs: list[Difference] = []
        self._changed: list[str] = []
        self._staging: Path | None = None
        # Creating folders and files waits on the filesystem, not the CPU: a few threads overlap the waits.
        self._pool = ThreadPoolExecutor(max_workers=8)
        self._jobs: list[Future[None]] = []
        self._made_out_dir = False

    def __enter__(self) -> "Stager":
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True)
        if (self.out_dir / JOURNAL).exists():
            return  # a commit was cut short: its staged folders are what the next build finishes it with
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
        if self._made_out_dir and self.out_dir.is_dir() and not any(self.out_dir.iterdir()):
            self.out_dir.rmdir()  # a failed first build leaves no out/

    def offer(self, recipe_id: str, files: dict[str, str]) -> None:
        diffs = differences(self.out_dir, files, [recipe_id], prune=False)
        if not diffs:
            return
        check_replaceable(self.out_dir, recipe_id, self.force)
        self.diffs.extend(diffs)
        self._changed.append(recipe_id)
        if self._staging is None:
            try:
                self._made_out_dir = not self.out_dir.exists()
                self.out_dir.mkdir(parents=True, exist_ok=True)
                self._staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=self.out_dir))
            except OSError as exc:
                raise fail(self.out_dir, f"cannot write: {exc.strerror or exc}") from None
        self._jobs += [self._pool.submit(self._stage, path, text) for path, text in files.items()]

    def _stage(self, path: str, text: str) -> None:
        _inside(self.out_dir, path)
        assert self._staging is not None
        target = self._staging / path
        target.parent.mkdir(parents=True, exist_ok=True)
        # No fsync: out/ is derived and rebuilt at will; renames keep each reader's view whole.
        with open(target, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)

    def commit(self, recipe_ids: list[str], prune: bool, drop: tuple[str, ...] | list[str] = ()) -> list[Difference]:
        """Swap every staged folder in; with `prune`, remove generated folders of recipes that are gone, and
        always those in `drop` (side stacks the cluster no longer asks for).
        If a rename fails half-way (or Ctrl-C), every folder already swapped is put back as it was; if the process
        is killed, the journal lets the next build finish the swap."""
        stale = removed(self.out_dir, recipe_ids, prune, drop)
        problems = []
        for name in stale:
            try:
                check_replaceable(self.out_dir, name, self.force)
            except RecipegenError as exc:
                problems += exc.diagnostics
        if problems:
            raise RecipegenError(problems)
        self.diffs.extend(Difference(name + "/", "stale") for name in stale)
        if not self._changed and not stale:
            return self.diffs
        try:
            for job in self._jobs:
                job.result()
            trash = Path(tempfile.mkdtemp(prefix=TRASH_PREFIX, dir=self.out_dir))
            staging = self._staging.name if self._staging is not None else ""
            write_journal(self.out_dir, {"staging": staging, "trash": trash.name,
                                          "names": [*self._changed, *stale], "new": self._changed})
        except OSError as exc:
            raise fail(self.out_dir, f"cannot write: {exc.strerror or exc}") from None
        done: list[tuple[str, bool, bool]] = []  # (name, old one moved to trash, new one moved in)
        renames = 0
        try:
            for name in [*self._changed, *stale]:
                had_old = (self.out_dir / name).exists()
                if had_old:
                    os.replace(self.out_dir / name, trash / name)
                done.append((name, had_old, False))
                if had_old:
                    renames += 1
                    _pause_for_test(renames)
                if self._staging is not None and (self._staging / name).exists():
                    os.replace(self._staging / name, self.out_dir / name)
                    done[-1] = (name, had_old, True)
                    renames += 1
                    _pause_for_test(renames)
        except (OSError, KeyboardInterrupt) as exc:
            for name, had_old, placed in reversed(done):  # back to the previous generation, folder by folder
                if placed and self._staging is not None:
                    os.replace(self.out_dir / name, self._staging / name)
                if had_old:
                    os.replace(trash / name, self.out_dir / name)
            shutil.rmtree(trash, ignore_errors=True)
            (self.out_dir / JOURNAL).unlink()
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise fail(self.out_dir, f"cannot write: {exc.strerror or exc}; out/ is as it was") from None
        shutil.rmtree(trash, ignore_errors=True)
        (self.out_dir / JOURNAL).unlink()
        return self.diffs
