"""`recipegen import`: the peer-corpus comparison of imported recipes is in tests/test_peers.py (variant
"import"); here the command itself: validation of what it writes, byte-stable output, eugr's rendering and Ray
choice, every key carried or named, and bad input refused with one line and nothing written."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generator.cli import main
from helpers.importing import PEERS, ROOT, run, tree, write  # noqa: F401 - moved to tests/helpers/

ORIGINALS = sorted((c, json.loads((c / "peer.json").read_text())["original"]["file"]) for c in PEERS.iterdir()
                   if (c / "peer.json").is_file() and "original" in json.loads((c / "peer.json").read_text()))


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "recipes").mkdir()
    shutil.copytree(ROOT / "schema", tmp_path / "schema")  # the recipes' #:schema directive reaches it
    shutil.copy(PEERS / "cluster.toml", tmp_path / "cluster.toml")
    (tmp_path / "cluster.toml").write_text((PEERS / "cluster.toml").read_text().replace("../../schema", "./schema"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def peer_home(monkeypatch, case: Path, copied: Path) -> None:
    """HOME as the case says (its home/ holds sparkrun's checkout of eugr's registry), else an empty one."""
    original = json.loads((case / "peer.json").read_text())["original"]
    monkeypatch.setenv("HOME", str(copied / original["home"]) if "home" in original else str(copied / ".no-home"))


@pytest.mark.parametrize("folder,original", ORIGINALS, ids=[c.name for c, _ in ORIGINALS])
def test_imported_recipe_validates_and_a_second_import_gives_the_same_bytes(project, monkeypatch, folder, original):
    shutil.copytree(folder, project / "peer")
    peer_home(monkeypatch, folder, project / "peer")
    result = run("import", "--id", "x", str(project / "peer" / original))
    assert result.exit_code == 0, result.output
    recipe = project / "recipes" / "x" / "recipe.toml"
    first = tree(project / "recipes")
    assert recipe.read_text().startswith("#:schema ../../schema/recipe.schema.json\n")
    checked = run("validate", str(recipe))
    assert checked.exit_code == 0, checked.output
    assert " error" not in checked.output
    assert run("import", "--force", "--id", "x", str(project / "peer" / original)).exit_code == 0
    assert tree(project / "recipes") == first
    assert run("build", "x").exit_code == 0


def test_every_value_names_its_source_key(project):
    f = write(project / "peer" / "m.yaml", "recipe_version: '2'\nmodel: a/b\ncontainer: img:1\nmin_nodes: 2\n"
              "defaults:\n  tensor_parallel: 2\n  max_model_len: 4096\n"
              "command: vllm serve {model} -tp {tensor_parallel} --max-model-len {max_model_len}\n")
    text = run("import", "--dry-run", str(f)).output
    lines = [l for l in text.splitlines() if " = " in l and not l.startswith("#")]
    assert lines and all("  # " in l for l in lines if not l.startswith("args")), text
    assert 'docker_image = "img:1"  # m.yaml: container' in text
    assert "tensor_parallel_size = 2  # m.yaml: command" in text
    assert "--max-model-len 4096" in text and "-tp" not in text.split("args", 1)[1]
    assert not (project / "recipes" / "m").exists()  # --dry-run writes nothing


def test_sparkrun_keeps_unresolved_placeholders_and_json_braces_and_names_what_has_no_home(project):
    f = write(project / "peer" / "r.yaml", """\
recipe_version: "2"
model: a/b
container: img:1
defaults:
  port: 8000
  spec: '{"method": "mtp"}'
command: |
  vllm serve {model} --port {port} \\
    --speculative-config '{spec}' \\
    --served-model-name {name}
post_exec:
  - echo done
benchmark:
  framework: llama-benchy
builder: eugr
""")
    result = run("import", "--dry-run", str(f))
    assert result.exit_code == 0, result.output
    data = tomllib.loads(result.stdout)
    assert "--speculative-config '{\"method\": \"mtp\"}'" in data["args"][0]
    assert "{name}" in data["args"][0]  # sparkrun leaves a key without a value as written
    for key in ("post_exec", "builder", "command"):
        assert f"warning[not-carried]: {key}:" in result.stderr, key
    assert data["bench"] == {"framework": "llama-benchy"}  # the recipe schema has [bench]: carried, not named
    assert "r.yaml:11:" in result.stderr  # post_exec's line
    assert data["env"] == {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # solo: the common pair only


EUGR = """\
recipe_version: "1"
name: Test
container: vllm-node
build_args: ["-f", "Dockerfile.x"]
defaults:
  tensor_parallel: 2
  port: 8000
env:
  VLLM_X: "1"
command: |
  vllm serve org/model \\
      --port {port} \\
      -tp {tensor_parallel} \\
      --distributed-executor-backend ray \\
      --compilation-config '{{"cudagraph_mode": "FULL"}}'
