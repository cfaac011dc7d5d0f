"""The lint rules of issue 23, spelled more ways than their good/bad fixture pair (tests/lint/<rule>/): engine
flags against the data's arity and JSON types, ports on the host network, build contexts, paths leading out of
the project, the launcher's folder and a model path no mount reaches. Each through the real CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.write.verify import read_yaml
from helpers.lint import CLUSTER, ROOT, findings, run, tmp_recipe, validate

# --- flag-arity and bad-json -------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, rule, names", [
    ('    "--max-model-len", "32768", "4096",\n', "flag-arity", ("'4096'", "unrecognized arguments")),
    ('    "--max-num-seqs", "",\n', "flag-arity", ("takes a value, but none follows it", "it is the last word")),
    ('    "--kv-cache-dtype",\n    "--enforce-eager",\n', "flag-arity", ("'--enforce-eager' is a flag",)),
    # [a, and b] of an unquoted list: vLLM keeps "[a," as text (JSON only when {...}) and refuses the word "b]"
    ('    "--hf-overrides", "[\\"a\\", \\"b\\"]",\n', "flag-arity", ("'b]'", "unrecognized arguments")),
    ('    "--served-model-name",\n', "flag-arity", ("takes a value",)),  # nargs '+': at least one
])
def test_flag_arity_spellings(tmp_path, args, rule, names):
    result = validate(tmp_recipe(tmp_path, args, nodes=1))
    found = findings(result)
    assert [f.rule for f in found] == [rule], result.stderr
    for name in names:
        assert name in found[0].message
    assert result.exit_code == 1


@pytest.mark.parametrize("args", [
    '    "--served-model-name", "qwen", "qwen-coder",\n',  # nargs '+'
    '    "-O3",\n',  # a one-letter flag with its value attached
    '    "--compilation-config.mode", "3",\n',  # a dotted JSON key: one value
    '    "--max-model-len=32768",\n',
    '    "--max-num-seqs", "-1",\n',  # a negative number is a value, not a flag
])
def test_flag_arity_accepts_what_the_engine_accepts(tmp_path, args):
    result = validate(tmp_recipe(tmp_path, args, nodes=1), "--strict")
    assert result.exit_code == 0 and findings(result) == [], result.stderr


@pytest.mark.parametrize("args", [
    # an inline chat template and a bracketed served name are strings to the engine, not JSON
    '    "--chat-template", "\'{% for m in messages %}{{ m.content }}{% endfor %}\'",\n',
    '    "--served-model-name", "\'[qwen]\'",\n',
    '    "--hf-overrides", "\'[qwen]\'",\n',  # vLLM reads it as JSON only when it is {...}
])
def test_bad_json_only_for_flags_that_take_json(tmp_path, args):
    result = validate(tmp_recipe(tmp_path, args, nodes=1), "--strict")
    assert result.exit_code == 0 and findings(result) == [], result.stderr


@pytest.mark.parametrize("engine, image, args", [
    ("vllm", "vllm/vllm-openai:v0.34.0", '    "--speculative-config", "\'{\\"method\\": mtp}\'",\n'),
    ("vllm", "vllm/vllm-openai:v0.34.0", '    "--hf-overrides", "\'{\\"a\\": }\'",\n'),  # a str flag read as JSON
    ("sglang", "lmsysorg/sglang:v0.5.23", '    "--json-model-override-args", "\'{\\"a\\": }\'",\n'),
])
def test_bad_json_still_checks_json_flags(tmp_path, engine, image, args):
    result = validate(tmp_recipe(tmp_path, args, engine=engine, image=image, nodes=1))
    assert [f.rule for f in findings(result)] == ["bad-json"], result.stderr


# --- port-collision ------------------------------------------------------------------------------------------------

RAY = 'distributed_backend = "ray"\n'


def _recipe(tmp_path: Path, text: str, name: str = "case") -> Path:
    path = tmp_path / name / "recipe.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, "utf-8")
    return path


def _cluster(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "cluster.toml"
    text = CLUSTER.read_text("utf-8").replace('gpu_memory_ceiling = 0.9\n', f'gpu_memory_ceiling = 0.9\n{extra}')
    path.write_text(text, "utf-8")
    return path


@pytest.mark.parametrize("engine, image, backend, port, key", [
    ("vllm", "vllm/vllm-openai:v0.34.0", "ray", 6379, "ray_port"),
    ("sglang", "lmsysorg/sglang:v0.5.23", "mp", 29501, "master_port"),  # the --dist-init-addr port
    ("vllm", "vllm/vllm-openai:v0.34.0", "mp", 29700, "transfer_port"),
])
def test_port_collision_with_each_cluster_port(tmp_path, engine, image, backend, port, key):
    path = _recipe(tmp_path, f'engine = "{engine}"\ndocker_image = "{image}"\nmodel = "Qwen/Qwen3-32B"\n'
                             f'required_nodes = 2\ntensor_parallel_size = 2\ndistributed_backend = "{backend}"\n'
                             f'args = ["--port", "{port}"]\n')
    result = validate(path)
    (f,) = [f for f in findings(result) if f.rule == "port-collision"]
    assert (f.line, f.key) == (7, "args") and f"--port {port}" in f.message and key in f.message


def test_port_collision_with_the_engines_default_port(tmp_path):
    """No --port: vLLM listens on 8000, which this cluster gives its rendezvous; the finding names both."""
    path = _recipe(tmp_path, 'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.34.0"\nmodel = "Qwen/Qwen3-32B"\n'
                             'required_nodes = 2\ntensor_parallel_size = 2\n')
    result = run("validate", str(path), "--cluster", str(_cluster(tmp_path, "master_port = 8000\n")))
    (f,) = [f for f in findings(result) if f.rule == "port-collision" and f.file.endswith("recipe.toml")]
    assert (f.line, f.key) == (1, "engine") and "default API port 8000" in f.message and "master_port" in f.message


def test_a_single_node_recipe_has_no_rendezvous_port(tmp_path):
    path = _recipe(tmp_path, 'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.34.0"\nmodel = "Qwen/Qwen3-32B"\n'
                             'args = ["--port", "29501"]\n')
    result = validate(path, "--strict")
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize("extra, line_key", [
    ("master_port = 29700\n", "master_port"),  # the transfer port's default
    ("ray_port = 7000\ntransfer_port = 7000\n", "transfer_port"),
])
def test_a_cluster_giving_two_ports_one_number(tmp_path, extra, line_key):
    cluster = _cluster(tmp_path, extra)
    result = run("validate", str(cluster))
    (f,) = findings(result)
    assert (f.rule, f.key) == ("port-collision", line_key), result.stderr
    assert result.exit_code == 1
    out = tmp_path / "out"
    built = run("build", str(ROOT / "tests" / "lint" / "owned-flag" / "good"), "--cluster", str(cluster),
                "--out", str(out))
    assert built.exit_code == 1 and "error[port-collision]" in built.stderr and not out.exists()


def test_ray_port_and_master_port_may_share_a_number(tmp_path):
    """A recipe's ranks bind the Ray head's port or the rendezvous port, never both (eugr's launcher gives its one
    MASTER_PORT, 29501, to either): a cluster with ray_port = master_port validates and builds Ray and mp recipes."""
    cluster = _cluster(tmp_path, "ray_port = 29501\n")
    result = run("validate", str(cluster))
    assert result.exit_code == 0 and "port-collision" not in result.stderr, result.stderr
    for backend in ("ray", "mp"):
        path = _recipe(tmp_path, 'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.34.0"\nmodel = "Qwen/Qwen3-32B"\n'
                                 f'required_nodes = 2\ntensor_parallel_size = 2\ndistributed_backend = "{backend}"\n',
                       name=backend)
        built = run("build", str(path), "--cluster", str(cluster), "--out", str(tmp_path / "out" / backend))
        assert built.exit_code == 0, built.output


# --- build-context, build-settings ---------------------------------------------------------------------------------

HEAD = 'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.34.0"\nmodel = "Qwen/Qwen3-32B"\n'


def test_a_context_holding_only_the_named_dockerfile_builds(tmp_path):
    """Today's bug: build: was written only for a folder holding `Dockerfile`, whatever `dockerfile` named."""
    out = tmp_path / "out"
    result = run("build", str(ROOT / "tests" / "lint" / "build-context" / "good"), "--cluster", str(CLUSTER),
                 "--out", str(out))
    assert result.exit_code == 0, result.stderr
    node = out / "good" / "node1"
    build = read_yaml((node / "compose.yaml").read_text("utf-8"))["services"]["engine"]["build"]
    assert (node / build["context"]).resolve() == (ROOT / "tests" / "lint" / "build-context" / "good" / "ctx")
    assert build["dockerfile"] == "Dockerfile.spark"


