"""`recipegen import` given what a hostile or careless peer folder holds (issue 30): a link out of a mod folder,
a YAML alias bomb or a huge document, two imports of one id at once, an id with a newline. Each is one line
naming the file and nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_import import project, run, tree, write  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parent.parent
PLAIN = "model: a/b\ncontainer: i\nmods: [fix-a]\ncommand: vllm serve {model}\n"


@pytest.mark.parametrize("link", ["file", "folder", "relative-out"])
def test_a_symlink_in_a_mod_folder_is_refused_naming_it_and_nothing_is_written(project, link):
    secret = write(project / "home" / ".ssh" / "id_rsa", "PRIVATE KEY\n")
    mod = project / "peer" / "mods" / "fix-a"
    write(mod / "run.sh", "#!/bin/sh\n")
    if link == "file":
        (mod / "key.patch").symlink_to(secret)
    elif link == "folder":
        (mod / "key.patch").symlink_to(secret.parent, target_is_directory=True)
    else:
        (mod / "key.patch").symlink_to("../../../home/.ssh/id_rsa")
    f = write(project / "peer" / "m.yaml", PLAIN)
    before = tree(project)
    for args in (["--dry-run"], []):
        result = run("import", *args, str(f))
        assert result.exit_code == 1, result.output
        assert len(result.stderr.splitlines()) == 1 and "key.patch" in result.stderr and "symlink" in result.stderr
        assert "PRIVATE KEY" not in result.output
    assert tree(project) == before and not list(project.glob(".recipegen-import-*"))


def test_a_link_inside_the_mod_folder_is_copied_as_build_reads_it(project):
    """build accepts a link that stays inside the mod (it reads the file linked to): so does import."""
    mod = project / "peer" / "mods" / "fix-a"
    write(mod / "run.sh", "#!/bin/sh\n").chmod(0o755)
    write(mod / "a.patch", "patch\n")
    (mod / "b.patch").symlink_to("a.patch")
    f = write(project / "peer" / "m.yaml", PLAIN)
    assert run("import", str(f)).exit_code == 0
    copied = project / "recipes" / "m" / "mods" / "fix-a" / "b.patch"
    assert not copied.is_symlink() and copied.read_text() == "patch\n"
    assert os.access(project / "recipes" / "m" / "mods" / "fix-a" / "run.sh", os.X_OK)


BOMB = "".join(f"  {c}: &{c} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['lol'] * 9)}]\n"
               for p, c in zip(["", *"abcdefgh"], "abcdefghi"))


@pytest.mark.parametrize("text", [
    f"model: a/b\ncontainer: i\ncommand: vllm serve {{model}}\nenv:\n{BOMB}",
    f"model: a/b\ncontainer: i\ncommand: vllm serve {{model}}\nenv:\n  A: &r [1, *r]\n",  # a loop
    "model: a/b\ncontainer: i\ncommand: vllm serve {model}\nenv:\n  A: '" + "x" * (11 * 1024 * 1024) + "'\n",
], ids=["bomb", "loop", "huge"])
def test_an_alias_bomb_or_a_huge_document_is_refused_quickly_in_one_line(project, text):
    """Run as a child with its memory capped: without a bound the bomb took gigabytes and minutes."""
    f = write(project / "peer" / "bomb.yaml", text)
    before = tree(project)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
            "from generator.cli import main; sys.argv = ['recipegen', 'import', '--dry-run', sys.argv[1]]; main()")
    result = subprocess.run([sys.executable, "-c", code, str(f)], capture_output=True, text=True, timeout=30,
                            cwd=project, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 1, result.stderr[-2000:]
    assert len(result.stderr.splitlines()) == 1 and "bomb.yaml" in result.stderr, result.stderr[-2000:]
    assert tree(project) == before


def _racing(project: Path, argv: list[str], n: int = 2) -> list[subprocess.CompletedProcess[str]]:
    """`recipegen ARGV` started n times at once, each a process of its own."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-m", "generator", *argv], cwd=project, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(n)]
    return [subprocess.CompletedProcess(p.args, p.wait(60), *p.communicate()) for p in procs]


