"""A peer's rendered serve command, taken apart the way recipegen owns it.

The command is split as sh splits it (generator.read.shellwords, with each word's place in the text). The entrypoint,
the model and the flags the compiler writes (parallel sizes, backend, rank wiring: generator.engines.ranks.OWNED_FLAGS)
become recipe keys; their words are cut out of the text and everything else stays byte for byte, so `args` keeps
the peer's quoting and line continuations. The result is checked by splitting it again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from generator.engines.ranks import OWNED_FLAGS
from generator.read import shellwords
from generator.resolve.argwords import flag_name

# The serve commands recipegen knows, engine first (SGLang's module may be started by python or python3).
ENTRYPOINTS = (("vllm", ("vllm", "serve")), ("sglang", ("python3", "-m", "sglang.launch_server")),
               ("sglang", ("python", "-m", "sglang.launch_server")), ("sglang", ("sglang", "serve")))
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_TP = {"-tp", "--tensor-parallel-size", "--tp", "--tp-size"}
_PP = {"-pp", "--pipeline-parallel-size", "--pp", "--pp-size"}
_MODEL = {"--model", "--model-path"}
_BACKEND = "--distributed-executor-backend"


@dataclass(frozen=True)
class Command:
    engine: str
    entrypoint: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  # `NAME=value` words before the command: its environment
    model: str | None
    tensor_parallel: int | None
    pipeline_parallel: int | None
    backend: str | None
    wiring: tuple[str, ...]  # rank-wiring flags found and left to the compiler (--nnodes, --master-addr ...)
    args: str  # the rest of the text, byte for byte


def split_command(text: str, fail: Callable[[str], Exception], vllm_wrapper: bool = False) -> Command:
    """`vllm_wrapper`: the launcher runs vLLM whatever the command's program (eugr's adds vLLM's rank flags to any),
    so `<program> serve <model> ...` is vLLM behind a wrapper of the image (eugr's deepseek-v4-flash-fp8-aiden runs
    /usr/local/bin/dsv4-vllm-entrypoint, which sets up its venv and execs vllm): that program is the entrypoint."""
    text, words = _words(text, fail)
    env, i = _leading_env(words, fail)
    engine, entrypoint = _entrypoint([w.text for w in words], i, fail, vllm_wrapper)
    i += len(entrypoint)
    model = None
    if engine == "vllm" and i < len(words) and flag_name(words[i].text) is None:
        model = words[i].text
        i += 1
    owned = _owned(words[i:], OWNED_FLAGS[engine], fail)
    args = _rest(text, words[i - 1].end, owned, fail)
    model = model if owned.model is None else owned.model  # `--model` wins over the word after `serve`
    return Command(engine, entrypoint, tuple(env), model, owned.tp, owned.pp, owned.backend, tuple(owned.wiring), args)


def _words(text: str, fail: Callable[[str], Exception]) -> tuple[str, list[shellwords.Word]]:
    """The text without its comment, and its shell words; refused where bash would end the command early."""
    try:
        # The peers run the command as a bash script: its comments are not words (an author's note after the
        # last flag, with an apostrophe in it, is common); they are cut before anything else. A comment runs to a
        # newline no backslash can escape, which ends the command: a word after it would never reach the engine.
        text, comment = shellwords.without_comments(text)
        if comment is not None and text[comment:].replace("\\", " ").strip():
            line = text.count("\n", 0, comment) + 1
            raise fail(f"line {line} of the command holds a comment, and words follow it: bash ends the command at "
                       "that comment's line, so they would never reach the engine; move the comment after the last "
                       "line")
        words = shellwords.split(text)
    except shellwords.ShellSyntaxError as exc:
        raise fail(f"the command cannot be split into shell words: {exc}") from None
    for before, after in zip(words, words[1:]):  # between words: outside any quote, and no word's backslash
        end = _command_end(text, before.end, after.start)
        if end is not None:
            line = text.count("\n", 0, end) + 1
            raise fail(f"line {line} of the command ends without a `\\`, and words follow it: bash runs them as "
                       "another command, so they would never reach the engine; end the line with `\\` (or, for "
                       "a blank line after a `\\`, remove it)")
    return text, words


def _leading_env(words: list[shellwords.Word], fail: Callable[[str], Exception]) -> tuple[list[tuple[str, str]], int]:
    """The `NAME=value` words before the command (its environment), and where the command starts after them
    (and after an `exec`, which replaces sh by the program: argv runs it so)."""
    env: list[tuple[str, str]] = []
    i = 0
    while i < len(words) and _ASSIGNMENT.match(words[i].text):
        name, _, value = words[i].text.partition("=")
        if words[i].shell:  # `FOO=$(whoami)`: sh would run or expand it; the recipe's env holds no shell
            raise fail(f"'{words[i].text}' sets {name} before the serve command to what a shell works out (a $, "
                       "a backtick): recipegen runs no shell; give the value it stands for in env")
        env.append((name, value))
        i += 1
    if i < len(words) and words[i].text == "exec" and not words[i].shell:
        i += 1
    return env, i


def _entrypoint(texts: list[str], i: int, fail: Callable[[str], Exception],
                vllm_wrapper: bool) -> tuple[str, tuple[str, ...]]:
    found = next(((e, p) for e, p in ENTRYPOINTS if tuple(texts[i:i + len(p)]) == p), None)
    if found is None and vllm_wrapper and texts[i + 1:i + 2] == ["serve"] and flag_name(texts[i]) is None:
        found = ("vllm", (texts[i], "serve"))
    if found is None:
        raise fail(f"the command starts with {' '.join(texts[i:i + 3])!r}, not a serve command recipegen knows "
                   f"(`vllm serve`, `python3 -m sglang.launch_server`, `sglang serve`)")
    return found


@dataclass
class _Owned:
    """The compiler's flags found in the command: their values, and the spans of text they take."""

    cuts: list[tuple[int, int]] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # the words that stay, in order
    tp: int | None = None
    pp: int | None = None
    model: str | None = None
    backend: str | None = None
    wiring: list[str] = field(default_factory=list)


