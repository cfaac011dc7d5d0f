"""docs/getting-started.md (issue 43) is one numbered path from nothing to a served, benchmarked model, linked from
the top of the README. Its commands are checked as the README's are: every `recipegen` line parses with the real
CLI, the compile lines run on a copy of the project, `docker context create` runs for real (in a config folder
of the test's), the recipe, image and router URL it names are the project's; and every message its
troubleshooting quotes is one the code prints (the probe's for a missing context, produced for real)."""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest

from generator.cli import main

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "getting-started.md").read_text("utf-8")
RECIPE = "glm-4-5-air-sglang"
STEPS = ["An SSH key on each Spark", "A Docker context per Spark", "The cluster file: `cluster probe --write`",
         "Check it live: `doctor`", "The image on one Spark, then `images`", "The model: `models`",
         "Compile: `build`", "Start it: `up`", "The router's URL, and `bench`"]


def _steps_text() -> str:
    return PAGE.split("## When a step fails", 1)[0]


def _troubleshooting() -> str:
    return PAGE.split("## When a step fails", 1)[1]


def _commands(text: str) -> list[list[str]]:
    lines = [line for block in re.findall(r"```sh\n(.*?)```", text, re.S) for line in block.splitlines()]
    return [shlex.split(line.split("  #")[0]) for line in lines if line.strip()]


def test_the_readme_links_the_page_at_its_top() -> None:
    top = (ROOT / "README.md").read_text("utf-8").split("\n## ", 1)[0]
    assert "](docs/getting-started.md)" in top


def test_the_steps_are_numbered_in_the_order_the_issue_gives() -> None:
    assert re.findall(r"^## (\d+)\. (.*)$", PAGE, re.M) == [(str(n), s) for n, s in enumerate(STEPS, 1)]
    fails = re.findall(r"^\*\*(\d+)\. ", _troubleshooting(), re.M)
    assert fails == [str(n) for n in range(1, 10)], "each step has its part in 'When a step fails'"


def _parse(words: list[str]) -> None:
    """Parse a recipegen command line with the real CLI, running nothing: unknown commands, options and missing
    arguments raise click's UsageError."""
    command: click.Command = main
    ctx = click.Context(main, info_name="recipegen")
    args = words[1:]
    while isinstance(command, click.Group):
        sub = command.get_command(ctx, args[0])
        assert sub is not None, f"no command {args[0]!r}: {shlex.join(words)}"
        command, args = sub, args[1:]
        ctx = click.Context(command, info_name=command.name, parent=ctx)
    command.make_context(command.name, list(args), parent=ctx.parent)


def test_every_recipegen_command_on_the_page_parses() -> None:
    """The lines of its sh blocks, and the commands it names in the text (`recipegen ps RECIPE` ...)."""
    inline = [shlex.split(c) for c in re.findall(r"`(recipegen [^`]+)`", re.sub(r"```.*?```", "", PAGE, flags=re.S))
              if "<" not in c and "FILE" not in c]
    commands = [w for w in _commands(PAGE) if w[0] == "recipegen"] + inline
    assert len(commands) >= 12
    for words in commands:
        _parse(words)