def test_two_imports_of_one_id_started_together_one_wins_the_other_is_refused(project):
    """The id is checked at the swap, not only before staging: never both exit 0, the second replacing the
    first. A mod of many files makes the staging (the window between check and swap) long."""
    mod = project / "peer" / "mods" / "fix-a"
    write(mod / "run.sh", "#!/bin/sh\n")
    for n in range(300):
        write(mod / f"p{n}.patch", f"{n}\n")
    f = write(project / "peer" / "m.yaml", PLAIN)
    for round_ in range(4):
        results = _racing(project, ["import", "--id", "x", str(f)])
        codes = sorted(r.returncode for r in results)
        assert codes == [0, 1], (round_, [(r.returncode, r.stderr) for r in results])
        loser = next(r for r in results if r.returncode == 1)
        assert "a recipe with this id exists" in loser.stderr and len(loser.stderr.splitlines()) == 1
        assert sorted(p.name for p in (project / "recipes").iterdir()) == ["x"]
        assert not list(project.glob(".recipegen-import-*"))
        (project / "recipes" / "x" / "recipe.toml").unlink()
        for p in sorted((project / "recipes" / "x").rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        (project / "recipes" / "x").rmdir()


def test_two_cluster_imports_started_together_one_wins(project):
    (project / "cluster.toml").unlink()
    env = write(project / "e" / ".env", "CLUSTER_NODES=10.0.0.1,10.0.0.2\n")
    for round_ in range(10):  # the window is short: without the check at the write, some round has two winners
        results = _racing(project, ["import", str(env)])
        assert sorted(r.returncode for r in results) == [0, 1], [(r.returncode, r.stderr) for r in results]
        (project / "cluster.toml").unlink()


@pytest.mark.parametrize("text, line, key, words", [
    ("recipe_version: '1'\nname: n\ncontainer: c\ncommand: vllm serve {0}\n", 4, "command",
     ("positional placeholder", "name it")),
    ("model: a/b\ncontainer: i\ncommand: FOO=$(whoami) vllm serve {model}\n", 3, "command",
     ("'FOO=$(whoami)'", "runs no shell", "env")),
    ("recipe_version: '1'\nname: n\ncontainer: c\ndefaults:\n  x: [a, b]\ncommand: vllm serve m --x {x}\n", 5,
     "defaults.x", ("is a list", "{x}")),
    ("model: a/b\ncontainer: i\ndefaults:\n  x: {k: v}\ncommand: vllm serve {model} --x {x}\n", 4, "defaults.x",
     ("is a mapping", "{x}")),
], ids=["positional", "assignment-with-a-shell", "eugr-list-default", "sparkrun-mapping-default"])
def test_a_command_the_import_cannot_carry_is_one_line_saying_why(project, text, line, key, words):
    f = write(project / "peer" / "x.yaml", text)
    result = run("import", "--dry-run", str(f))
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.output
    assert f"x.yaml:{line}:1: error: {key}: " in result.stderr, result.stderr
    assert all(w in result.stderr for w in words), result.stderr
    assert "Replacement index" not in result.stderr and "not a serve command" not in result.stderr


def test_an_unknown_sparkrun_key_is_not_called_runtime_config(project):
    f = write(project / "peer" / "x.yaml", "model: a/b\ncontainer: i\ninclude: other.yaml\n"
              "command: vllm serve {model}\n")
    result = run("import", "--dry-run", str(f))
    line = next(line for line in result.stderr.splitlines() if ": include: " in line)
    assert line.startswith("peer/x.yaml:3:1: warning[not-carried]: include: ") and "runtime_config" not in line


def test_a_dot_env_error_names_the_key_and_line_the_file_has(project):
    f = project / "e" / ".env"
    f.parent.mkdir()
    f.write_text("CLUSTER_NODES=10.0.0.1\nCONTAINER_X=a\x00b\n")
    result = run("import", "--dry-run", str(f))
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.output
    assert "e/.env:2:1: error: CONTAINER_X: " in result.stderr, result.stderr
    f.write_text("# no nodes\n")
    result = run("import", "--dry-run", str(f))
    assert result.exit_code == 1 and result.stderr.startswith("e/.env: error: no CLUSTER_NODES"), result.stderr