"""


def test_eugr_renders_with_str_format_and_runs_without_ray_by_default(project):
    f = write(project / "peer" / "e.yaml", EUGR)
    result = run("import", "--dry-run", str(f))
    assert result.exit_code == 0, result.output
    data = tomllib.loads(result.stdout)
    assert data["distributed_backend"] == "mp" and data["required_nodes"] == 2 and data["tensor_parallel_size"] == 2
    assert data["model"] == "org/model" and data["entrypoint"] == ["vllm", "serve"]
    assert "'{\"cudagraph_mode\": \"FULL\"}'" in data["args"][0]  # {{ }} are literal braces to str.format
    assert "--distributed-executor-backend" not in data["args"][0] and "ray_args" not in data
    # mainline launch-cluster.sh (@013cd2ea): DOCKER_ARGS' two variables, and get_env_flags' Ray variables
    assert data["env"] == {"VLLM_X": "1", "NCCL_IGNORE_CPU_AFFINITY": "1",
                           "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "RAY_memory_monitor_refresh_ms": "0",
                           "RAY_num_prestart_python_workers": "0", "RAY_object_store_memory": "1073741824"}
    # its four cache folders, at root's
    assert data["extra_mounts"] == [{"host": f"~/{p}", "container": f"/root/{p}"}
                                    for p in (".cache/vllm", ".cache/flashinfer", ".triton", ".tilelang")]
    assert "eugr/spark-vllm-docker @013cd2ea" in result.stdout.splitlines()[1]  # the header names the commit
    assert "warning[not-carried]: build_args:" in result.stderr and "e.yaml:4:" in result.stderr


def test_eugr_solo_run_gets_the_launchers_variables_too(project):
    f = write(project / "peer" / "e.yaml", EUGR.replace("tensor_parallel: 2", "tensor_parallel: 1"))
    data = tomllib.loads(run("import", "--dry-run", str(f)).stdout)
    assert data["required_nodes"] == 1 and "distributed_backend" not in data
    # @013cd2ea's get_env_flags has no solo branch: a solo container gets the same variables
    assert data["env"] == {"VLLM_X": "1", "NCCL_IGNORE_CPU_AFFINITY": "1",
                           "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "RAY_memory_monitor_refresh_ms": "0",
                           "RAY_num_prestart_python_workers": "0", "RAY_object_store_memory": "1073741824"}


def test_eugr_solo_recipe_runs_tensor_parallel_1_as_run_recipe_does(project):
    """run-recipe.py's solo rule: overrides tensor_parallel=1 unless --tp is given, so a solo_only recipe whose
    defaults say 2 runs -tp 1 on its one node, and the import validates and builds."""
    f = write(project / "peer" / "e.yaml", EUGR.replace("defaults:\n", "solo_only: true\ndefaults:\n"))
    result = run("import", str(f))
    assert result.exit_code == 0, result.output
    data = tomllib.loads((project / "recipes" / "e" / "recipe.toml").read_text("utf-8"))
    assert data["required_nodes"] == 1 and data["tensor_parallel_size"] == 1
    assert run("validate", str(project / "recipes" / "e" / "recipe.toml")).exit_code == 0
    assert run("build", "e").exit_code == 0


def test_eugr_solo_recipe_with_a_fixed_tp_is_refused_naming_the_rule(project):
    f = write(project / "peer" / "e.yaml",
              EUGR.replace("defaults:\n", "solo_only: true\ndefaults:\n").replace("{tensor_parallel}", "2"))
    result = run("import", str(f))
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1
    assert "solo" in result.stderr and "parallel 2" in result.stderr
    assert not (project / "recipes" / "e").exists()


def test_eugr_cluster_keeps_the_nodes_the_command_asks_for(project):
    """launch-cluster.sh trims the nodes to tp x pp x dp read from the command, whatever the defaults say."""
    f = write(project / "peer" / "e.yaml", EUGR.replace("-tp {tensor_parallel}", "-tp {tensor_parallel} -pp 2"))
    result = run("import", "--dry-run", str(f))  # the project's cluster has 2 nodes: refused, as build would
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.output
    assert "error[too-many-nodes]" in result.stderr and "e.yaml:" in result.stderr
    (project / "cluster.toml").unlink()  # no cluster yet: nothing to judge the node count by
    data = tomllib.loads(run("import", "--dry-run", str(f)).stdout)
    assert data["required_nodes"] == 4 and data["pipeline_parallel_size"] == 2


@pytest.mark.parametrize("kind", ["text", "binary"])
def test_a_mod_too_large_for_the_compose_files_imports_into_an_image(project, kind):
    """eugr's large mods (the diffusion-gemma ones: a 229 KiB Swarm launcher; inkling-small's 1.6 MiB): the peer
    copies them in with `docker cp`, so the import carries them in an image built from the recipe's image
    (`mods_transport = "image"`), the files copied byte for byte, and build writes the image's build, not the files."""
    if kind == "text":  # ~200 KiB: under the 1 MiB a mod may hold inline, past the Swarm launcher's 128 KiB
        data = ("#!/bin/sh\n" + "".join(f"echo {i:06d} {'x' * 90}\n" for i in range(2000))).encode()
        files = {"run.sh": data}
    else:  # a binary file past 1 MiB, which no YAML file carries
        data = bytes(range(256)) * 6400
        files = {"run.sh": b"#!/bin/sh\ncmp weights.bin /dev/null || true\n", "weights.bin": data}
    for name, content in files.items():
        target = project / "peer" / "mods" / "huge" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    f = write(project / "peer" / "h.yaml", EUGR.replace("tensor_parallel: 2", "tensor_parallel: 1")
              .replace("defaults:\n", "mods:\n  - mods/huge\ndefaults:\n"))
    result = run("import", str(f))
    assert result.exit_code == 0, result.output
    recipe = tomllib.loads((project / "recipes" / "h" / "recipe.toml").read_text())
    assert recipe["mods"] == ["mods/huge"] and recipe["mods_transport"] == "image"
    assert tree(project / "recipes" / "h" / "mods" / "huge") == files
    built = run("build")
    assert built.exit_code == 0, built.output
    compose = (project / "out" / "h" / "spark1" / "compose.yaml").read_text()
    assert "dockerfile_inline: |\n        FROM " in compose and "COPY huge /workspace/mods/huge\n" in compose
    assert "context: \"../../../recipes/h/mods\"" in compose
    assert "x" * 90 not in compose and "x" * 90 not in (project / "out" / "h" / "stack.yaml").read_text()


def test_eugr_ray_flag_keeps_ray(project):
    f = write(project / "peer" / "e.yaml", EUGR)
    data = tomllib.loads(run("import", "--ray", "--dry-run", str(f)).stdout)
    assert data["distributed_backend"] == "ray"  # launch-cluster.sh's `ray start` options (the head-only one: head)
    assert data["ray_args"] == ["--object-store-memory", "1073741824", "--num-cpus", "2", "--disable-usage-stats",
                                "--include-dashboard=false"]
    assert data["env"]["RAY_memory_monitor_refresh_ms"] == "0"


def test_eugr_placeholder_without_default_is_an_error_on_its_line(project):
    f = write(project / "peer" / "e.yaml", EUGR.replace("--port {port}", "--port {missing}"))
    result = run("import", str(f))
    assert result.exit_code == 1
    assert "e.yaml:10:" in result.stderr and "'missing'" in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (project / "recipes" / "e").exists()


@pytest.mark.parametrize("text,where", [
    ("recipe_version: '2'\nmodel: [a\n", "x.yaml:3:"),  # not YAML: the line where it stops being YAML
    ("recipe_version: '7'\nmodel: a\n", "x.yaml:1:"),  # a foreign version
    ("- a\n- b\n", "x.yaml:1:"),  # not a mapping
    ("recipe_version: '2'\nmodel: a\ncontainer: i\ncommand: llama-server -m x\n", "x.yaml:4:"),
    ("registries:\n  - name: official\n", "x.yaml:1:1: error: not an eugr or sparkrun recipe"),  # a manifest
    ("recipe_version: '1'\nname: n\ncontainer: c\ncommand: vllm serve {a.b}\ndefaults: {a: 1}\n", "x.yaml:4:"),
    ("recipe_version: '1'\nname: n\ncontainer: c\ncommand: vllm serve {0}\n", "x.yaml:4:"),
    ("model: m\ncontainer: c\nmods: [a, a]\ncommand: vllm serve m\n", "x.yaml:3:"),
])
def test_malformed_or_foreign_file_is_one_line_and_nothing_written(project, text, where):
    f = write(project / "peer" / "x.yaml", text)
    before = tree(project)
    result = run("import", str(f))
    assert result.exit_code == 1
    assert len(result.stderr.splitlines()) == 1 and where in result.stderr, result.stderr
    assert tree(project) == before