def _owned(words: list[shellwords.Word], owned: dict[str, str], fail: Callable[[str], Exception]) -> _Owned:
    found = _Owned()
    for group in _groups(words):
        flag = flag_name(group[0].text)
        if flag not in owned:
            found.kept.extend(w.text for w in group)
            continue
        found.cuts.append((group[0].start, group[-1].end))
        inline = group[0].text.split("=", 1)[1:] if "=" in group[0].text else []
        values = inline + [w.text for w in group[1:]]
        value = values[0] if values else ""
        if flag in _TP or flag in _PP:
            if not value.isdigit() or len(values) != 1:
                raise fail(f"{flag} {' '.join(values)!r} is not one whole number")
            found.tp, found.pp = (int(value), found.pp) if flag in _TP else (found.tp, int(value))
        elif flag in _MODEL:
            found.model = value
        elif flag == _BACKEND:
            found.backend = value
        else:
            found.wiring.append(str(flag))
    return found


def _rest(text: str, lead_end: int, owned: _Owned, fail: Callable[[str], Exception]) -> str:
    """The text after the model word without the compiler's flags: the tidy text when it splits into the same
    words (a blank line inside a quote would not), else the cut alone."""
    rest = text[lead_end:]
    for start, end in reversed(owned.cuts):
        rest = rest[:start - lead_end] + rest[end - lead_end:]
    args = next((a for a in (tidy(rest), rest) if [w.text for w in shellwords.split(a)] == owned.kept), None)
    if args is None:  # a cut that changed another word: never write that recipe
        raise fail("the command's flags could not be separated from the compiler's without changing a word")
    return args


def _command_end(text: str, start: int, stop: int) -> int | None:
    """Where a gap between two words (blanks and `\\<newline>` continuations only) holds a newline no backslash
    escapes: bash's command ends there. None: the gap continues the command."""
    i = start
    while i < stop:
        if text.startswith("\\\n", i):
            i += 2
        elif text[i] == "\n":
            return i
        else:
            i += 1
    return None


def _groups(words: list[shellwords.Word]) -> list[list[shellwords.Word]]:
    """A flag and the values after it (as tests/peers and argparse see them)."""
    groups: list[list[shellwords.Word]] = []
    for word in words:
        if flag_name(word.text) is not None or not groups:
            groups.append([word])
        else:
            groups[-1].append(word)
    return groups


def tidy(text: str, drop_lines: bool = True) -> str:
    """Without the lines the cuts left holding only a line continuation (as eugr's own filter drops them:
    `drop_lines`), and without a continuation left at the very end (sh would keep a lone backslash there)."""
    lines = [line for line in text.split("\n") if not drop_lines or line.strip() not in ("", "\\")]
    out = "\n".join(lines).rstrip()
    while out.endswith("\\") and not out.endswith("\\\\"):
        out = out[:-1].rstrip()
    return out
