"""`args` words as POSIX sh reads them (generator.read.shellwords, argwords.split_words) and the `shell-literal` rule.

The expected words below are written by hand from POSIX's token rules, and every hazard-free case is also run
through the machine's real /bin/sh (dash), as is a property test over generated texts: the splitter must give
sh's words, and refuse exactly the texts sh refuses.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from generator.cli import main
from generator.diagnostics import RecipegenError
from generator.read import shellwords
from generator.read.shellwords import ShellSyntaxError, Word
from generator.read.tomldoc import load_toml
from generator.resolve.argwords import split_words

SH = shutil.which("sh") or "/bin/sh"


def words(text: str) -> list[str]:
    return [w.text for w in shellwords.split(text)]


# --- sh itself ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sh_dir(tmp_path_factory) -> Path:
    """sh's working folder, with files a glob would match: a glob the splitter misses changes sh's words."""
    folder = tmp_path_factory.mktemp("sh")
    for name in ("a", "ab", "b", "a]"):
        (folder / name).touch()
    return folder


def sh_words(text: str, cwd: Path) -> list[str] | None:
    """The words sh gives `text` as arguments of printf, or None when sh refuses the text.

    The splitter reads an unquoted newline as a blank (the launcher joined `args` into one command); sh ends
    the command there, so those newlines, and only those, are given to sh as spaces. Which newlines they are
    comes from the splitter's word spans, but a wrong span shows anyway: a newline sh sees inside quotes would
    turn into a space inside a word, and one it sees outside would end printf's command early.
    """
    try:
        spans = [(w.start, w.end) for w in shellwords.split(text)]
    except ShellSyntaxError:
        spans = []
    inside = bytearray(len(text) + 1)
    for start, end in spans:
        inside[start:end] = b"\1" * (end - start)
    # Between words a backslash is only ever the first half of a continuation, which sh must still see.
    continued = {i for i in range(1, len(text)) if text[i - 1] == "\\" and not inside[i - 1]}
    script = "".join(" " if c == "\n" and not inside[i] and i not in continued else c for i, c in enumerate(text))
    # `x` first: printf with no argument after its format would still print one empty word.
    proc = subprocess.run([SH, "-c", "printf '%s\\0' x " + script], cwd=cwd, capture_output=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/home-of-sh", "a": "A"})
    if proc.returncode != 0:
        return None
    out = proc.stdout.decode("utf-8").split("\0")
    assert out[0] == "x" and out[-1] == "", out
    return out[1:-1]


# --- hand-written cases, each also checked against sh -----------------------------------------------------------

CASES = [
    # the launcher's line continuation, between words and inside one
    ("vllm serve X \\\n  --port 8000", ["vllm", "serve", "X", "--port", "8000"]),
    ("--max-\\\nmodel-len", ["--max-model-len"]),
    ("a \\\n\\\n b", ["a", "b"]),
    # double quotes: exactly \$ \` \" \\ and \<newline> are escapes
    ('"\\$ \\` \\" \\\\"', ['$ ` " \\']),
    ('"a\\$b"', ["a$b"]),
    ('"a\\\nb"', ["ab"]),
    ('"\\a \\n \\\' \\{"', ["\\a \\n \\' \\{"]),
    ('"\\\\\\q"', ["\\\\q"]),
    ("\"it's\"", ["it's"]),
    # single quotes keep everything, backslashes and newlines included
    ("'a\\b\\\nc \"d\"'", ['a\\b\\\nc "d"']),
    ("'$x'", ["$x"]),
    # a backslash outside quotes quotes the next character; one that ends the text stays
    ("a\\ b \\'c\\\" \\\\", ["a b", "'c\"", "\\"]),
    ("a\\", ["a\\"]),
    ("'a'\\", ["a\\"]),
    # empty words and adjacent quoting
    ("a '' b \"\"", ["a", "", "b", ""]),
    ("a'b'\"c\"d", ["abcd"]),
    ("'a'\"b\"'c'", ["abc"]),
    ('--flag="a b"', ["--flag=a b"]),
    ("--x='{\"a\": 1}'", ['--x={"a": 1}']),
    # JSON in single quotes, the launcher's way
    ("--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 2, \"k\": [1, \"a b\"]}'",
     ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2, "k": [1, "a b"]}']),
    ("\n'{\"a\": 1}'", ['{"a": 1}']),
    # blanks: space, tab, newline; a carriage return is a character like any other (as in sh)
    ("a\tb\nc \t\n d", ["a", "b", "c", "d"]),
    ("a\rb", ["a\rb"]),
    ("", []),
    (" \t\n \\\n ", []),
    # unicode passes through
    ("ünï 日本 '🙂 x' \"é\\$\"", ["ünï", "日本", "🙂 x", "é$"]),
    # what sh keeps literal: a lone `$`, `$` before a non-name, `#` and `~` inside a word, an unclosed `[`
    ("a$ $/ \"$\" \"$'x'\" a#b a~ x=~/y a[b \\$x \\#c \\~", ["a$", "$/", "$", "$'x'", "a#b", "a~", "x=~/y", "a[b",
                                                              "$x", "#c", "~"]),
]


@pytest.mark.parametrize("text, expected", CASES, ids=[repr(t)[:40] for t, _ in CASES])
def test_words(text, expected):
    assert words(text) == expected


@pytest.mark.parametrize("text, expected", CASES, ids=[repr(t)[:40] for t, _ in CASES])
def test_words_are_shs(text, expected, sh_dir):
    """The hand-written expectations are sh's own (and none of these words is one sh would change)."""
    assert all(not w.shell for w in shellwords.split(text))
    assert sh_words(text, sh_dir) == expected