def test_never_overwrites_without_force_and_a_failing_file_stops_all(project):
    good = write(project / "peer" / "good.yaml", EUGR)
    bad = write(project / "peer" / "bad.yaml", "recipe_version: '1'\nname: x\n")
    assert run("import", str(good), str(bad)).exit_code == 1
    assert not (project / "recipes" / "good").exists()  # nothing written when any file fails
    assert run("import", str(good)).exit_code == 0
    mine = project / "recipes" / "good" / "recipe.toml"
    mine.write_text("# mine\n")
    result = run("import", str(good))
    assert result.exit_code == 1 and "--force" in result.stderr and mine.read_text() == "# mine\n"
    assert run("import", "--force", str(good)).exit_code == 0 and mine.read_text().startswith("#:schema")


def test_sparkrun_model_revision_is_carried_as_the_engines_revision(project):
    """sparkrun downloads and distributes the model at `model_revision`: the recipe pins it with `--revision`, so
    the engine loads that revision and `recipegen models` copies it; the command's own --revision wins."""
    f = write(project / "peer" / "r.yaml", "recipe_version: '2'\nmodel: a/b\ncontainer: vllm/vllm-openai:v0.34.0\n"
              "model_revision: 0123abcd\ncommand: vllm serve {model} --max-model-len 4096\n")
    result = run("import", str(f))
    assert result.exit_code == 0 and "model_revision" not in result.stderr, result.output
    recipe = project / "recipes" / "r" / "recipe.toml"
    assert tomllib.loads(recipe.read_text())["args"] == [" --max-model-len 4096", "--revision 0123abcd"]
    assert run("validate", "--strict", str(recipe)).exit_code == 0
    from generator.resolve.load import load_recipe
    from generator.transfer.models import revision
    assert revision(load_recipe(recipe)) == "0123abcd"  # what `recipegen models` copies
    own = write(project / "peer" / "o.yaml", f.read_text().replace("4096", "4096 --revision v2"))
    result = run("import", "--dry-run", str(own))
    assert tomllib.loads(result.stdout)["args"] == [" --max-model-len 4096 --revision v2"]
    assert "warning[not-carried]: model_revision: the command's own --revision wins" in result.stderr


def test_an_atlas_recipe_is_refused_naming_its_runtime_and_why(project):
    """Atlas recipes have no command: sparkrun's atlas runtime builds `atlas serve` itself, and Atlas is no vLLM."""
    f = write(project / "peer" / "a.yaml", "recipe_version: '2'\nruntime: atlas\nmodel: a/b\ncontainer: "
              "avarok/atlas-gb10:latest\ndefaults:\n  tensor_parallel: 2\n")
    result = run("import", str(f))
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.output
    assert "a.yaml:2:" in result.stderr and "runtime atlas" in result.stderr and "Atlas" in result.stderr
    assert "not vLLM" in result.stderr and "command: required" not in result.stderr


def test_sparkruns_eugr_vllm_runtime_is_vllm_with_ray(project):
    f = write(project / "peer" / "e.yaml", "recipe_version: '2'\nruntime: eugr-vllm\nmodel: a/b\ncontainer: i\n"
              "defaults:\n  tensor_parallel: 2\ncommand: vllm serve {model} -tp {tensor_parallel}\n")
    data = tomllib.loads(run("import", "--dry-run", str(f)).stdout)
    assert data["engine"] == "vllm" and data["distributed_backend"] == "ray" and data["required_nodes"] == 2


def test_mods_are_found_where_the_peer_finds_them_and_copied(project):
    write(project / "registry" / "mods" / "fix-a" / "run.sh", "#!/bin/sh\necho a\n")
    f = write(project / "registry" / "recipes" / "deep" / "m.yaml",
              "model: a/b\ncontainer: i\nmods: [mods/fix-a]\ncommand: vllm serve {model}\n")
    assert run("import", str(f)).exit_code == 0
    assert (project / "recipes" / "m" / "mods" / "fix-a" / "run.sh").read_text() == "#!/bin/sh\necho a\n"
    twice = write(project / "registry" / "recipes" / "deep" / "t.yaml",
                  "model: a/b\ncontainer: i\nmods: [fix-a, mods/fix-a]\ncommand: vllm serve {model}\n")
    result = run("import", str(twice))
    assert result.exit_code == 1 and "mods[1]" in result.stderr and not (project / "recipes" / "t").exists()
    missing = write(project / "peer" / "n.yaml", "model: a/b\ncontainer: i\nmods: [fix-b]\ncommand: vllm serve x\n")
    result = run("import", str(missing))
    assert result.exit_code == 1 and "fix-b" in result.stderr and "n.yaml:3:" in result.stderr


def test_mods_are_found_in_the_registry_the_file_belongs_to(project):
    reg = project / "registry"
    write(reg / ".sparkrun" / "registry.yaml", "registries:\n  - name: official\n    recipes: official-recipes\n"
          "    mods: official-mods\n  - name: experimental\n    recipes: experimental-recipes\n"
          "    mods: experimental-mods\n")
    write(reg / "official-mods" / "fix-a" / "run.sh", "#!/bin/sh\necho official\n")
    write(reg / "experimental-mods" / "fix-a" / "run.sh", "#!/bin/sh\necho experimental\n")
    f = write(reg / "experimental-recipes" / "x" / "r.yaml",
              "model: a/b\ncontainer: i\nmods: [mods/fix-a]\ncommand: vllm serve {model}\n")
    assert run("import", str(f)).exit_code == 0
    assert (project / "recipes" / "r" / "mods" / "fix-a" / "run.sh").read_text().endswith("experimental\n")


