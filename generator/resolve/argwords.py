"""`args` as the launcher understood them: joined with spaces, split into words as a POSIX shell does,
then grouped into flags so a child recipe can replace or remove a parent's flag.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from dataclasses import dataclass

from generator.diagnostics import RecipegenError
from generator.read import shellwords
from generator.read.tomldoc import TomlDocument
from generator.resolve.model import Arg, FlagGroup, Origin  # FlagGroup: argwords.FlagGroup for callers

_NUMBER = re.compile(r"^-\d+(\.\d+)?([eE][-+]?\d+)?$")


def split_words(doc: TomlDocument, items: list[str], layer: str, key: str = "args") -> tuple[Arg, ...]:
    """Split `items` exactly as the launcher did (join with spaces, split as POSIX sh: generator.read.shellwords),
    keeping for each word the element it starts in, and what sh would have done to it beyond removing quotes.

    A quote may span elements (`"'my", "model'"` is the one word `my model`): the word's element is the one
    its first character is in. An unterminated quote is an error at the element where it opens.
    """
    starts, offset = [], 0  # where each element begins in the joined text
    for item in items:
        starts.append(offset)
        offset += len(item) + 1
    text = " ".join(items)
    try:
        words = shellwords.split(text)
    except shellwords.ShellSyntaxError as exc:
        i = bisect_right(starts, exc.offset) - 1
        opened = items[i][exc.offset - starts[i]:][:24].split("\n", 1)[0]  # where it opens, within its element
        raise RecipegenError(doc.diagnostic((key, i), f"cannot split into shell words: {exc} (sh would "
                                                      f"refuse the command): {opened}")) from None
    origins: dict[int, Origin] = {}

    def origin(i: int) -> Origin:  # one Origin per element, shared by its words
        if i not in origins:
            origins[i] = doc.origin(layer, (key, i), value=True)
        return origins[i]

    # the space after an element ending in an odd run of backslashes is escaped: it glues the next element on
    escaped = {starts[i + 1] - 1: item for i, item in enumerate(items[:-1])
               if (len(item) - len(item.rstrip("\\"))) % 2}

    def glued(w: shellwords.Word) -> str | None:
        return next((item for at, item in escaped.items() if w.start <= at < w.end), None)

    return tuple(Arg(w.text, origin(bisect_right(starts, w.start) - 1), w.shell, glued(w)) for w in words)


def flag_name(word: str) -> str | None:
    """`--max-num-seqs=6` and `--max_num_seqs 6` are the same flag: `--max-num-seqs`. None for a value."""
    if not word.startswith("-") or word == "-" or word == "--" or _NUMBER.match(word):
        return None
    name = word.split("=", 1)[0]
    if name.startswith("--"):
        return "--" + name[2:].replace("_", "-")
    return name


def group_flags(args: tuple[Arg, ...]) -> list[FlagGroup]:
    groups: list[FlagGroup] = []
    current: list[Arg] = []
    current_flag: str | None = None
    for arg in args:
        name = flag_name(arg.word)
        if name is not None:
            if current:
                groups.append(FlagGroup(current_flag, tuple(current)))
            current, current_flag = [arg], name
        else:
            current.append(arg)
    if current:
        groups.append(FlagGroup(current_flag, tuple(current)))
    return groups


def merge_args(parent: tuple[Arg, ...], child: tuple[Arg, ...], remove: set[str]) -> tuple[Arg, ...]:
    """The child's flag replaces the parent's same flag where the parent had it; new flags follow."""
    remove = {flag_name(f) or f for f in remove}
    child_groups = group_flags(child)
    replacing: dict[str, list[FlagGroup]] = {}
    for g in child_groups:
        if g.flag:
            replacing.setdefault(g.flag, []).append(g)  # a repeated child flag replaces as a whole
    merged: list[FlagGroup] = []
    placed: set[str] = set()
    for group in group_flags(parent):
        if group.flag in remove:
            continue
        if group.flag in replacing:
            if group.flag not in placed:
                merged.extend(replacing[group.flag])
                placed.add(group.flag)
            continue
        merged.append(group)
    merged.extend(g for g in child_groups if g.flag is None or g.flag not in placed)
    return tuple(arg for group in merged for arg in group.args)


def json_problem(value: str) -> str | None:
    """A value that looks like JSON (starts with { or [) must parse: vLLM would refuse it at boot."""
    if not value.lstrip().startswith(("{", "[")):
        return None
    try:
        json.loads(value)
    except json.JSONDecodeError as exc:
        return f"{exc.msg} at character {exc.pos + 1}"
    return None