@pytest.mark.parametrize("text, offset, kind", [
    ("'a", 0, "single"),
    ('"a', 0, "double"),
    ("a 'b' 'c", 6, "single"),
    ("'\"' \"'", 4, "double"),
    ('"a\\"', 0, "double"),  # the escaped quote does not close it
    ('"a\\', 0, "double"),
    ("x y \"a ' b", 4, "double"),
])
def test_unterminated_quote_is_an_error_where_it_opens(text, offset, kind, sh_dir):
    with pytest.raises(ShellSyntaxError) as exc:
        shellwords.split(text)
    assert exc.value.offset == offset
    assert str(exc.value) == f"unterminated {kind} quote"
    assert sh_words(text, sh_dir) is None, "sh accepts it"


def test_word_spans():
    """A span is the source of the word: its quotes, and a continuation that follows it without a blank."""
    text = "ab  'c d'\\\n e\\"
    assert [(w.text, text[w.start:w.end]) for w in shellwords.split(text)] == [
        ("ab", "ab"), ("c d", "'c d'\\\n"), ("e\\", "e\\")]


# --- what sh would have done ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, says", [
    ("$x", "expanded $x"),
    ('"--a=$HOME/b"', "expanded $HOME"),
    ("${x}", "expanded ${...}"),
    ('"${x:-y}"', "expanded ${...}"),
    ("$1", "expanded $1"),
    ("$@", "expanded $@"),
    ("$?", "expanded $?"),
    ('"$$"', "expanded $$"),
    ("$\\\nx", "expanded $x"),  # sh drops the continuation first
    ("$(date)", "replaced $(...) with the output of a command"),
    ('"$((1+1))"', "replaced $(...)"),
    ("`date`", "replaced `...` with the output of a command"),
    ('"a`b`"', "replaced `...`"),
    ("$'a\\tb'", "read $'...' as a quoted string of its own"),
    ("a;b", "ended the command at ';'"),
    ("a&&b", "ended the command at '&'"),
    ("a|b", "piped the command"),
    ("2>x", "redirected output at '>'"),
    ("<x", "redirected input at '<'"),
    ("f(x)", "syntax error at '('"),
    ("#c", "as a comment"),
    ("\\\n#c", "as a comment"),
    ("~/models", "'~' with a home directory"),
    ("a*", "pathname expansion"),
    ("a?", "pathname expansion"),
    ("[ab]", "pathname expansion"),
])
def test_words_sh_would_change(text, says):
    (word,) = shellwords.split(text)
    assert any(says in s for s in word.shell), word.shell