def test_mods_are_found_in_sparkruns_checkout_of_eugr_and_in_mods_dirs(project, monkeypatch):
    """sparkrun's last resort is its registry named eugr (eugr/spark-vllm-docker's mods/), cloned under
    ~/.cache/sparkrun/registries/eugr: looked for there when present, and in every --mods-dir given before it."""
    home = project / "home"
    monkeypatch.setenv("HOME", str(home))
    text = "model: a/b\ncontainer: i\nmods: [mods/fix-a]\ncommand: vllm serve {model}\n"
    f = write(project / "peer" / "m.yaml", text)
    result = run("import", "--dry-run", str(f))  # nowhere yet: one line naming every place looked at
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.output
    for place in (project / "peer" / "fix-a", project / "peer" / "mods" / "fix-a", "mods/fix-a in every parent",
                  home / ".cache" / "sparkrun" / "registries" / "eugr" / "mods" / "fix-a", "--mods-dir"):
        assert str(place) in result.stderr, place
    write(home / ".cache" / "sparkrun" / "registries" / "eugr" / "mods" / "fix-a" / "run.sh", "#!/bin/sh\necho c\n")
    assert run("import", str(f)).exit_code == 0
    assert (project / "recipes" / "m" / "mods" / "fix-a" / "run.sh").read_text().endswith("echo c\n")
    write(project / "eugr" / "mods" / "fix-a" / "run.sh", "#!/bin/sh\necho checkout\n")
    write(project / "flat" / "fix-a" / "run.sh", "#!/bin/sh\necho flat\n")
    assert run("import", "--force", "--mods-dir", str(project / "eugr"), str(f)).exit_code == 0
    assert (project / "recipes" / "m" / "mods" / "fix-a" / "run.sh").read_text().endswith("echo checkout\n")
    assert run("import", "--force", "--mods-dir", str(project / "nothing-here"), str(f)).exit_code == 2
    (project / "nothing-here").mkdir()
    result = run("import", "--force", "--mods-dir", str(project / "nothing-here"), "--mods-dir",
                 str(project / "flat"), str(f))  # repeatable, in order
    assert result.exit_code == 0, result.output
    assert (project / "recipes" / "m" / "mods" / "fix-a" / "run.sh").read_text().endswith("echo flat\n")
    scoped = write(project / "peer" / "s.yaml", text.replace("mods/fix-a", "'@eugr/fix-a'"))
    assert run("import", "--mods-dir", str(project / "flat"), str(scoped)).exit_code == 0


def test_id_from_the_stem_and_usage_errors(project):
    f = write(project / "peer" / "Qwen3.5-122B_fp8.yaml", EUGR)
    assert run("import", str(f)).exit_code == 0
    assert (project / "recipes" / "qwen3-5-122b_fp8" / "recipe.toml").is_file()
    assert run("import", "--id", "a", str(f), str(f)).exit_code == 2
    bad = run("import", "--id", "Bad.Id", str(f))  # a bad option is a usage error, like --id with two FILES
    assert bad.exit_code == 2 and "'Bad.Id' is not a recipe id" in bad.stderr, bad.output


def test_a_secret_in_env_goes_to_pass_env_without_its_value(project):
    f = write(project / "peer" / "s.yaml", "model: a/b\ncontainer: i\nenv:\n"
              "  HF_TOKEN: hf_abcdefghijklmnopqrstuvwxyz0123\n  X: '1'\ncommand: vllm serve {model}\n")
    result = run("import", str(f))
    assert result.exit_code == 0, result.output
    text = (project / "recipes" / "s" / "recipe.toml").read_text()
    assert "hf_abcdefghijklmnopqrstuvwxyz0123" not in text
    assert tomllib.loads(text)["pass_env"] == ["HF_TOKEN"]
    assert "s.yaml:4:" in result.stderr and "HF_TOKEN" in result.stderr


EUGR_ENV = """\
# eugr .env
CLUSTER_NODES="192.168.100.10,192.168.100.11"
ETH_IF=enp1s0f0np0
IB_IF='rocep1s0f0,roceP2p1s0f0'
MASTER_PORT=29600
CONTAINER_NAME=vllm_node
CONTAINER_NCCL_DEBUG=INFO
CONTAINER_HF_TOKEN="hf_abcdefghijklmnopqrstuvwxyz0123"
COPY_HOSTS=x
"""


def test_eugr_env_becomes_the_cluster_file(project):
    (project / "cluster.toml").unlink()
    f = write(project / "eugr" / ".env", EUGR_ENV)
    result = run("import", str(f))
    assert result.exit_code == 0, result.output
    text = (project / "cluster.toml").read_text()
    assert text.startswith("#:schema ./schema/cluster.schema.json\n") and "hf_abcdefghij" not in text
    data = tomllib.loads(text)
    assert [(n["name"], n["address"], n["context"], n["ssh_host"]) for n in data["nodes"]] == [
        ("spark1", "192.168.100.10", "spark1", "192.168.100.10"),
        ("spark2", "192.168.100.11", "spark2", "192.168.100.11")]
    assert "ssh://root@192.168.100.10" in text  # the proposed context, with the schema's default user
    # launch-cluster.sh's one MASTER_PORT: torch's rendezvous without Ray, the Ray head's port with it
    assert data["master_port"] == data["ray_port"] == 29600 and data["pass_env"] == ["HF_TOKEN"]
    assert data["env"]["NCCL_SOCKET_IFNAME"] == data["env"]["GLOO_SOCKET_IFNAME"] == "enp1s0f0np0"
    assert data["env"]["NCCL_IB_HCA"] == "rocep1s0f0,roceP2p1s0f0" and data["env"]["NCCL_DEBUG"] == "INFO"
    assert "COPY_HOSTS" in result.stderr and ".env:9:" in result.stderr
    checked = run("validate", "cluster.toml")
    assert checked.exit_code == 0 and " error" not in checked.output, checked.output
    assert run("import", str(f)).exit_code == 1  # never replaced without --force
    assert run("import", "--force", str(f)).exit_code == 0 and (project / "cluster.toml").read_text() == text


def test_sparkrun_cluster_file_becomes_the_cluster_file(project):
    f = write(project / "c" / "duo.yaml", "name: duo\nhosts: [10.0.0.10, 10.0.0.11]\nuser: spark\n"
              "cache_dir: /data/hf\ntransfer_interface: cx7\ntopology: direct\n")
    result = run("import", "--dry-run", str(f))
    assert result.exit_code == 0, result.output
    data = tomllib.loads(result.stdout)
    assert data["name"] == "duo" and data["user"] == "spark" and data["hf_cache"] == "/data/hf"
    assert [n["address"] for n in data["nodes"]] == ["10.0.0.10", "10.0.0.11"]
    assert "ssh://spark@10.0.0.10" in result.stdout
    for key in ("transfer_interface", "topology", "hosts"):
        assert f"warning[not-carried]: {key}:" in result.stderr
    bad = write(project / "c" / "names.yaml", "name: n\nhosts: [spark1.local]\n")
    refused = run("import", str(bad))
    assert refused.exit_code == 1 and "names.yaml:2:" in refused.stderr and "cluster probe" in refused.stderr


