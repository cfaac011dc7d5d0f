"""`args` as the launcher understood them: joined with spaces, split into words as a POSIX shell does,
then grouped into flags so a child recipe can replace or remove a parent's flag.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from generator.diagnostics import RecipegenError
from generator.model import Arg, Origin
from generator.tomldoc import TomlDocument

_SHELL_QUOTES = ("'", '"', "\\")
_BLANKS = re.compile(r"[ \t\r\n]+")  # shlex's whitespace in POSIX mode (not str.split()'s unicode spaces)
_NUMBER = re.compile(r"^-\d+(\.\d+)?([eE][-+]?\d+)?$")


def split_words(doc: TomlDocument, items: list[str], layer: str, key: str = "args") -> tuple[Arg, ...]:
    """Shell-split `items` exactly as the launcher did (join with spaces, split as POSIX sh), keeping for each
    word the element it came from.

    When every element splits on its own, quotes are balanced inside each one, so splitting the joined string
    gives exactly the concatenation of the elements' words; only then is each word's element known for sure.
    """

    def origin(i: int) -> Origin:
        return doc.origin(layer, (key, i), value=True)

    words: list[Arg] = []
    for i, item in enumerate(map(join_continued_lines, items)):
        if not any(c in item for c in _SHELL_QUOTES):  # no quotes: splitting on blanks is the shell's split
            words.extend(Arg(word, origin(i)) for word in _BLANKS.split(item) if word)
        elif _splits(item):
            words.extend(Arg(word, origin(i)) for word in shlex.split(item))
        else:
            break
    else:
        return tuple(words)
    try:  # quotes spanning several elements: the words are right, their lines approximate (the first element)
        return tuple(Arg(word, origin(0)) for word in shlex.split(join_continued_lines(" ".join(items))))
    except ValueError as exc:
        bad = next((i for i, item in enumerate(items) if not _splits(item)), len(items) - 1)
        raise RecipegenError(doc.diagnostic((key, bad), f"cannot split into shell words: {exc}")) from None


def join_continued_lines(text: str) -> str:
    """Drop every backslash-newline outside single quotes, as sh does before it splits words: a serve command
    copied with its `\\` line continuations is one command (shlex alone would keep each newline as a word)."""
    if "\\\n" not in text:
        return text
    out: list[str] = []
    quote = ""  # the open quote character, if any
    i = 0
    while i < len(text):
        c = text[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif c == "\\" and i + 1 < len(text):
            if text[i + 1] != "\n":
                out.append(text[i:i + 2])
            i += 2
            continue
        elif c in "'\"" and (not quote or c == quote):
            quote = "" if quote else c
        out.append(c)
        i += 1
    return "".join(out)


def _splits(item: str) -> bool:
    try:
        shlex.split(item)
        return True
    except ValueError:
        return False


def flag_name(word: str) -> str | None:
    """`--max-num-seqs=6` and `--max_num_seqs 6` are the same flag: `--max-num-seqs`. None for a value."""
    if not word.startswith("-") or word == "-" or word == "--" or _NUMBER.match(word):
        return None
    name = word.split("=", 1)[0]
    if name.startswith("--"):
        return "--" + name[2:].replace("_", "-")
    return name


@dataclass(frozen=True)
class FlagGroup:
    """A flag and the values after it, or (flag None) words before the first flag."""

    flag: str | None
    args: tuple[Arg, ...]

    @property
    def values(self) -> list[str]:
        head = self.args[0].word if self.args else ""
        inline = [head.split("=", 1)[1]] if self.flag and "=" in head else []
        return inline + [a.word for a in self.args[1:]]


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