def test_the_compile_steps_run_on_a_copy_of_the_project(tmp_path: Path) -> None:
    """`build` (and `build --check`, which the page says then passes) on the bundled project with the page's
    router: the files the page names are written."""
    project = tmp_path / "project"
    for part in ("recipes", "schema", "mods", "cluster.toml"):
        source = ROOT / part
        if source.is_dir():
            shutil.copytree(source, project / part)
        elif source.is_file():
            shutil.copy2(source, project / part)
    builds = [w for w in _commands(_steps_text()) if w[:2] == ["recipegen", "build"]]
    assert builds == [["recipegen", "build"]]
    for args in (["build"], ["build", "--check"]):
        run = subprocess.run([sys.executable, "-m", "generator", *args], cwd=project, capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
    assert (project / "out" / RECIPE / "spark1" / "compose.yaml").is_file()
    assert (project / "out" / "_router").is_dir()


def test_the_recipe_image_and_router_the_page_names_are_the_projects() -> None:
    recipe = tomllib.loads((ROOT / "recipes" / RECIPE / "recipe.toml").read_text("utf-8"))
    assert f"docker --context spark1 pull {recipe['docker_image']}" in PAGE
    assert recipe["model"] in _troubleshooting() and f"recipegen up {RECIPE}" in PAGE
    assert re.search(r'\[router\]\nnodes = \["spark1"\]', PAGE)
    # The URL the router's compose file gives clients for the bundled cluster (spark1's ssh_host, port 4000).
    header = (ROOT / "out" / "_router" / "spark1" / "compose.yaml").read_text("utf-8")
    url = re.search(r"Clients use (http://\S+/v1)", header)
    assert url and f"curl {url[1]}/models" in PAGE, url


@pytest.fixture
def docker_config(tmp_path: Path) -> dict[str, str]:
    if shutil.which("docker") is None:
        reason = "no docker CLI: the page's docker context commands cannot be run"
        if os.environ.get("CI"):
            pytest.fail(reason)
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    (tmp_path / "docker-config").mkdir()
    return {**os.environ, "DOCKER_CONFIG": str(tmp_path / "docker-config")}


def test_the_context_commands_run_with_the_real_docker_cli(docker_config: dict[str, str]) -> None:
    """The page's `docker context create` lines make contexts as the probe then reads them (nothing is
    contacted: a context is a name and an endpoint)."""
    creates = [w for w in _commands(PAGE) if w[:3] == ["docker", "context", "create"]]
    assert [w[3] for w in creates] == ["spark1", "spark2"]
    for words in creates:
        run = subprocess.run(words, env=docker_config, capture_output=True, text=True, timeout=30)
        assert run.returncode == 0, run.stdout + run.stderr
    listed = subprocess.run(["docker", "context", "ls", "--format", "{{.Name}} {{.DockerEndpoint}}"],
                            env=docker_config, capture_output=True, text=True, timeout=30).stdout
    assert "spark1 ssh://spark@spark1.local" in listed and "spark2 ssh://spark@spark2.local" in listed


def test_the_probes_message_for_a_missing_context_is_the_one_the_page_quotes(docker_config: dict[str, str]) -> None:
    run = subprocess.run([sys.executable, "-m", "generator", "cluster", "probe", "--context", "spark1",
                          "--timeout", "10"], env=docker_config, capture_output=True, text=True, timeout=60,
                         cwd=ROOT)
    assert run.returncode == 1
    first = run.stderr.splitlines()[0]
    assert first in _quoted(), first
    assert "docker context create spark1 --docker host=ssh://" in first


# --- the troubleshooting's messages are the code's ---------------------------------------------------------------

def _quoted() -> list[str]:
    return [line for block in re.findall(r"```text\n(.*?)```", _troubleshooting(), re.S)
            for line in block.splitlines() if line.strip()]


def _templates() -> list[re.Pattern[str]]:
    """Every string the package can print, as a pattern: an f-string's fields match anything."""
    found = []
    for path in (ROOT / "generator").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.JoinedStr):
                parts = [re.escape(v.value) if isinstance(v, ast.Constant) else "(.+)" for v in node.values]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                parts = [re.escape(node.value)]
            else:
                continue
            literal = sum(len(p) for p in parts if p != "(.+)")
            if literal >= 12:
                found.append(re.compile("".join(parts), re.S))
    return found


def _printed_by_the_code(line: str, templates: list[re.Pattern[str]]) -> bool:
    """`line` is, after any `name: ` prefixes the CLI puts before a message, one template, or a template with a
    fix in parentheses that is another."""
    words = line.split(": ")
    for cut in range(len(words)):
        rest = ": ".join(words[cut:])
        if any(t.fullmatch(rest) for t in templates):
            return True
        for t in templates:
            match = t.match(rest)
            if match and rest[match.end():].startswith(" (") and rest.endswith(")") and any(
                    f.fullmatch(rest[match.end() + 2:-1]) for f in templates):
                return True
    return False


def test_every_message_the_troubleshooting_quotes_is_printed_by_the_code() -> None:
    templates = _templates()
    quoted = _quoted()
    assert len(quoted) >= 12
    unknown = [line for line in quoted if not _printed_by_the_code(line, templates)]
    assert not unknown, "messages on the page that no code prints:\n" + "\n".join(unknown)


def test_a_message_the_code_does_not_print_is_caught() -> None:
    templates = _templates()
    assert not _printed_by_the_code("spark1: preflight: image x is missing, try harder", templates)
    assert _printed_by_the_code("spark1: preflight: image x is not on this node (load it there, or "
                                "`recipegen images`)", templates)