# eugr renders with Python's str.format and hands the text to bash: str.format and bash are the oracle here. Each
# template's words as bash splits them must be the engine argv of the imported recipe's head (flags compared as
# groups, the compiler's spellings mapped), and a leading NAME=value its environment.
EUGR_TEMPLATES = [
    "vllm serve org/m \\\n  --port {port} \\\n  -tp {tensor_parallel} \\\n  --distributed-executor-backend ray \\\n"
    "  --speculative-config '{{\"method\": \"mtp\", \"k\": {{\"a\": 1}}}}' \\\n",
    'VLLM_X=1 vllm serve org/m --tensor-parallel-size={tensor_parallel} --distributed-executor-backend ray '
    '--override-generation-config "{{\\"temperature\\": 0.6}}" --served-model-name "my model" --x a\\ b',
    "vllm serve \\\n    org/m \\\n    --max-model-len {port}   \\\n"
    "    --tensor-parallel-size {tensor_parallel} --distributed-executor-backend ray"
    "\\\n    --enable-prefix-caching",
]


def bash_words(text: str) -> list[str]:
    import subprocess
    out = subprocess.run(["bash", "-c", 'w() { printf "%s\\0" "$@"; }; w ' + text], capture_output=True, check=True)
    return out.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("template", EUGR_TEMPLATES)
def test_eugr_import_runs_the_words_bash_gets_from_eugrs_rendering(project, template):
    from collections import Counter

    from generator.plan.nodes import plan_recipe
    from generator.resolve.argwords import flag_name
    from generator.resolve.load import load_cluster, load_recipe

    defaults = {"port": 8000, "tensor_parallel": 2}  # eugr's node count: tensor x pipeline
    recipe_yaml = {"recipe_version": "1", "name": "t", "container": "vllm-node", "defaults": defaults,
                   "command": template}
    f = write(project / "peer" / "t.yaml", json.dumps(recipe_yaml))  # JSON is YAML
    assert run("import", "--ray", str(f)).exit_code == 0
    plan = plan_recipe(load_recipe(project / "recipes" / "t"), load_cluster(project / "cluster.toml"), project,
                       project / "out")
    words = bash_words(template.format(**defaults))
    env = dict(w.split("=", 1) for w in words[:words.index("vllm")])
    theirs = words[words.index("vllm"):]
    head = plan.nodes[0]
    ours = [a.word for a in head.command]

    def grouped(argv: list[str]) -> Counter:
        spelled = {"-tp": "--tensor-parallel-size"}
        out: list[list[str]] = []
        for word in argv[3:]:  # after `vllm serve MODEL`
            if flag_name(word) is not None or not out:
                name, eq, value = word.partition("=")
                out.append([spelled.get(name, name)] + ([value] if eq and name.startswith("--tensor") else []))
            else:
                out[-1].append(word)
        return Counter(tuple(g) for g in out)

    assert ours[:3] == theirs[:3] == ["vllm", "serve", "org/m"]
    assert grouped(ours) - grouped(theirs) == Counter({("--pipeline-parallel-size", "1"): 1})  # stated default
    assert grouped(theirs) - grouped(ours) == Counter()
    assert {v.name: v.value for v in head.env}.items() >= env.items()


def test_a_mod_that_cannot_be_copied_leaves_nothing(project):
    write(project / "peer" / "mods" / "fix-a" / "run.sh", "#!/bin/sh\n")
    (project / "peer" / "mods" / "fix-a" / "gone.patch").symlink_to(project / "nowhere")
    f = write(project / "peer" / "m.yaml", "model: a/b\ncontainer: i\nmods: [fix-a]\ncommand: vllm serve {model}\n")
    before = tree(project)
    result = run("import", str(f))
    assert result.exit_code == 1 and "gone.patch" in result.stderr and len(result.stderr.splitlines()) == 1
    assert tree(project) == before and not list(project.glob(".recipegen-import-*"))


BENCH_YAML = """\
model: a/b
container: i
command: vllm serve {model}
benchmark:
  framework: llama-benchy
  args:
    pp: [2048, 4096]
    depth: [0]
  tg: 128
  timeout: 0
  schedule:
    - {name: warm, repeat: 2}
  bogus: 1
"""


def test_benchmark_is_named_not_carried_yet_without_a_bench_table(project, monkeypatch):
    monkeypatch.setattr("generator.importers.bench._bench_schema", lambda: None)
    result = run("import", "--dry-run", str(write(project / "peer" / "b.yaml", BENCH_YAML)))
    assert result.exit_code == 0 and "\n[bench]\n" not in result.stdout and "bench" not in tomllib.loads(result.stdout)
    assert "b.yaml:4:1: warning[not-carried]: benchmark: not carried yet" in result.stderr