def test_a_missing_build_folder_is_said(tmp_path):
    path = _recipe(tmp_path, HEAD + 'docker_image_dir = "nowhere"\n')
    result = validate(path)
    (f,) = findings(result)
    assert (f.rule, f.severity, f.line, f.key) == ("build-settings", "warning", 4, "docker_image_dir")
    assert "'nowhere' is no folder" in f.message and "images/nowhere" in f.message
    assert result.exit_code == 0


def test_a_dockerfile_without_a_context_is_said(tmp_path):
    result = validate(_recipe(tmp_path, HEAD + 'dockerfile = "Dockerfile.spark"\n'))
    assert [(f.rule, f.key) for f in findings(result)] == [("build-settings", "dockerfile")], result.stderr


def test_a_dockerfile_outside_its_context_but_inside_the_project(tmp_path):
    path = _recipe(tmp_path, HEAD + 'docker_image_dir = "ctx"\ndockerfile = "../Dockerfile.spark"\n')
    (path.parent / "ctx").mkdir()
    (path.parent / "Dockerfile.spark").write_text("FROM scratch\n")
    result = validate(path)
    assert [(f.rule, f.key) for f in findings(result)] == [("build-settings", "dockerfile")], result.stderr
    assert "classic builder" in findings(result)[0].message


