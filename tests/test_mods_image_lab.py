"""Issue 29, mods of any size, through the real lab: a mod no compose file can carry (1.6 MiB, binary, as
inkling-small's is) travels in an image built `FROM docker_image` plus the mod's folder. `recipegen up` (Compose
builds it on each node from the folder the mod sits in, through the Docker API), the mod runs on every rank with
its bytes intact; a base image that moved makes the mods' image stale, which preflight says and `recipegen images`
repairs; Swarm builds nothing, so `up --swarm` asks for `recipegen images` and then runs."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from lab import IMAGE, Lab
from helpers.deploylab import SERVED, containers, models, put_model, run, vllm_recipe

pytestmark = pytest.mark.lab

BASE = "recipegen-lab/engine:mods-base"  # the recipe's docker_image: a tag of the lab image this test may move
RID = "bigmods"
RUN_SH = """#!/bin/sh
set -e
# the blob's digest, as the rank sees it: the bytes arrived whole
echo "mod bigmod: $(python3 -c "import hashlib; print(hashlib.sha256(open('blob.bin', 'rb').read()).hexdigest())")"
"""


@pytest.fixture
def project(tmp_path: Path, clean_lab: Lab):
    lab = clean_lab
    nodes = lab.nodes[:2]
    lab.alias_image(BASE, nodes=nodes)
    mod = tmp_path / "recipes" / RID / "mods" / "bigmod"
    mod.mkdir(parents=True)
    blob = os.urandom(1_600_000)  # past the 1 MiB a mod may carry inline, and not UTF-8 text
    (mod / "blob.bin").write_bytes(blob)
    (mod / "run.sh").write_text(RUN_SH)  # not executable on disk: the image makes it so, as the inline form does
    recipe = vllm_recipe(2).replace(f'docker_image = "{IMAGE}"', f'docker_image = "{BASE}"')
    recipe = recipe.replace("[[extra_mounts]]", 'mods = ["mods/bigmod"]\n\n[[extra_mounts]]', 1)
    (tmp_path / "recipes" / RID / "recipe.toml").write_text(recipe)
    lab.write_cluster(tmp_path / "cluster.toml", nodes)
    put_model(lab, nodes)
    run(lab, tmp_path, "build", check=True)
    yield tmp_path, hashlib.sha256(blob).hexdigest()
    run(lab, tmp_path, "down", RID)
    run(lab, tmp_path, "down", "--swarm", RID)
    lab.leave_swarm()
    for node in nodes:
        for ref in lab.docker(node, "images", "--format", "{{.Repository}}:{{.Tag}}",
                              "recipegen.invalid/mods").stdout.split() + [BASE]:
            lab.docker(node, "rmi", "-f", ref, check=False)


def mods_image(root: Path) -> str:
    text = (root / "out" / RID / "spark1" / "compose.yaml").read_text()
    return next(line.split('"')[1] for line in text.splitlines() if line.strip().startswith("image:"))


def rank_logs(lab: Lab, node) -> str:
    rows = containers(lab, node, RID)
    assert len(rows) == 1, rows
    done = lab.docker(node, "logs", rows[0]["ID"], check=False)
    return done.stdout + done.stderr


def test_a_mod_no_compose_file_can_carry_runs_on_every_rank_from_its_image(project, clean_lab: Lab):
    lab = clean_lab
    root, digest = project
    nodes = lab.nodes[:2]
    out = root / "out" / RID
    tag = mods_image(root)
    assert tag.startswith(f"recipegen.invalid/mods:{RID}-")
    for path in (out / "spark1" / "compose.yaml", out / "spark2" / "compose.yaml", out / "stack.yaml"):
        assert path.stat().st_size < 64 * 1024  # the mod is not in the committed files, only its image's recipe

    # Compose builds the image on each node where it is missing (pull_policy never: nothing is pulled by that
    # name), from recipes/bigmods/mods sent through the Docker API; the mod runs on both ranks, its bytes whole.
    up = run(lab, root, "up", RID, "--timeout", "120")
    assert up.returncode == 0, up.stdout + up.stderr
    assert SERVED in models(f"http://{nodes[0].address}:8000")
    for node in nodes:
        assert f"mod bigmod: {digest}" in rank_logs(lab, node), node.name
        assert lab.docker(node, "image", "inspect", tag, check=False).returncode == 0
    # Built on each node separately, yet from the same base: a second `up` finds nothing to object to.
    again = run(lab, root, "up", RID, "--timeout", "120")
    assert again.returncode == 0, again.stdout + again.stderr

    # The base tag moves on spark2 (a rebuilt or pulled image): its mods' image would run the old base.
    context = root / "newer-base"
    context.mkdir()
    (context / "marker").write_text("a newer base\n")
    (context / "Dockerfile").write_text(f"FROM {IMAGE}\nCOPY marker /marker\n")
    subprocess.run(["docker", "--context", nodes[1].context, "build", "-q", "-t", BASE, str(context)],
                   env={**lab.env, "DOCKER_BUILDKIT": "0"}, check=True, capture_output=True, timeout=120)
    assert run(lab, root, "down", RID).returncode == 0
    stale = run(lab, root, "up", RID, "--timeout", "60")
    assert stale.returncode == 1, stale.stdout + stale.stderr
    assert f"spark2: preflight: the mods' image {tag} was built from an older {BASE}" in \
        stale.stderr, stale.stderr
    assert containers(lab, nodes[0], RID) == [] and containers(lab, nodes[1], RID) == []
    images = run(lab, root, "images", RID)
    assert images.returncode == 0, images.stdout + images.stderr
    assert "spark2: built" in images.stdout and "spark1: present" in images.stdout, images.stdout
    healed = run(lab, root, "up", RID, "--timeout", "120")
    assert healed.returncode == 0, healed.stdout + healed.stderr
    assert run(lab, root, "down", RID).returncode == 0

    # Swarm builds no image: with the mods' image gone from spark2, `up --swarm` refuses before deploying and
    # names the command; after `recipegen images` the stack runs the mod on both ranks.
    lab.docker(nodes[1], "rmi", "-f", tag)
    assert run(lab, root, "swarm", "setup", "--init").returncode == 0
    refused = run(lab, root, "up", "--swarm", RID, "--timeout", "60")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "spark2: preflight: " in refused.stderr and "Swarm builds no image" in \
        refused.stderr and "recipegen images" in refused.stderr, refused.stderr
    images = run(lab, root, "images", RID)
    assert images.returncode == 0 and "spark2: built" in images.stdout, images.stdout + images.stderr
    swarm = run(lab, root, "up", "--swarm", RID, "--timeout", "120")
    assert swarm.returncode == 0, swarm.stdout + swarm.stderr
    for node in nodes:
        assert f"mod bigmod: {digest}" in rank_logs(lab, node), node.name