def test_benchmark_becomes_bench_key_for_key_where_the_schema_has_it(project, monkeypatch):
    count = {"oneOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}}]}
    bench = {"type": "object", "additionalProperties": False, "properties": {
        "framework": {"type": "string"}, "args": {"type": "object"}, "metadata": {"type": "object"},
        "timeout": {"type": "integer", "minimum": 1}, "schedule": {"type": "array", "items": {"type": "object"}},
        "tg": count, "pp": count}}  # the shape of a [bench] table: sparkrun's keys, by name
    monkeypatch.setattr("generator.importers.bench._bench_schema",
                        lambda: {"type": "object", "properties": {"bench": bench}})
    result = run("import", "--dry-run", str(write(project / "peer" / "b.yaml", BENCH_YAML)))
    assert result.exit_code == 0, result.output
    assert tomllib.loads(result.stdout)["bench"] == {
        "framework": "llama-benchy", "args": {"pp": [2048, 4096], "depth": [0]}, "tg": 128,
        "schedule": [{"name": "warm", "repeat": 2}]}
    assert "tg = 128  # b.yaml: benchmark.tg" in result.stdout
    assert "benchmark.bogus: not a [bench] key" in result.stderr
    assert "b.yaml:10:1: warning[not-carried]: benchmark.timeout: [bench] refuses it" in result.stderr


def test_an_imported_benchmark_is_the_recipes_bench_defaults(project):
    """With the real recipe schema: what `bench` will run is what sparkrun's benchmark: said (args win)."""
    from generator.resolve.benchtable import BenchTable
    from generator.resolve.load import load_recipe

    result = run("import", "--dry-run", str(write(project / "peer" / "b.yaml", BENCH_YAML)))
    assert result.exit_code == 0, result.output
    assert "benchmark.bogus: not a [bench] key" in result.stderr
    assert "benchmark.timeout: [bench] refuses" in result.stderr
    recipe = write(project / "recipes" / "b" / "recipe.toml", result.stdout)
    assert load_recipe(recipe).bench == BenchTable(options={"pp": [2048, 4096], "depth": [0], "tg": 128},
                                                   schedule=({"name": "warm", "repeat": 2},))


EUGR_FULL = EUGR.replace("defaults:\n", "description: d\nmodel: org/model\nsolo_only: false\ncluster_only: true\n"
                         "mods: []\nunknown_key: 1\ndefaults:\n  unused: 3\n")


@pytest.mark.parametrize("path", [folder / original for folder, original in ORIGINALS] + ["eugr"],
                         ids=[c.name for c, _ in ORIGINALS] + ["eugr"])
def test_every_key_of_the_file_is_carried_or_named(project, monkeypatch, path):
    import yaml

    if path != "eugr":
        peer_home(monkeypatch, path.parent, path.parent)
    if path == "eugr":
        path = write(project / "peer" / "e.yaml", EUGR_FULL)
    result = run("import", "--dry-run", str(path))
    assert result.exit_code == 0, result.output
    said = "\n".join(line.split("#", 1)[1] for line in result.stdout.splitlines() if "#" in line) + result.stderr
    data = yaml.safe_load(path.read_text())
    silent = [k for k, v in data.items() if k != "recipe_version" and v not in (None, [], {}, "")
              and not re.search(rf"(^|[ (])({re.escape(k)})([:.) ]|$)", said, re.M)]
    silent += [f"defaults.{k}" for k in data.get("defaults") or {}  # each: a placeholder of the command, or named
               if f"{{{k}}}" not in data["command"] and f"defaults.{k}" not in said]
    assert silent == []


_KEYS = ["recipe_version", "name", "model", "container", "command", "defaults", "env", "mods", "min_nodes",
         "max_nodes", "solo_only", "cluster_only", "runtime", "executor_config", "pre_exec", "benchmark", "metadata",
         "build_args", "description", "mode", "runtime_config", "model_revision"]
_VALUES = [None, 1, 0, -1, 2.5, True, "x", "", "1", "2", [], ["a"], [1], {}, {"a": 1}, {"tensor_parallel": "x"},
           {"tensor_parallel": 2, "data_parallel": 2}, {"tensor_parallel": 2},
           "vllm serve {model} -tp {tensor_parallel}",
           "vllm serve m {x}", "python3 -m sglang.launch_server --model-path {model} --tp 2", "vllm serve m -tp 2.5",
           "vllm serve 'open", "{", "vllm serve m --distributed-executor-backend ray \\\n", {"shm_size": 5, "user": 1},
           ["echo hi", {"copy": "x"}], {"framework": 1}, "vllm serve m --x '{{\"a\": 1}}'", {"X": "$HOME"}]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.dictionaries(st.sampled_from(_KEYS), st.sampled_from(_VALUES), min_size=1), ray=st.booleans())
def test_any_file_imports_or_is_refused_with_a_diagnostic_never_a_traceback(tmp_path, data, ray):
    from generator.diagnostics import RecipegenError
    from generator.importers import ImportOptions, convert_file
    from generator.importers.writer import render

    f = tmp_path / "r.yaml"
    f.write_text(json.dumps(data))
    try:
        imported = convert_file(f, ImportOptions(ray=ray))[0]
    except RecipegenError as exc:
        assert all(d.file and d.message for d in exc.diagnostics)
        return
    tomllib.loads(render(imported))  # and what it writes is TOML (render also reads it back, value by value)


def test_sparkrun_pre_exec_is_setup_rendered_as_sparkrun_renders_hooks(project):
    f = write(project / "peer" / "p.yaml", "model: a/b\ncontainer: i\ndefaults:\n  port: 9000\n"
              "pre_exec:\n  - echo {model} {port} {nope}\n  - {copy: /x, dest: /y}\n"
              "command: vllm serve {model} --port {port}\n")
    result = run("import", "--dry-run", str(f))
    assert result.exit_code == 0, result.output
    assert tomllib.loads(result.stdout)["setup"] == ["echo a/b 9000 {nope}"]
    assert "warning[not-carried]: pre_exec[1]: a file copy step" in result.stderr


@pytest.mark.parametrize("bad,line", [("NODES\n", 2), ("9X=1\n", 2), ("ETH_IF=a\n", 2)])
def test_eugr_env_lines_launch_cluster_refuses_are_refused(project, bad, line):
    f = write(project / "e" / ".env", "ETH_IF=enp1\n" + bad + "CLUSTER_NODES=10.0.0.1\n")
    result = run("import", "--dry-run", str(f))
    assert result.exit_code == 1 and f".env:{line}:" in result.stderr and len(result.stderr.splitlines()) == 1


def test_an_env_file_that_is_not_utf8_is_one_line(project):
    f = project / "e" / ".env"
    f.parent.mkdir()
    f.write_bytes(b"CLUSTER_NODES=10.0.0.1\nETH_IF=\xff\n")
    result = run("import", "--dry-run", str(f))
    assert result.exit_code == 1 and ".env: error:" in result.stderr and "UTF-8" in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_a_mod_that_cannot_be_copied_leaves_no_other_file_written(project):
    write(project / "peer" / "mods" / "fix-a" / "run.sh", "#!/bin/sh\n")
    (project / "peer" / "mods" / "fix-a" / "gone.patch").symlink_to(project / "nowhere")
    good = write(project / "peer" / "good.yaml", "model: a/b\ncontainer: i\ncommand: vllm serve {model}\n")
    bad = write(project / "peer" / "m.yaml", "model: a/b\ncontainer: i\nmods: [fix-a]\ncommand: vllm serve {model}\n")
    env = write(project / "e" / ".env", "CLUSTER_NODES=10.0.0.1\n")
    before = tree(project)
    result = run("import", "--force", str(env), str(good), str(bad))
    assert result.exit_code == 1 and "gone.patch" in result.stderr and len(result.stderr.splitlines()) == 1
    assert tree(project) == before and not list(project.glob(".recipegen-import-*"))


