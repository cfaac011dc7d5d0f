"""Words as POSIX sh reads them, without running anything, in one pass.

The launcher handed `args` to a shell; recipegen hands the words straight to the engine (no shell in between),
so it must split exactly as sh tokenises: blanks (space, tab, newline) separate words; single quotes keep every
character; double quotes keep every character but the escapes \\$ \\` \\" \\\\ and the line continuation
\\<newline>; a backslash outside quotes quotes the next character, and \\<newline> there is removed; an
unterminated quote is an error. `shlex` differs on continuations and on "\\$", and is quadratic on long quoted
words, hence this module.

No expansion happens here. Instead each word records what sh would have done beyond removing quotes (expand a
parameter, substitute a command, end the command at an operator, drop a comment, expand `~` or a glob): that
word reaches the engine as written, which the `shell-literal` lint rule reports.

Speed: every run of characters without meaning is consumed by one regex match or str.find, so a megabyte of
quoted text costs a handful of Python steps, and every position is scanned once (linear time).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Unquoted characters with no meaning to sh in the middle of a word; everything else is looked at one by one.
_PLAIN = re.compile(r"[^ \t\n'\"\\$`;|&<>()*?\[\]]+")
_DOUBLE_PLAIN = re.compile(r'[^"\\$`]+')  # inside double quotes only these four mean something
_GAP = re.compile(r"(?:[ \t\n]|\\\n)*")  # blanks and line continuations between words
_CONTINUATIONS = re.compile(r"(?:\\\n)*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOUBLE_ESCAPES = '$`"\\'
_SPECIAL_PARAMETERS = "@*#?-$!0123456789"
_OPERATORS = {";": "ended the command at ';'", "&": "ended the command at '&'",
              "|": "piped the command into what follows '|'", "<": "redirected input at '<'",
              ">": "redirected output at '>'", "(": "stopped with a syntax error at '('",
              ")": "stopped with a syntax error at ')'"}
COMMENT = "dropped it and the rest of its line as a comment"
TILDE = "replaced the leading '~' with a home directory"
GLOB = "matched it against file names (pathname expansion)"
COMMAND = "replaced `...` with the output of a command"


@dataclass(frozen=True)
class Word:
    text: str  # after quote removal: what the program receives
    start: int  # offset in the source of its first character (a quote, a backslash or the character itself)
    end: int  # offset just past its last character
    shell: tuple[str, ...] = ()  # what sh would have done beyond quote removal; () when sh reads it as we do


class ShellSyntaxError(ValueError):
    """Text sh refuses to read (an unterminated quote); `offset` is where the quote opened."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.offset = offset


def split(text: str) -> list[Word]:
    return _Scanner(text).words()


def without_comments(text: str) -> tuple[str, int | None]:
    """The text as a shell script reads it, each comment (an unquoted `#` starting a word, to the end of its line)
    cut out and nothing else changed; and where the first comment started (None: there is none). A peer's command
    is such a script (eugr's launcher runs it with bash); a recipe's `args` are not, and split() keeps a `#` word
    there, which the `shell-literal` rule reports."""
    scanner = _Scanner(text, comments=True)
    scanner.words()
    spans = scanner.comments or []
    for start, end in reversed(spans):
        text = text[:start] + text[end:]
    return text, spans[0][0] if spans else None


class _Scanner:
    def __init__(self, text: str, comments: bool = False):
        self.text = text
        self.pos = 0
        self.parts: list[str] = []  # the current word's pieces, joined once at its end
        self.shell: list[str] = []
        self.comments: list[tuple[int, int]] | None = [] if comments else None  # their spans, when cut

    def words(self) -> list[Word]:
        text = self.text
        found: list[Word] = []
        while True:
            self.pos = _GAP.match(text, self.pos).end()  # type: ignore[union-attr]  # matches the empty string
            if self.pos >= len(text):
                return found
            start = self.pos
            self.parts, self.shell = [], []
            if text[start] == "#" and self.comments is not None:  # to the end of the line: nothing in it counts
                end = text.find("\n", start)
                self.pos = len(text) if end < 0 else end
                self.comments.append((start, self.pos))
                continue
            if text[start] == "#":  # only a word's first character starts a comment (a#b is one word)
                self.shell.append(COMMENT)
            elif text[start] == "~":
                self.shell.append(TILDE)
            self._word()
            found.append(Word("".join(self.parts), start, self.pos, tuple(dict.fromkeys(self.shell))))

    def _note(self, what: str) -> None:
        self.shell.append(what)

    def _word(self) -> None:
        text, n, parts = self.text, len(self.text), self.parts
        bracket = False  # an unquoted '[' waiting for its ']' (together they are a glob)
        while self.pos < n:
            plain = _PLAIN.match(text, self.pos)
            if plain:
                parts.append(plain.group())
                self.pos = plain.end()
                continue
            i, c = self.pos, text[self.pos]
            if c in " \t\n":
                return
            if c == "'":
                end = text.find("'", i + 1)
                if end < 0:
                    raise ShellSyntaxError("unterminated single quote", i)
                parts.append(text[i + 1:end])
                self.pos = end + 1
            elif c == '"':
                self._double_quoted()
            elif c == "\\":
                if i + 1 == n:  # sh keeps a backslash that ends the text
                    parts.append(c)
                elif text[i + 1] != "\n":  # \<newline> is removed, any other pair is the quoted character
                    parts.append(text[i + 1])
                self.pos = min(i + 2, n)
            else:
                if c == "$":
                    self._dollar(i, quoted=False)
                elif c == "`":
                    self._note(COMMAND)
                elif c in _OPERATORS:
                    self._note(_OPERATORS[c])
                elif c in "*?" or (c == "]" and bracket):
                    self._note(GLOB)
                bracket = bracket or c == "["
                parts.append(c)
                self.pos = i + 1

    def _double_quoted(self) -> None:
        text, n, parts = self.text, len(self.text), self.parts
        opened = self.pos
        self.pos += 1
        while True:
            plain = _DOUBLE_PLAIN.match(text, self.pos)
            if plain:
                parts.append(plain.group())
                self.pos = plain.end()
            i = self.pos
            if i >= n:
                raise ShellSyntaxError("unterminated double quote", opened)
            c = text[i]
            if c == '"':
                self.pos = i + 1
                return
            if c == "\\":
                following = text[i + 1:i + 2]
                if following == "\n":
                    self.pos = i + 2
                elif following and following in _DOUBLE_ESCAPES:
                    parts.append(following)
                    self.pos = i + 2
                else:  # any other backslash stays, with the character after it read normally
                    parts.append(c)
                    self.pos = i + 1
                continue
            if c == "$":
                self._dollar(i, quoted=True)
            else:
                self._note(COMMAND)
            parts.append(c)
            self.pos = i + 1

    def _dollar(self, i: int, quoted: bool) -> None:
        """Note what sh does with the `$` at i; a `$` before anything else stays a plain `$`."""
        text = self.text
        j = _CONTINUATIONS.match(text, i + 1).end()  # type: ignore[union-attr]  # sh drops them before expanding
        following = text[j:j + 1]
        name = _NAME.match(text, j)
        if name:
            self._note(f"expanded ${name.group()}")
        elif following and following in _SPECIAL_PARAMETERS:
            self._note(f"expanded ${following}")
        elif following == "{":
            self._note("expanded ${...}")
        elif following == "(":
            self._note("replaced $(...) with the output of a command")
        elif not quoted and following in ("'", '"'):  # bash, and POSIX since 2024, read $'...' as escapes
            self._note(f"read ${following}...{following} as a quoted string of its own")
