"""`mount-target` refuses an extra mount over any container path recipegen itself writes. The paths are not
listed here: each variant is built, and every path its compose files and Swarm stack write into the container
(configs' targets, the launcher's own writes) is read from the output; a mount on that path, or on the folder
holding it, must be refused by `validate`, and the same recipe without that mount passes."""

from __future__ import annotations

import posixpath
import re
import subprocess
import sys
from pathlib import Path

import pytest

from generator.write.verify import read_yaml
from helpers.lint import CLUSTER, findings, validate

BASE = 'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.34.0"\nmodel = "Qwen/Qwen3-32B"\n'
RAY = BASE + 'required_nodes = 2\npipeline_parallel_size = 2\ndistributed_backend = "ray"\n'
VARIANTS = {
    "mods-and-setup": BASE + 'mods = ["fix"]\nsetup = ["true"]\n',
    "setup-only": BASE + 'setup = ["true"]\n',
    "ray": RAY,
    "ray-non-root": RAY + 'container_user = "1000"\nmods = ["fix"]\n',
    "ray-config-root": RAY + '[env]\nVLLM_CONFIG_ROOT = "/etc/vllm-config"\n',
    "ray-xdg": RAY + '[env]\nXDG_CONFIG_HOME = "/srv/xdg"\n',
}
# What the launcher writes itself: its mark, and (in the stack) every file it carries.
LAUNCHER_WRITES = re.compile(r"(?:recipegen_prepared=|> |mkdir -p )'?(/[^\s';&]+)")


def _recipe(tmp_path: Path, name: str, text: str) -> Path:
    folder = tmp_path / "recipes" / name
    (folder / "fix").mkdir(parents=True, exist_ok=True)
    (folder / "fix" / "run.sh").write_text("#!/bin/sh\necho fixed\n")
    (folder / "fix" / "patch.diff").write_text("--- a\n+++ b\n")
    (folder / "recipe.toml").write_text(text, "utf-8")
    return folder / "recipe.toml"


def _written(tmp_path: Path, recipe: Path) -> set[str]:
    """Every container path the built files write: the configs' targets and the launchers' own writes."""
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "generator", "build", str(recipe), "--cluster", str(CLUSTER),
                          "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    paths: set[str] = set()
    for file in out.rglob("*.yaml"):
        text = file.read_text("utf-8")
        data = read_yaml(text)
        for service in data["services"].values():
            paths |= {c["target"] for c in service.get("configs", [])}
        paths |= set(LAUNCHER_WRITES.findall(text.replace("$$", "$")))
    return {p for p in paths if not p.startswith("$")}


def _mounted(text: str, target: str) -> str:
    mount = f'[[extra_mounts]]\nhost = "/srv/x"\ncontainer = "{target}"\n'
    head, sep, env = text.partition("[env]\n")
    return head + mount + (sep + env if sep else "")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_mount_over_any_path_recipegen_writes_is_refused(variant: str, tmp_path: Path) -> None:
    text = VARIANTS[variant]
    recipe = _recipe(tmp_path, variant, text)
    clean = validate(recipe)
    assert clean.exit_code == 0, clean.stderr
    written = _written(tmp_path, recipe)
    assert written, "the build wrote nothing into the container"
    targets = written | {posixpath.dirname(p) for p in written}
    missed = []
    for target in sorted(targets):
        recipe.write_text(_mounted(text, target), "utf-8")
        found = [(f.rule, f.key) for f in findings(validate(recipe)) if f.severity == "error"]
        if ("mount-target", "extra_mounts") not in found:
            missed.append(target)
    assert not missed, f"mounts over paths recipegen writes pass validate: {missed} (it writes {sorted(written)})"


@pytest.mark.parametrize("text, target, refused", [
    (BASE, "/workspace/mods", True),  # the case: where recipegen puts mods, whether or not it has any
    (BASE, "/workspace/mods/x", True),
    (BASE, "/workspace", False),  # NGC images' working folder: free while no mods go there
    (BASE + 'mods = ["fix"]\n', "/workspace", True),
    (BASE, "/tmp", False),  # the launcher's mark is written only with setup or mods
    (BASE + 'setup = ["true"]\n', "/tmp", True),
    (RAY, "/root/.config/vllm", True),  # the case: vLLM's Ray settings file is written there
    (RAY, "/root/.config", True),
    (RAY, "/root/.config/vllm2", False),
    (RAY, "/root/.cache/vllm", False),  # eugr's cache mount stays fine
    (BASE, "/root/.config/vllm", False),  # one node: no settings file
    (RAY.replace('"ray"', '"mp"'), "/root/.config/vllm", False),
])
def test_mount_target_cases(text: str, target: str, refused: bool, tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, "case", _mounted(text, target))
    found = [(f.rule, f.key) for f in findings(validate(recipe, "--strict"))]
    assert (("mount-target", "extra_mounts") in found) == refused, found