@pytest.mark.parametrize("key,line", [("min_nodes", 3), ("max_nodes", 3)])
def test_a_node_count_that_is_no_number_names_its_own_key(project, key, line):
    f = write(project / "peer" / "n.yaml", f"model: a/b\ncontainer: i\n{key}: two\ncommand: vllm serve {{model}}\n")
    result = run("import", "--dry-run", str(f))
    assert result.exit_code == 1 and f"n.yaml:{line}:1: error: {key}:" in result.stderr, result.stderr


def test_runtime_config_keys_are_named_with_their_own_path_and_line(project):
    f = write(project / "peer" / "rc.yaml", "model: a/b\ncontainer: i\nfoo: 0\nruntime_config:\n  foo: 1\n"
              "  bar: 2\ncommand: vllm serve {model}\n")
    result = run("import", "--dry-run", str(f))
    assert result.exit_code == 0, result.output
    assert "rc.yaml:5:1: warning[not-carried]: runtime_config.foo: " in result.stderr, result.stderr
    assert "rc.yaml:6:1: warning[not-carried]: runtime_config.bar: " in result.stderr
    assert "rc.yaml:3:1: warning[not-carried]: foo: " in result.stderr  # the top-level key of the same name too


TOKEN = "hf_abcdefghijklmnopqrstuvwxyz0123"


def test_a_variable_whose_value_is_a_token_goes_to_pass_env_and_the_recipe_validates(project):
    f = write(project / "peer" / "v.yaml", f"model: a/b\ncontainer: i\nenv:\n  MYVAR: {TOKEN}\n"
              "command: vllm serve {model}\n")
    result = run("import", str(f))
    assert result.exit_code == 0, result.output
    text = (project / "recipes" / "v" / "recipe.toml").read_text()
    assert TOKEN not in text and tomllib.loads(text)["pass_env"] == ["MYVAR"]
    checked = run("validate", "v")
    assert checked.exit_code == 0 and "error" not in checked.stderr, checked.stderr


def test_a_container_variable_whose_value_is_a_token_is_not_written_to_the_cluster(project):
    f = write(project / "e" / ".env", f"CLUSTER_NODES=10.0.0.1\nCONTAINER_MYVAR={TOKEN}\n")
    result = run("import", "--dry-run", str(f))
    assert result.exit_code == 0, result.output
    assert TOKEN not in result.stdout and tomllib.loads(result.stdout)["pass_env"] == ["MYVAR"]


@pytest.mark.parametrize("text,key", [
    (f"command: vllm serve {{model}} --api-key {TOKEN}\n", "command"),
    (f"pre_exec:\n  - huggingface-cli login --token {TOKEN}\ncommand: vllm serve {{model}}\n", "pre_exec"),
])
def test_a_token_in_the_command_or_setup_is_refused_and_not_echoed(project, text, key):
    f = write(project / "peer" / "t.yaml", "model: a/b\ncontainer: i\n" + text)
    before = tree(project)
    result = run("import", str(f))
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.output
    assert f": error: {key}: " in result.stderr and TOKEN not in result.output
    assert tree(project) == before


@pytest.mark.parametrize("text,line,key", [
    ("CLUSTER_NODES=10.0.0.1\nMASTER_PORT=99999\n", 2, "MASTER_PORT"),
    ("CLUSTER_NODES=10.0.0.1\nMASTER_PORT=0\n", 2, "MASTER_PORT"),
    ("CLUSTER_NODES=10.0.0.1,10.0.0.2,10.0.0.1\n", 1, "CLUSTER_NODES"),
])
def test_an_env_the_cluster_file_would_refuse_is_one_line_and_nothing_written(project, text, line, key):
    """What the import writes must validate: a port out of range or a node twice is refused at its line."""
    f = write(project / "e" / ".env", text)
    before = tree(project)
    result = run("import", "--force", str(f))
    assert result.exit_code == 1, result.output
    assert f".env:{line}:" in result.stderr and f"error: {key}:" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and tree(project) == before


def test_a_sparkrun_cluster_naming_a_host_twice_is_refused(project):
    f = write(project / "c" / "duo.yaml", "name: duo\nhosts:\n  - 10.0.0.1\n  - 10.0.0.1\n")
    result = run("import", "--dry-run", str(f))
    assert result.exit_code == 1 and "duo.yaml:2:1: error: hosts:" in result.stderr, result.output


@pytest.mark.parametrize("executor,line,key", [("  shm_size: 32gigs\n", 4, "executor_config.shm_size"),
                                               ("  ipc: weird\n", 4, "executor_config.ipc")])
def test_a_value_the_recipe_schema_refuses_is_one_line_at_the_peer_key(project, executor, line, key):
    """The import never writes a recipe validate refuses: a peer value the recipe's schema rejects is named at
    its own line in the peer file."""
    f = write(project / "peer" / "ex.yaml", f"model: a/b\ncontainer: i\nexecutor_config:\n{executor}"
              "command: vllm serve {model}\n")
    before = tree(project)
    result = run("import", str(f))
    assert result.exit_code == 1, result.output
    assert f"ex.yaml:{line}:1: error: {key}: " in result.stderr and len(result.stderr.splitlines()) == 1, \
        result.stderr
    assert tree(project) == before


def test_a_file_inside_the_folder_it_would_replace_is_refused_not_deleted(project):
    f = write(project / "recipes" / "m" / "m.yaml", "model: a/b\ncontainer: i\ncommand: vllm serve {model}\n")
    result = run("import", "--force", str(f))
    assert result.exit_code == 1 and "m.yaml" in result.stderr and len(result.stderr.splitlines()) == 1, \
        result.output
    assert f.is_file()  # the peer file itself survives


@pytest.mark.parametrize("extra,line,key", [("user: John.Doe\n", 3, "user"), ("cache_dir: hf\n", 3, "cache_dir")])
def test_a_sparkrun_cluster_value_the_cluster_schema_refuses_is_one_line_at_its_key(project, extra, line, key):
    f = write(project / "c" / "duo.yaml", "name: duo\nhosts: [10.0.0.1, 10.0.0.2]\n" + extra)
    before = tree(project)
    result = run("import", "--force", str(f))
    assert result.exit_code == 1, result.output
    assert f"duo.yaml:{line}:1: error: {key}: " in result.stderr and len(result.stderr.splitlines()) == 1, \
        result.stderr
    assert tree(project) == before


