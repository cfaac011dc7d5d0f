"""`ray start`'s options, from generator/data/ray_options.json (tools/extract_ray_options.py reads them out of a Ray
wheel), and `ray_args` read the way `ray start` (a click command) reads them: each option takes exactly one value
(`--x v` or `--x=v`) or none, and the command takes no positional word.

The compiler uses it to give the head-only options to the Ray head alone; the `ray-*` lint rules to check
`ray_args` before a node refuses them at boot.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from generator.resolve.argwords import flag_name, group_flags
from generator.resolve.model import Arg


@dataclass(frozen=True)
class RayOption:
    name: str  # the long spelling
    value: str | None  # None: a switch; else int | float | bool | str | json | choice
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class RayWord:
    """One option of `ray_args` with its value word(s), or a word `ray start` would refuse on its own.

    `option` is None for an option this Ray release lacks (`name` set) and for a stray word (`name` None)."""

    args: tuple[Arg, ...]
    name: str | None
    option: RayOption | None
    value: str | None = None  # the value as Ray gets it (None: none given)
    missing_value: bool = False  # the option takes a value and has none (the next word is an option, or none)
    inline: bool = False  # `--x=v`


@cache
def _data() -> dict[str, Any]:
    text = resources.files("generator").joinpath("data/ray_options.json").read_text("utf-8")
    return json.loads(text)  # type: ignore[no-any-return]


def release() -> str:
    """The Ray release the option list was read from."""
    return str(_data()["ray"])


def option(word: str) -> RayOption | None:
    """The option a word (`--num-cpus=1`, `-v`) names, or None when this Ray release has none by that name."""
    name = word.split("=", 1)[0]
    data = _data()
    name = data["aliases"].get(name, name)
    spec = data["options"].get(name)
    if spec is None:
        return None
    return RayOption(name, spec["value"], tuple(spec.get("choices", ())))


def head_only() -> frozenset[str]:
    """Options a worker's `ray start` aborts on ("should only be specified when starting head node")."""
    return frozenset(_data()["head_only"])


def did_you_mean(word: str) -> str:
    name = word.split("=", 1)[0]
    close = difflib.get_close_matches(name, list(_data()["options"]), n=1, cutoff=0.7)
    return f"did you mean '{close[0]}'?" if close else "see `ray start --help`"


def _is_option(word: str) -> bool:
    return flag_name(word) is not None


def read(args: tuple[Arg, ...]) -> list[RayWord]:
    """`ray_args` split into options as click splits them. An unknown option keeps the words after it up to the
    next option (its arity is unknown); a value-taking option followed by another option is `missing_value`
    (click would swallow that option as the value)."""
    out: list[RayWord] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not _is_option(arg.word):
            out.append(RayWord((arg,), None, None))
            i += 1
            continue
        name, eq, inline = arg.word.partition("=")
        spec = option(arg.word)
        if spec is None:
            group = group_flags(args[i:])[0]
            out.append(RayWord(group.args, name, None))
            i += len(group.args)
            continue
        if spec.value is None or eq:
            out.append(RayWord((arg,), spec.name, spec, inline if eq else None, inline=bool(eq)))
            i += 1
            continue
        if i + 1 < len(args) and not _is_option(args[i + 1].word):
            out.append(RayWord((arg, args[i + 1]), spec.name, spec, args[i + 1].word))
            i += 2
            continue
        out.append(RayWord((arg,), spec.name, spec, None, missing_value=True))
        i += 1
    return out


def for_worker(args: tuple[Arg, ...]) -> tuple[Arg, ...]:
    """`ray_args` without the head-only options (each with its value, in either spelling): a worker's
    `ray start` aborts on them, the head takes them."""
    skip = head_only()
    return tuple(a for w in read(args) if w.name not in skip for a in w.args)