# --- outside-project: one check for docker_image_dir, dockerfile, mods and extends --------------------------------


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """A project (it has recipes/) with a folder beside it that no other clone has."""
    root = tmp_path / "project"
    (root / "recipes").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    (outside / "mod").mkdir(parents=True)
    (outside / "mod" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (outside / "ctx").mkdir()
    (outside / "ctx" / "Dockerfile").write_text("FROM scratch\n")
    (outside / "parent").mkdir()
    (outside / "parent" / "recipe.toml").write_text(HEAD)
    return root


@pytest.mark.parametrize("line, key", [
    ('mods = ["../../../elsewhere/mod"]', "mods"),
    ('mods = ["{outside}/mod"]', "mods"),
    ('mods = ["linked"]', "mods"),  # a symlinked folder leading out
    ('extends = "../../../elsewhere/parent/recipe.toml"', "extends"),
    ('extends = "{outside}/parent/recipe.toml"', "extends"),
    ('docker_image_dir = "{outside}/ctx"', "docker_image_dir"),
    ('docker_image_dir = "linked-ctx"', "docker_image_dir"),
])
def test_paths_outside_the_project_are_refused_everywhere(project, line, key):
    outside = project.parent / "elsewhere"
    folder = project / "recipes" / "r"
    folder.mkdir()
    (folder / "linked").symlink_to(outside / "mod")
    (folder / "linked-ctx").symlink_to(outside / "ctx")
    text = line.format(outside=outside) + "\n" + ("" if key == "extends" else HEAD)
    (folder / "recipe.toml").write_text(text)
    result = run("validate", str(folder / "recipe.toml"), "--cluster", str(CLUSTER))
    (f,) = [f for f in findings(result) if f.rule == "outside-project"]
    assert (f.line, f.key) == (1, key) and "outside the project" in f.message, result.stderr
    built = run("build", str(folder), "--cluster", str(CLUSTER), "--out", str(project / "out"))
    assert built.exit_code == 1 and f.message in built.stderr and not (project / "out").exists()


def test_an_absolute_path_inside_the_project_is_refused_too(project):
    """It works in this clone only: another clone sits at another path."""
    folder = project / "recipes" / "r"
    (folder / "mod").mkdir(parents=True)
    (folder / "mod" / "run.sh").write_text("#!/bin/sh\n")
    (folder / "recipe.toml").write_text(f'mods = ["{folder}/mod"]\n' + HEAD)
    result = run("validate", str(folder / "recipe.toml"), "--cluster", str(CLUSTER))
    (f,) = findings(result)
    assert (f.rule, f.key) == ("outside-project", "mods") and "absolute path" in f.message


def test_relative_paths_inside_the_project_pass(project):
    folder = project / "recipes" / "r"
    (project / "mods" / "patch").mkdir(parents=True)
    (project / "mods" / "patch" / "run.sh").write_text("#!/bin/sh\n")
    (project / "images" / "ctx").mkdir(parents=True)
    (project / "images" / "ctx" / "Dockerfile").write_text("FROM scratch\n")
    (project / "recipes" / "base").mkdir()
    (project / "recipes" / "base" / "recipe.toml").write_text(HEAD)
    folder.mkdir()
    (folder / "recipe.toml").write_text('extends = "base"\nmods = ["patch"]\ndocker_image_dir = "ctx"\n')
    result = run("validate", str(folder / "recipe.toml"), "--cluster", str(CLUSTER), "--strict")
    assert result.exit_code == 0, result.stderr


# --- mount-target: the launcher's folder; model-mount ---------------------------------------------------------------


@pytest.mark.parametrize("target, bad", [("/opt/recipegen", True), ("/opt/recipegen/", True), ("/opt", True),
                                         ("/opt/recipegen/launch.sh", True), ("/opt/other", False),
                                         ("/opt/recipegen2", False)])
def test_a_mount_over_the_launchers_folder(tmp_path, target, bad):
    path = _recipe(tmp_path, HEAD + f'\n[[extra_mounts]]\nhost = "/srv/x"\ncontainer = "{target}"\n')
    result = validate(path, "--strict")
    found = [(f.rule, f.key) for f in findings(result)]
    assert found == ([("mount-target", "extra_mounts")] if bad else []), result.stderr
    if bad:
        assert "/opt/recipegen" in findings(result)[0].message


@pytest.mark.parametrize("model, mounted, warned", [
    ("/models/qwen", "/models/", False), ("/models/../data/qwen", "/models", True),
    ("/root/.cache/huggingface/hub/qwen", None, False), ("/modelsx/qwen", "/models", True),
])
def test_model_paths_and_mounts(tmp_path, model, mounted, warned):
    mount = f'\n[[extra_mounts]]\nhost = "/srv/m"\ncontainer = "{mounted}"\n' if mounted else ""
    path = _recipe(tmp_path, HEAD.replace('"Qwen/Qwen3-32B"', f'"{model}"') + mount)
    found = [f.rule for f in findings(validate(path))]
    assert found == (["model-mount"] if warned else []), found


def test_a_draft_model_path_no_mount_reaches(tmp_path):
    args = 'args = ["--speculative-config", "\'{\\"model\\": \\"/drafts/eagle\\", \\"num_speculative_tokens\\": 2}\'"]\n'
    path = _recipe(tmp_path, HEAD + args)
    (f,) = findings(validate(path))
    assert (f.rule, f.key, f.line) == ("model-mount", "args", 4) and "'/drafts/eagle'" in f.message


# --- the lint page lists every rule -----------------------------------------------------------------------------


def test_the_lint_page_lists_every_rule_with_its_level():
    import re

    from generator.check.rules import RULES

    page = (ROOT / "docs" / "lint.md").read_text("utf-8")
    rows = set(re.findall(r"^\| `([a-z-]+)` \| (error|warning|note) \|", page, re.M))
    missing = [(r.id, r.severity.value) for r in RULES if (r.id, r.severity.value) not in rows]
    assert not missing, f"docs/lint.md's rule table lacks {missing}"


# --- stack-argument: the shortcut that spares rendering is safe ---------------------------------------------------


@pytest.mark.parametrize("text", ["'", "a", "é"])
def test_a_launcher_below_the_render_bound_fits_in_one_argument(tmp_path, text):
    """stack-argument renders the launcher only when the recipe could exceed the limit: just below that bound, with
    the text that quotes worst (every ' becomes 5 bytes), the rendered launcher still fits."""
    from dataclasses import replace

    from generator.check.launch import MAX_INLINE_LAUNCHER, could_exceed
    from generator.render.sizes import launcher_sizes
    from generator.resolve.load import load_cluster, load_recipe
    from generator.resolve.model import Arg

    path = _recipe(tmp_path, HEAD + 'required_nodes = 2\ntensor_parallel_size = 2\nsetup = ["x"]\n')
    recipe = load_recipe(path)
    count = 1
    while not could_exceed(replace(recipe, setup=(Arg(text * count * 2, recipe.setup[0].origin),))):
        count *= 2
    while not could_exceed(replace(recipe, setup=(Arg(text * (count + 1), recipe.setup[0].origin),))):
        count += 1  # the largest setup command the shortcut does not render
    widest = replace(recipe, setup=(Arg(text * count, recipe.setup[0].origin),))
    assert not could_exceed(widest) and count * len(text.encode("utf-8")) > 8 * 1024
    sizes = launcher_sizes(widest, load_cluster(CLUSTER))
    assert all(size <= MAX_INLINE_LAUNCHER for _, size in sizes), sizes


def test_a_mod_of_many_small_files_below_the_render_bound_fits(tmp_path):
    """Each file costs its path and the words that write it, not only its text: many empty files add up."""
    from dataclasses import replace

    from generator.check.launch import MAX_INLINE_LAUNCHER, could_exceed
    from generator.render.sizes import launcher_sizes
    from generator.resolve.load import load_cluster, load_recipe
    from generator.resolve.model import Mod, ModFile

    recipe = load_recipe(_recipe(tmp_path, HEAD + 'required_nodes = 2\ntensor_parallel_size = 2\nsetup = ["x"]\n'))

    def with_files(n: int):
        files = (ModFile("run.sh", b"#!/bin/sh\n", True),) + tuple(
            ModFile(f"pkg/sub_{i:05d}/__init__.py", b"", False) for i in range(n))
        return replace(recipe, mods=(Mod("many-files", "mods/many-files", files, recipe.setup[0].origin),))

    count = 1
    while not could_exceed(with_files(count + 1)):
        count += 1
    assert not could_exceed(with_files(count)) and count > 50
    sizes = launcher_sizes(with_files(count), load_cluster(CLUSTER))
    assert all(size <= MAX_INLINE_LAUNCHER for _, size in sizes), sizes


def test_a_build_folder_outside_the_project_that_does_not_exist_is_one_finding(project):
    folder = project / "recipes" / "r"
    folder.mkdir()
    (folder / "recipe.toml").write_text('docker_image_dir = "../../../nowhere"\n' + HEAD)
    result = run("validate", str(folder / "recipe.toml"), "--cluster", str(CLUSTER))
    assert [(f.rule, f.key) for f in findings(result)] == [("outside-project", "docker_image_dir")], result.stderr


def test_an_empty_value_written_as_two_quotes_is_a_value(tmp_path):
    """"" is no word (the element vanishes when the args are split); "''" is the empty word."""
    result = validate(tmp_recipe(tmp_path, '    "--chat-template", "\'\'",\n    "--max-num-seqs", "8",\n', nodes=1),
                      "--strict")
    assert result.exit_code == 0 and findings(result) == [], result.stderr


@pytest.mark.parametrize("model, warned", [("./qwen", True), ("models/a/b", True), ("~/qwen", True),
                                           ("gpt2", False), ("Qwen/Qwen3-32B", False)])
def test_a_relative_model_path_is_read_as_a_path_as_models_and_preflight_read_it(tmp_path, model, warned):
    """generator/resolve/modelid.py is the one reading: a relative path is no Hugging Face id, and no mount can be seen
    to reach it (it is relative to the image's working directory)."""
    mount = '\n[[extra_mounts]]\nhost = "/srv/m"\ncontainer = "/models"\n'
    path = _recipe(tmp_path, HEAD.replace('"Qwen/Qwen3-32B"', f'"{model}"') + mount)
    found = findings(validate(path))
    assert [f.rule for f in found] == (["model-mount"] if warned else []), found
    if warned:
        assert "working directory" in found[0].message