def test_an_eugr_command_is_read_as_the_bash_script_the_launcher_runs_it_in(project):
    """eugr's launcher runs the command from a bash script, where a `#` starting a word begins a comment to the end
    of its line: an author's note after the last flag (with an apostrophe, as inkling-small-nvfp4-tuned.yaml has)
    is no engine word. A `#` inside a word or inside quotes stays."""
    text = EUGR.replace("'{{\"cudagraph_mode\": \"FULL\"}}'", "'{{\"cudagraph_mode\": \"FULL\"}}' \\\n"
                        "      --served-model-name a#b '# kept'   # a trailing note: don't pass it on\n"
                        "      # another note, the last line's\n")
    f = write(project / "peer" / "c.yaml", text)
    result = run("import", str(f))
    assert result.exit_code == 0, result.output
    from generator.resolve.load import load_recipe

    words = [a.word for a in load_recipe(project / "recipes" / "c" / "recipe.toml").args]
    assert words == ["--port", "8000", "--compilation-config", '{"cudagraph_mode": "FULL"}',
                     "--served-model-name", "a#b", "# kept"], words
    assert run("build").exit_code == 0


def test_words_after_a_comment_in_an_eugr_command_are_refused(project):
    """A comment ends at a newline no backslash escapes, and that newline ends bash's command: the flags after it
    never reach the engine. Carrying them would run what the peer does not; one line says so."""
    text = EUGR.replace("--port {port} \\\n", "--port {port} \\\n      # the API port: it's the default\n")
    f = write(project / "peer" / "m.yaml", text)
    result = run("import", str(f))
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.output
    assert result.stderr.startswith("peer/m.yaml:10:1: error: command: line 3 of the command holds a comment, and "
                                    "words follow it"), result.stderr
    assert not (project / "recipes" / "m").exists()


def test_a_blank_line_ends_the_command_where_eugrs_launcher_keeps_it(project):
    """eugr drops a command's blank lines only without Ray; with --ray the blank line after a `\\` stays, and bash
    ends the serve command there: the flags after it never reach the engine (eugr's glm-5.2-nvfp4). The import
    refuses to carry them, in one line; without Ray the same file imports whole."""
    text = EUGR.replace("-tp {tensor_parallel} \\\n", "-tp {tensor_parallel} \\\n\n")
    f = write(project / "peer" / "b.yaml", text)
    plain = run("import", "--dry-run", str(f))
    assert plain.exit_code == 0 and "cudagraph_mode" in plain.stdout, plain.output
    ray = run("import", "--ray", "--dry-run", str(f))
    assert ray.exit_code == 1 and len(ray.stderr.splitlines()) == 1, ray.output
    assert "error: command: line 4 of the command ends without a `\\`, and words follow it" in ray.stderr, ray.stderr


def test_eugr_runs_vllm_behind_an_images_own_program(project):
    """eugr's launcher adds vLLM's rank flags to any command, so `exec <program> serve <model> ...` is vLLM behind a
    wrapper of the image (deepseek-v4-flash-fp8-aiden's dsv4-vllm-entrypoint): the program is the entrypoint, `exec`
    is what running the argv does anyway. A command with no `serve` after its program is still refused."""
    f = write(project / "peer" / "w.yaml", EUGR.replace("vllm serve org/model", "exec /usr/local/bin/wrap serve org/model"))
    result = run("import", "--dry-run", str(f))
    assert result.exit_code == 0, result.output
    data = tomllib.loads(result.stdout)
    assert data["engine"] == "vllm" and data["entrypoint"] == ["/usr/local/bin/wrap", "serve"]
    assert data["model"] == "org/model" and data["tensor_parallel_size"] == 2
    f = write(project / "peer" / "u.yaml", EUGR.replace("vllm serve org/model", "uvicorn server:app"))
    refused = run("import", "--dry-run", str(f))
    assert refused.exit_code == 1 and "not a serve command recipegen knows" in refused.stderr


def test_a_secret_in_eugrs_env_is_named_once_and_benchmark_for_what_it_is(project):
    """nemotron-cascade-2-30B-A3B's `HF_TOKEN: "${HF_TOKEN}"`: a secret is never carried, so the note that other
    double-quoted values are carried as written would contradict the pass_env note; its `benchmark:` section is
    what newer run-recipe.py releases run after launch, which `recipegen bench` does instead."""
    text = EUGR.replace('  VLLM_X: "1"\n', '  VLLM_X: "1"\n  HF_TOKEN: "${HF_TOKEN}"\n') + "benchmark:\n  enabled: false\n"
    result = run("import", "--dry-run", str(write(project / "peer" / "s.yaml", text)))
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if "env.HF_TOKEN" in line]
    assert len(notes) == 1 and "pass_env" in notes[0], result.stderr
    assert "warning[not-carried]: benchmark: the benchmark newer run-recipe.py releases run" in result.stderr
    assert "${HF_TOKEN}" not in result.stdout and tomllib.loads(result.stdout)["pass_env"] == ["HF_TOKEN"]


@pytest.mark.parametrize("command, ends", [
    ("vllm serve m --a x\\\\\n--port 1", True),  # `x\\`: an escaped backslash, then a newline that ends the command
    ("vllm serve m --a x \\\n--port 1", False),  # a continuation
    ("vllm serve m --a 'x\\' \\\n--port 1", False),  # a quoted backslash, then a continuation
])
def test_a_backslash_inside_a_word_does_not_continue_the_line(command: str, ends: bool):
    from generator.importers.command import split_command

    def fail(message: str) -> Exception:
        return ValueError(message)

    if ends:
        with pytest.raises(ValueError, match="line 1 of the command ends without"):
            split_command(command, fail)
    else:
        assert "--port 1" in split_command(command, fail).args


@pytest.mark.parametrize("ray, tp, said", [(False, 2, 'distributed_backend = "mp"'), (False, 1, "one node"),
                                           (True, 2, None)])
def test_eugr_s_ray_backend_cut_without_ray_is_said_with_the_reason(project, ray, tp, said):
    """run-recipe.py cuts `--distributed-executor-backend ray` unless given --ray: the import says so (issue 43)."""
    f = write(project / "r.yaml", f"recipe_version: '1'\nname: r\ncontainer: i\ndefaults:\n  tensor_parallel: {tp}\n"
                                  "command: vllm serve a/b -tp {tensor_parallel} --distributed-executor-backend ray\n")
    result = run("import", "--dry-run", *(["--ray"] if ray else []), str(f))
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "--distributed-executor-backend ray" in line]
    if said is None:
        assert lines == [], result.stderr
    else:
        assert len(lines) == 1 and "warning[not-carried]: command:" in lines[0] and said in lines[0], result.stderr
        assert "r.yaml:6:" in lines[0]  # the command's line