@pytest.mark.parametrize("text", ["'$x'", '"a\\$b"', "\\$x", "'`a`'", '"\\`a\\`"', "'a;b'", '"a;b|c&d<e>f(g)"',
                                  "a\\;b", "a#b", "'#c'", "\"#c\"", "'~'/x", "a~", "'*'", '"a?"', "a[b", "$", "$/",
                                  "a$", '"$"', "\"$'x'\"", "{a,b}"])
def test_words_sh_keeps(text):
    (word,) = shellwords.split(text)
    assert word.shell == ()


def test_each_note_said_once():
    (word,) = shellwords.split("$a;$a;")
    assert word.shell == ("expanded $a", "ended the command at ';'")


# --- against sh, generated -------------------------------------------------------------------------------------

# Pieces more likely than single characters to make interesting shell (continuations, escapes, expansions).
QUOTING = ["'", '"', "\\", "\\\n", "\\\\", '\\"', "\\'", "\\$", "\\`", " ", "\t", "\n", "a", "b", "-", "=", "é",
           "日", "{", "}", ",", "/", "\r", "]"]
# Pieces sh may expand or act on: rarer, so that most texts get compared with sh's words.
ACTING = ["$", "$a", "${a}", "$(", "$'", "`", "#", "~", "*", "?", "[", ";", "&", "|", "<", ">", "(", ")"]
EXAMPLES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])


def ours(text: str) -> list[Word] | None:
    try:
        return shellwords.split(text)
    except ShellSyntaxError:
        return None


@EXAMPLES
@given(text=st.lists(st.sampled_from(QUOTING), max_size=16).map("".join))
def test_quoting_as_sh_does(sh_dir, text):
    """Quotes, escapes, continuations and blanks only: our words are sh's, and we refuse what sh refuses."""
    found = ours(text)
    if found is None and ("$" in text or "`" in text):  # sh may read an open quote as part of `..` or ${..}
        event("refused, with $ or ` about: not compared")
        return
    if found is not None and any(w.shell for w in found):  # \\$a: the escaped backslash leaves $a
        event("a word sh would change: not compared")
        return
    event("refused by us" if found is None else "split by us")
    assert sh_words(text, sh_dir) == (None if found is None else [w.text for w in found]), repr(text)


@EXAMPLES
@given(text=st.lists(st.sampled_from(QUOTING * 3 + ACTING), max_size=16).map("".join))
def test_splits_as_sh_does(sh_dir, text):
    """With expansions and operators about: where we say sh reads every word as we do, it does."""
    found = ours(text)
    if found is None or any(w.shell for w in found):
        event("refused, or a word sh would change: not compared")  # `#` or `$(` may hide an open quote from sh
        return
    event("words compared")
    assert sh_words(text, sh_dir) == [w.text for w in found], repr(text)


# --- split_words: origins and errors per element ---------------------------------------------------------------


def split(tmp_path: Path, items: list[str]):
    """One element per line: element i is on line i + 2."""
    body = "".join(f"    {json.dumps(item, ensure_ascii=False)},\n" for item in items)
    path = tmp_path / "args.toml"
    path.write_text(f"args = [\n{body}]\n", "utf-8")
    doc = load_toml(path)
    assert doc.data["args"] == items
    return split_words(doc, doc.data["args"], "recipe")


def test_each_word_has_the_element_it_starts_in(tmp_path):
    args = split(tmp_path, ["--a 1", "--served-model-name", "'my", "big model'", "--b", "x\\", "y", "--c"])
    assert [(a.word, a.origin.line) for a in args] == [
        ("--a", 2), ("1", 2), ("--served-model-name", 3), ("my big model", 4), ("--b", 6), ("x y", 7), ("--c", 9)]


