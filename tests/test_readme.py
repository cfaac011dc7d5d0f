"""The README is what a newcomer needs first (issue 30): the two fresh-machine commands, exactly; what the test
command starts and how to leave the lab out; a set-up with the versions the code needs; a complete first recipe
that validates and builds as written; the default entrypoint of each engine; and a "Read more" list reaching every
page of docs/, each page of the moved reference with a table of contents whose links land."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text("utf-8")
DOCS = ROOT / "docs"
# The reference moved out of the README: each page opens with a table of contents.
REFERENCE_PAGES = ["recipe-format.md", "lint.md", "launcher.md", "editors.md", "deploying.md", "locks.md",
                   "swarm.md", "bench.md", "import.md", "fidelity.md", "architecture.md", "tests.md",
                   "performance.md"]


def _section(title: str) -> str:
    start = README.index(title)
    end = README.find("\n## ", start + len(title))
    return README[start:end if end != -1 else None]


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def test_the_two_fresh_machine_commands_are_exact() -> None:
    """A clone line and the venv come first (Debian's system pip refuses with externally-managed-environment),
    then the two commands, exactly."""
    commands = [line.split("  #")[0].rstrip() for block in _blocks(_section("## Fresh machine"), "sh")
                for line in block.splitlines() if line and not line.startswith("#")]
    assert commands[0].startswith("git clone ") and commands[0].endswith(" recipegen && cd recipegen"), commands
    assert commands[1] == "python3 -m venv .venv && . .venv/bin/activate", commands
    assert commands[2:4] == ["python3 -m pip install -e . && recipegen build",
                             "python3 -m pip install -e '.[test]' && python3 -m pytest -q"], commands
    assert "python3 -m pytest -q" in (ROOT / ".ci" / "run").read_text("utf-8")


def test_the_readme_spells_the_router_url_as_the_generated_files_do() -> None:
    """One URL: the one the router's compose file gives clients (the node's management name, which `up` and `ps`
    print too), not the fabric address."""
    header = (ROOT / "out" / "_router" / "spark1" / "compose.yaml").read_text("utf-8")
    url = re.search(r"Clients use (http://\S+/v1)", header)
    assert url and url[1] == "http://spark1.local:4000/v1", header[:400]
    urls = set(re.findall(r"http://[\w.-]+:4000/v1", README))
    assert urls == {url[1]}, urls


def test_the_readme_says_why_recipegen_in_lines_a_reader_can_check() -> None:
    section = _section("## Why recipegen")
    assert "eugr" in section and "sparkrun" in section
    links = re.findall(r"\]\((docs/[^)#]+)\)", section)
    assert links and all((ROOT / link).is_file() for link in links), links
    bullets = [line for line in section.splitlines() if line.startswith("- ")]
    assert 3 <= len(bullets) <= 6, bullets
    import click

    from generator.cli import main

    named = set(re.findall(r"`(?:recipegen )?(\w+)`", section)) & {"validate", "fit", "doctor", "up", "import"}
    assert named == {"validate", "fit", "doctor", "up", "import"}, named
    assert all(main.get_command(click.Context(main), name) is not None for name in named)
    assert "docker compose" in section and "compose.yaml" in section


def test_the_readme_says_the_test_command_starts_the_lab_and_how_to_leave_it_out() -> None:
    section = _section("## Fresh machine")
    assert 'python3 -m pytest -q -m "not lab"' in section
    assert "root" in section and "namespaces" in section and "dockerd" in section


def test_not_lab_deselects_the_lab_tests() -> None:
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not lab",
                          "tests/test_lab_smoke.py"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert re.search(r"\b0 selected\b|no tests collected|deselected", run.stdout), run.stdout + run.stderr
    assert "test_lab_smoke.py::" not in run.stdout, run.stdout


def test_the_setup_states_the_versions_the_code_needs() -> None:
    from generator.render.versions import COMPOSE_INLINE_CONFIGS

    setup = _section("## Set up")
    python = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["requires-python"]
    assert python == ">=3.11" and "Python 3.11 or newer" in setup
    assert "python3 -m venv" in setup
    compose = ".".join(map(str, COMPOSE_INLINE_CONFIGS[0]))
    assert f"Compose plugin **{compose} or newer**" in setup
    checklist = [line for line in setup.splitlines() if line.startswith("- [ ]")]
    assert len(checklist) >= 4 and any("Docker CLI" in c for c in checklist) and any("SSH" in c for c in checklist)


def _first_recipe(tmp_path: Path) -> tuple[Path, str, str]:
    section = _section("## A first recipe")
    [text] = _blocks(section, "toml")
    where = re.search(r"Save it as `recipes/([^/`]+)/recipe\.toml`", section)
    assert where, "the README says where to save the first recipe"
    project = tmp_path / "project"
    (project / "recipes" / where[1]).mkdir(parents=True)
    shutil.copy(ROOT / "cluster.toml", project / "cluster.toml")
    shutil.copytree(ROOT / "schema", project / "schema")
    (project / "recipes" / where[1] / "recipe.toml").write_text(text, "utf-8")
    return project, where[1], section


def _recipegen(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "generator", *args], cwd=project, capture_output=True, text=True,
                          timeout=120)


def test_the_first_recipe_validates_and_builds_as_written(tmp_path: Path) -> None:
    project, recipe_id, section = _first_recipe(tmp_path)
    for line in _blocks(section, "sh")[0].splitlines():
        words = shlex.split(line.split("#")[0])
        if words[:2] in (["recipegen", "validate"], ["recipegen", "build"], ["recipegen", "explain"]):
            run = _recipegen(project, *words[1:], *(["--strict"] if words[1] == "validate" else []))
            assert run.returncode == 0, f"{line}\n{run.stdout}{run.stderr}"
    assert sorted(p.name for p in (project / "out" / recipe_id).iterdir()) == ["group-watch.py", "spark1", "stack.yaml"]
    two = re.search(r"Two nodes: add ((?:`[a-z_]+ = \d+`(?: and )?)+)", section)
    assert two, "the README says how to run it on two nodes"
    recipe = project / "recipes" / recipe_id / "recipe.toml"
    recipe.write_text(recipe.read_text("utf-8") + "".join(f"{a}\n" for a in re.findall(r"`([^`]+)`", two[1])))
    run = _recipegen(project, "validate", "--strict", f"recipes/{recipe_id}")
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_default_entrypoint_table_is_the_codes() -> None:
    import json

    from generator.resolve.model import ENGINE_DEFAULT_ENTRYPOINT, ENGINE_DEFAULT_PORT

    rows = re.findall(r"^\| `(\w+)` \| `(\[.*?\])` \| (\d+) \|$", _section("## A first recipe"), re.M)
    table = {engine: (tuple(json.loads(entry)), int(port)) for engine, entry, port in rows}
    assert table == {e: (ENGINE_DEFAULT_ENTRYPOINT[e], ENGINE_DEFAULT_PORT[e]) for e in ENGINE_DEFAULT_ENTRYPOINT}


def test_the_readme_names_recipegen_schema() -> None:
    assert "`recipegen schema`" in _section("## Your editor")


def test_a_newcomer_reaches_a_first_recipe_early() -> None:
    lines = README.splitlines()
    assert len(lines) <= 200, f"README is {len(lines)} lines: the reference belongs in docs/"
    assert lines.index("## A first recipe") < 100


def test_read_more_reaches_every_page_of_docs() -> None:
    links = re.findall(r"\]\((docs/[^)#]+)\)", _section("## Read more"))
    assert all((ROOT / link).is_file() for link in links), links
    pages = {f"docs/{p.name}" for p in DOCS.glob("*.md")}
    assert not pages - set(links), f"pages the README's Read more list does not name: {sorted(pages - set(links))}"


def _slug(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped but hyphens, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def _headings(text: str) -> set[str]:
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return {_slug(m[1]) for m in re.finditer(r"^#+ (.*)$", text, re.M)}


@pytest.mark.parametrize("name", sorted(p.name for p in DOCS.glob("*.md")))
def test_a_pages_links_land(name: str) -> None:
    text = (DOCS / name).read_text("utf-8")
    anchors = _headings(text)
    dangling = [a for a in re.findall(r"\]\(#([^)]+)\)", text) if a not in anchors]
    assert not dangling, f"docs/{name}: links to no heading: {dangling}"
    files = [f for f in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text) if not (DOCS / f).exists()]
    assert not files, f"docs/{name}: links to no file: {files}"


@pytest.mark.parametrize("name", REFERENCE_PAGES)
def test_each_reference_page_has_a_table_of_contents(name: str) -> None:
    text = (DOCS / name).read_text("utf-8")
    toc = text.split("**Contents**", 1)[1].split("\n## ", 1)[0] if "**Contents**" in text else ""
    listed = re.findall(r"^\s*- \[.*?\]\(#([^)]+)\)$", toc, re.M)
    sections = [_slug(m[1]) for m in re.finditer(r"^## (.*)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M)]
    assert listed and set(sections) <= set(listed), f"docs/{name}: the contents miss {set(sections) - set(listed)}"


def test_the_tests_page_counts_the_peer_cases_in_the_tree() -> None:
    cases = len(list((ROOT / "tests" / "peers").glob("*/peer.json")))
    stated = re.search(r"`tests/peers/`: (\d+) cases", (DOCS / "tests.md").read_text("utf-8"))
    assert stated and int(stated[1]) == cases, (stated and stated[1], cases)
