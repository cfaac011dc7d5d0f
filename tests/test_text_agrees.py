"""The text agrees with the code: the README's examples run on a fresh clone, the recipe format page and the
schema descriptions state the defaults the schema applies and the order the launcher runs setup and mods in, and
the pre-commit hook reruns `build --check` when any file the build reads changes. The reference moved from the
README into docs/ pages (issue 30): each is checked where it now lives."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text("utf-8")
DOCS = ROOT / "docs"
SCHEMAS = {kind: json.loads((ROOT / "schema" / f"{kind}.schema.json").read_text("utf-8"))
           for kind in ("recipe", "cluster")}


def _section(title: str, text: str = README) -> str:
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return text[start:end if end != -1 else None]


def _doc(name: str) -> str:
    return (DOCS / name).read_text("utf-8")


def _recipe_rows() -> dict[str, str]:
    """The recipe format page's table: key -> its meaning cell (a row naming two keys gives both)."""
    rows: dict[str, str] = {}
    table = _section("## Every key", _doc("recipe-format.md"))
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`"):
            for key in re.findall(r"`\[*\[?([a-z_]+)\]*`", cells[0]):
                rows[key] = "|".join(cells[1:])
    return rows


# --- the README's commands ----------------------------------------------------------------------------------------

def _readme_commands() -> list[list[str]]:
    """`recipegen build` / `validate` lines of the README's everyday commands (the others need live nodes)."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", _section("## Everyday commands"), re.S):
        for line in block.splitlines():
            if not line.startswith("recipegen "):
                continue
            words = shlex.split(line.split("#")[0])
            if words[:2] in (["recipegen", "build"], ["recipegen", "validate"]):
                commands.append(words[1:])
    return commands


def test_readme_examples_run_on_a_fresh_clone(tmp_path: Path) -> None:
    commands = _readme_commands()
    assert len(commands) >= 3, commands
    clone = tmp_path / "clone"
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", "recipes", "mods", "images", "clusters",
                              "cluster.toml", "out"], capture_output=True, text=True, check=True).stdout
    for name in filter(None, tracked.split("\0")):
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    for args in commands:
        args = [str(tmp_path / "elsewhere") if a.startswith("/tmp/") else a for a in args]
        run = subprocess.run([sys.executable, "-m", "generator", *args], cwd=clone, capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, f"README: recipegen {shlex.join(args)}\n{run.stdout}{run.stderr}"


# --- defaults -----------------------------------------------------------------------------------------------------

def _stated_defaults(text: str, keys: list[str]) -> dict[str, str]:
    """`100m` x 3 by default (two keys), `30m` by default, (default `Dockerfile`): key -> the stated value."""
    found: dict[str, str] = {}
    pair = re.search(r"`([^`]+)` x (\d+) by default", text)
    if pair and len(keys) == 2:
        return {keys[0]: pair[1], keys[1]: pair[2]}
    one = re.search(r"`([^`]+)` by default|\(default `([^`]+)`\)|[Dd]efaults? to `([^`]+)`", text)
    if one and len(keys) == 1:
        found[keys[0]] = next(g for g in one.groups() if g is not None)
    return found


def _schema_default(kind: str, key: str) -> str | None:
    prop = SCHEMAS[kind]["properties"].get(key, {})
    if "default" not in prop:
        return None
    value = prop["default"]
    return json.dumps(value) if isinstance(value, list) else str(value)


def test_readme_states_the_defaults_the_schema_applies() -> None:
    rows = _recipe_rows()
    by_cell: dict[str, list[str]] = {}
    for key, cell in rows.items():
        by_cell.setdefault(cell, []).append(key)
    checked, wrong = 0, []
    for cell, keys in by_cell.items():
        for key, stated in _stated_defaults(cell, keys).items():
            applied = _schema_default("recipe", key)
            if applied is None:
                continue
            checked += 1
            if stated != applied:
                wrong.append(f"{key}: docs/recipe-format.md says {stated!r} by default, the schema applies {applied!r}")
    assert checked >= 3 and not wrong, wrong or f"only {checked} defaults checked"


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_schema_descriptions_state_their_own_defaults(kind: str) -> None:
    wrong = []
    for key, prop in SCHEMAS[kind]["properties"].items():
        stated = _stated_defaults(prop.get("description", ""), [key])
        applied = _schema_default(kind, key)
        if key in stated and applied is not None and stated[key] != applied:
            wrong.append(f"{key}: description says {stated[key]!r}, default is {applied!r}")
    assert not wrong, wrong


# --- the order of setup and mods ----------------------------------------------------------------------------------

def _launcher_order() -> list[str]:
    """setup and mods in the order the launcher template runs them."""
    text = (ROOT / "templates" / "launch.sh.j2").read_text("utf-8")
    setup = text.index("{% for step in node.launch.setup %}")
    mods = text.index("{% for mod in node.launch.mods %}")
    return ["setup", "mods"] if setup < mods else ["mods", "setup"]


def _order_claims(key: str, text: str) -> list[tuple[str, str]]:
    """(`key` ran before/after other) pairs a text states, for other in setup and mods."""
    claims = []
    for when, other in re.findall(r"\b(before|after)\s+(?:the\s+)?`?(setup|mods?)\b", text):
        other = "mods" if other.startswith("mod") else other
        if other != key:
            claims.append((when, other))
    return claims


def test_readme_and_schema_state_the_launchers_order() -> None:
    order = _launcher_order()
    texts = {f"schema {k}": (k, SCHEMAS["recipe"]["properties"][k]["description"]) for k in ("setup", "mods")}
    rows = _recipe_rows()
    texts.update({f"docs/recipe-format.md {k}": (k, rows[k]) for k in ("setup", "mods")})
    wrong, claims = [], 0
    for where, (key, text) in texts.items():
        for when, other in _order_claims(key, text):
            claims += 1
            first = order.index(key) < order.index(other)
            if first != (when == "before"):
                wrong.append(f"{where}: says {key} runs {when} {other}; the launcher runs {' then '.join(order)}")
    steps = _section("## What runs before the engine", _doc("launcher.md"))
    listed = [m.start() for m in (re.search(r"\n\d\. the `setup`", steps), re.search(r"\n\d\. each mod", steps))]
    if (listed[0] < listed[1]) != (order == ["setup", "mods"]):
        wrong.append("docs/launcher.md's numbered steps list setup and mods in another order than the launcher")
    assert claims >= 4 and not wrong, wrong or claims


# --- the pre-commit hook ------------------------------------------------------------------------------------------

def _hook_pattern(hook_id: str) -> re.Pattern[str]:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text("utf-8"))
    return re.compile(next(h for h in hooks if h["id"] == hook_id)["files"])


def test_build_check_hook_runs_when_any_file_the_build_reads_changes() -> None:
    """Mod files are written into out/ (inline configs), a build context decides the `build:` section: a change
    to them makes out/ stale, so the hook must run. Paths as a project keeping recipes lays them out."""
    pattern = _hook_pattern("recipegen-build-check")
    golden = ROOT / "tests" / "golden"
    read = [p.relative_to(case).as_posix() for case in golden.iterdir() if case.is_dir()
            for p in case.rglob("*") if p.is_file() and "expected" not in p.relative_to(case).parts]
    read += ["recipes/x/recipe.toml", "recipes/x/mods/fix/run.sh", "mods/fix/patch.diff", "cluster.toml",
             "templates/compose.yaml.j2", "out/x/spark1/compose.yaml", "images/x/Dockerfile"]
    missed = sorted({p for p in read if not pattern.search(p)})
    assert not missed, f"the build-check hook's `files` misses: {missed}"


# --- where the name shows -----------------------------------------------------------------------------------------

def test_the_name_shows_where_the_schema_says(tmp_path: Path) -> None:
    """The schema says `name` shows in the header, as a container label and in `recipegen ps`'s title (which
    reads that label from out/)."""
    import tomllib

    from generator.deploy.targets import Deployment, Target, display_name
    from generator.resolve.model import Node
    from generator.write.verify import read_yaml

    assert "header" in SCHEMAS["recipe"]["properties"]["name"]["description"]
    for recipe in sorted((ROOT / "recipes").glob("*/recipe.toml")):
        name = tomllib.loads(recipe.read_text("utf-8")).get("name")
        if name is None:
            continue
        files = sorted((ROOT / "out" / recipe.parent.name).glob("*/compose.yaml"))
        assert files, recipe
        for file in files:
            text = file.read_text("utf-8")
            assert f"# {name}: node {file.parent.name}," in text.splitlines()[3]
            assert read_yaml(text)["services"]["engine"]["labels"]["dev.recipegen.name"] == name
        node = Node(index=0, name=files[0].parent.name, address="10.0.0.1", context="c", ssh_host="h", user="root",
                    home="/root", env={})
        deployment = Deployment(recipe.parent.name, None, ROOT / "out", (Target(node, files[0]),))  # type: ignore[arg-type]
        assert display_name(deployment) == name