def test_launcher_serve_command_is_one_element_of_many_lines(tmp_path):
    args = split(tmp_path, ["--port 8000 \\\n  --host 0.0.0.0 \\\n  --x '{\"a\": 1}'", "--y"])
    assert [(a.word, a.origin.line) for a in args] == [
        ("--port", 2), ("8000", 2), ("--host", 2), ("0.0.0.0", 2), ("--x", 2), ('{"a": 1}', 2), ("--y", 3)]


def test_words_carry_what_sh_would_do(tmp_path):
    args = split(tmp_path, ["--a", "$HOME", "'$HOME'"])
    assert [a.shell for a in args] == [(), ("expanded $HOME",), ()]


@pytest.mark.parametrize("items, bad, kind, shown", [
    (["--a", "1", "--b", "'oops"], 3, "single", "'oops"),
    (["'a", "b'", "'c"], 2, "single", "'c"),  # the first two close each other
    (["--a", "\"x", "y", "z"], 1, "double", '"x'),  # never closed: the element where it opens
    (["--a", "'x' --b=\"it's\nmore"], 1, "double", '"it\'s'),  # from the quote to the end of its line
])
def test_unterminated_quote_points_at_its_element(tmp_path, items, bad, kind, shown):
    with pytest.raises(RecipegenError) as exc:
        split(tmp_path, items)
    (d,) = exc.value.diagnostics
    assert (d.line, d.key) == (bad + 2, f"args[{bad}]")
    assert d.message == (f"cannot split into shell words: unterminated {kind} quote (sh would refuse the command): "
                         f"{shown}")


# --- the shell-literal rule through the CLI ---------------------------------------------------------------------

RECIPE = '''engine = "vllm"
docker_image = "vllm/vllm-openai:v0.34.0"
model = "Qwen/Qwen3-32B"
required_nodes = 2
tensor_parallel_size = 2
args = [
    "--max-model-len", "4096",
    {value},
]
'''
CLUSTER = Path(__file__).resolve().parent / "lint" / "cluster.toml"


def validate(tmp_path: Path, value: str):
    path = tmp_path / "case" / "recipe.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(RECIPE.format(value=json.dumps(value)), "utf-8")
    return CliRunner().invoke(main, ["validate", str(path), "--cluster", str(CLUSTER), "--strict"],
                              catch_exceptions=False)


@pytest.mark.parametrize("value, says", [
    ("--chat-template $TEMPLATE", "expanded $TEMPLATE"),
    ('--served-model-name "$(hostname)"', "replaced $(...)"),
    ("--served-model-name a;b", "ended the command at ';'"),
    ("--download-dir ~/models", "home directory"),
    ("--served-model-name 1 # the rest", "as a comment"),
])
def test_shell_literal_warns_at_the_element(tmp_path, value, says):
    result = validate(tmp_path, value)
    assert result.exit_code == 1  # a warning fails --strict
    (line,) = result.stderr.splitlines()
    assert ":8:5: warning[shell-literal]: args: " in line  # the element's own column
    assert "reaches the engine literally (recipegen runs no shell)" in line and says in line


@pytest.mark.parametrize("value", ["--served-model-name '$HOME'", '--served-model-name "a\\$b"',
                                   "--served-model-name a#b", "--served-model-name '~/m'",
                                   "--served-model-name \"a;b\""])
def test_shell_literal_quiet_on_quoted(tmp_path, value):
    result = validate(tmp_path, value)
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""


@pytest.mark.parametrize("text, kept, first", [
    ("a b # it's a note\nc", "a b \nc", 4),
    ("a#b '# q' \"# d\" \\# x", "a#b '# q' \"# d\" \\# x", None),  # inside a word, quoted, escaped: no comment
    ("# only\n# two", "\n", 0),
    ("a \\\n  # note \\\n", "a \\\n  \n", 6),  # a backslash inside a comment escapes nothing
])
def test_without_comments_cuts_what_bash_skips(text: str, kept: str, first: int | None):
    from generator.read.shellwords import without_comments

    assert without_comments(text) == (kept, first)
