"""The launcher as a person reads it in a generated file: its shell indented by its structure (the Python programs
it carries start at the first column, as python3 -c needs), and each generated file says once that `$$` is the
file's escape for `$`, since every `$` of the launcher shows doubled there (issue 30)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from generator.write.verify import read_yaml

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted((ROOT / "tests" / "golden").glob("*/expected/**/*.yaml")) + sorted((ROOT / "out").glob("**/*.yaml"))
DOLLAR_NOTE = re.compile(r"^ *# .*\$\$ is .*escape for \$", re.M)


def _launchers(path: Path) -> list[str]:
    data = read_yaml(path.read_text("utf-8"))
    if path.name == "compose.yaml":
        content = data.get("configs", {}).get("launch.sh", {}).get("content")
        return [content] if content else []
    return [s["entrypoint"][2] for s in data["services"].values()
            if isinstance(s.get("entrypoint"), list) and s["entrypoint"][:2] == ["/bin/sh", "-c"]]


def _shell_lines(script: str) -> list[str]:
    """The lines that start as shell code: not inside a quoted string (the Python programs, a multi-line setup
    command) or a here-document."""
    lines, quote, heredoc = [], "", None
    for line in script.splitlines():
        if heredoc is not None:
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        if not quote:
            lines.append(line)
        i = 0
        while i < len(line):
            c = line[i]
            if quote == "'":
                quote = "" if c == "'" else quote
            elif quote == '"':
                i += c == "\\"
                quote = "" if c == '"' else quote
            elif c == "\\":
                i += 1
            elif c in "'\"":
                quote = c
            elif c == "#" and (i == 0 or line[i - 1] in " \t"):
                break
            i += 1
        here = re.search(r"<<'(\w+)'", line)
        if here and not quote:
            heredoc = here[1]
    return lines


def _misindented(script: str) -> list[str]:
    depth, wrong = 0, []
    for line in _shell_lines(script):
        code = line.strip()
        closes = re.match(r"(done|fi|else|elif)\b|\}", code) is not None
        want = 2 * (depth - closes)
        if code and len(line) - len(line.lstrip(" ")) != want:
            wrong.append(f"want {want} spaces: {line!r}")
        depth -= re.match(r"(done|fi)\b|\}", code) is not None
        body = code.split(" #")[0].rstrip()
        depth += body.endswith(("; do", "; then", "{"))
    assert depth == 0 or not script, f"unbalanced: depth {depth}"
    return wrong


LAUNCHING = [(p, i, text) for p in FILES for i, text in enumerate(_launchers(p))]


@pytest.mark.parametrize("path, index, script", LAUNCHING,
                         ids=[f"{p.relative_to(ROOT)}#{i}" for p, i, _ in LAUNCHING])
def test_the_launchers_shell_is_indented_by_its_structure(path: Path, index: int, script: str) -> None:
    wrong = _misindented(script)
    assert not wrong, "\n".join(wrong)


def test_the_ray_worker_launcher_is_checked() -> None:
    assert any("recipegen_run()" in text for _, _, text in LAUNCHING), "no Ray worker launcher among the files"


@pytest.mark.parametrize("path", sorted({p for p, _, _ in LAUNCHING}), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_file_with_a_launcher_says_once_what_dollar_dollar_is(path: Path) -> None:
    text = path.read_text("utf-8")
    assert "$$" in text
    assert len(DOLLAR_NOTE.findall(text)) == 1, "say once, in a comment, that $$ is the file's escape for $"


def test_the_peers_comparison_lives_in_the_docs() -> None:
    """The launcher keeps why in one line and points at the page that compares with eugr and sparkrun."""
    template = (ROOT / "templates" / "launch.sh.j2").read_text("utf-8")
    page = (ROOT / "docs" / "launcher.md").read_text("utf-8")
    assert "nc -z" not in template and "docs/launcher.md" in template
    assert "nc -z" in page and "eugr" in page and "sparkrun" in page
