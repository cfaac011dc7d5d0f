"""`args` words and flags (generator.resolve.argwords) and `extends` (generator.resolve.load.load_recipe): every
merge rule, the origins of merged values, missing parents and cycles; and the shipped agent recipe, which extends
the batch recipe, against the standalone recipe it replaced."""

from __future__ import annotations

import filecmp
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from generator.cli import main
from generator.diagnostics import RecipegenError
from generator.read.tomldoc import load_toml
from generator.resolve.argwords import flag_name, group_flags, merge_args, split_words
from generator.resolve.load import load_recipe
from generator.resolve.model import DEFAULT, Arg, Origin

ROOT = Path(__file__).resolve().parent.parent
STANDALONE = ROOT / "tests" / "fixtures" / "deepseek-v4-flash-eugr-agent.standalone.toml"
AGENT = "deepseek-v4-flash-eugr-agent"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, "utf-8")
    return path


def words(args) -> list[str]:
    return [a.word for a in args]


# --- split_words: the launcher's shell semantics -----------------------------------------------------------------


def split(tmp_path: Path, toml_args: str) -> tuple[Arg, ...]:
    doc = load_toml(write(tmp_path / "args.toml", f"args = [\n{toml_args}]\n"))
    return split_words(doc, doc.data["args"], "recipe")


def test_split_plain_words_keep_their_element_line(tmp_path):
    args = split(tmp_path, '    "--max-model-len", "32768",\n    "--enforce-eager",\n')
    assert words(args) == ["--max-model-len", "32768", "--enforce-eager"]
    assert [a.origin.line for a in args] == [2, 2, 3]
    assert all(a.origin.layer == "recipe" and a.origin.file.endswith("args.toml") for a in args)


def test_split_element_with_spaces_is_several_words(tmp_path):
    args = split(tmp_path, '    "--max-model-len 32768 --port 8000",\n')
    assert words(args) == ["--max-model-len", "32768", "--port", "8000"]


def test_split_single_quoted_json_is_one_word(tmp_path):
    args = split(tmp_path, """    "--speculative-config", "'{\\"method\\": \\"mtp\\", \\"num_speculative_tokens\\": 2}'",\n""")
    assert words(args) == ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}']


def test_split_launcher_multiline_json(tmp_path):
    """The launcher's form: a multi-line string whose first line is empty, then the single-quoted JSON."""
    args = split(tmp_path, '    "--compilation-config", """\n\'{"a": 1}\'""",\n    "--enforce-eager",\n')
    assert words(args) == ["--compilation-config", '{"a": 1}', "--enforce-eager"]
    assert [a.origin.line for a in args] == [2, 2, 4]


def test_split_leading_newline_is_nothing(tmp_path):
    """A basic string starting with a newline: the newline only separates words."""
    args = split(tmp_path, '    "--reasoning-config", "\\n\'{\\"b\\": [1, 2]}\'",\n    "\\n--trust-remote-code\\n",\n')
    assert words(args) == ["--reasoning-config", '{"b": [1, 2]}', "--trust-remote-code"]


def test_split_double_quotes_and_escapes(tmp_path):
    args = split(tmp_path, """    "--chat-template \\"a b\\" --x 'c d' e\\\\ f",\n""")
    assert words(args) == ["--chat-template", "a b", "--x", "c d", "e f"]


def test_split_backslash_newline_continues_the_command(tmp_path):
    """A serve command pasted with its line continuations: sh drops each backslash-newline (shlex alone would
    make every newline a word), also inside double quotes; a JSON value in single quotes is untouched."""
    args = split(tmp_path, "    '''\n  --port 8000 \\\n  --x \"a\\\nb\" \\\n  --cfg '{\"k\": 1}' \\\n  --y''',\n")
    assert words(args) == ["--port", "8000", "--x", "ab", "--cfg", '{"k": 1}', "--y"]
    assert {a.origin.line for a in args} == {2}


def test_split_backslash_newline_inside_single_quotes_stays(tmp_path):
    args = split(tmp_path, "    \"--x 'a\\\\\\nb'\",\n")
    assert words(args) == ["--x", "a\\\nb"]


def test_split_quote_spanning_elements_joins_words(tmp_path):
    """Elements are joined with spaces before splitting, as the launcher did."""
    args = split(tmp_path, """    "--served-model-name", "'my", "model'",\n""")
    assert words(args) == ["--served-model-name", "my model"]


def test_split_unbalanced_quote_is_an_error_at_its_element(tmp_path):
    with pytest.raises(RecipegenError) as exc:
        split(tmp_path, """    "--max-model-len", "4096",\n    "--x", "'oops",\n""")
    (d,) = exc.value.diagnostics
    assert d.line == 3 and d.key == "args[3]"
    assert "cannot split into shell words" in d.message


# --- flag_name ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("word, name", [
    ("--max-num-seqs", "--max-num-seqs"),
    ("--max_num_seqs", "--max-num-seqs"),
    ("--max-num-seqs=6", "--max-num-seqs"),
    ("--max_num_seqs=a_b", "--max-num-seqs"),
    ("-tp", "-tp"),
    ("-tp=2", "-tp"),
    ("--default-chat-template-kwargs.thinking=true", "--default-chat-template-kwargs.thinking"),
    ("-1", None),
    ("-0.5", None),
    ("-1e-3", None),
    ("6", None),
    ("fp8", None),
    ("-", None),
    ("--", None),
    ('{"a": 1}', None),
])
def test_flag_name(word, name):
    assert flag_name(word) == name


def test_flag_equals_value_and_flag_space_value_group_alike():
    def a(*ws):
        return tuple(Arg(w, Origin("recipe")) for w in ws)

    (inline,) = group_flags(a("--max-num-seqs=6"))
    (spaced,) = group_flags(a("--max_num_seqs", "6"))
    assert inline.flag == spaced.flag == "--max-num-seqs"
    assert inline.values == spaced.values == ["6"]


def test_negative_number_is_a_value():
    groups = group_flags(tuple(Arg(w, Origin("recipe")) for w in ("--offset", "-1", "--scale", "-0.5", "--on")))
    assert [(g.flag, g.values) for g in groups] == [("--offset", ["-1"]), ("--scale", ["-0.5"]), ("--on", [])]


# --- merge_args -----------------------------------------------------------------------------------------------

PARENT, CHILD = Origin("parent recipe p", "p.toml", 1), Origin("recipe", "c.toml", 1)


def args(text: str, origin: Origin) -> tuple[Arg, ...]:
    return tuple(Arg(w, origin) for w in text.split())


def merge(parent: str, child: str, remove: set[str] = frozenset()) -> tuple[Arg, ...]:
    return merge_args(args(parent, PARENT), args(child, CHILD), set(remove))


def test_child_replaces_parent_flag_in_place():
    merged = merge("--a 1 --b 2 --c 3", "--b 9")
    assert words(merged) == ["--a", "1", "--b", "9", "--c", "3"]
    assert [a.origin for a in merged] == [PARENT, PARENT, CHILD, CHILD, PARENT, PARENT]


def test_child_equals_form_replaces_parent_space_form():
    assert words(merge("--a 1 --b 2 --c 3", "--b=9")) == ["--a", "1", "--b=9", "--c", "3"]


def test_child_space_form_replaces_parent_equals_form():
    assert words(merge("--a 1 --b=2 --c 3", "--b 9")) == ["--a", "1", "--b", "9", "--c", "3"]


def test_underscore_spelling_replaces_dash_spelling():
    assert words(merge("--max-num-seqs 8 --port 8000", "--max_num_seqs 6")) == ["--max_num_seqs", "6", "--port", "8000"]


def test_new_flags_are_appended_in_the_childs_order():
    assert words(merge("--a 1", "--z 26 --b 2 --a 5")) == ["--a", "5", "--z", "26", "--b", "2"]


def test_remove_args_drops_a_flag_with_its_values():
    assert words(merge("--a 1 --b x y --c 3", "", {"--b"})) == ["--a", "1", "--c", "3"]


def test_remove_args_by_other_spelling():
    assert words(merge("--max-num-seqs 8 --port 8000", "", {"--max_num_seqs"})) == ["--port", "8000"]


def test_remove_args_of_a_flag_the_parent_lacks_changes_nothing():
    assert words(merge("--a 1", "", {"--nope"})) == ["--a", "1"]


def test_boolean_flags():
    assert words(merge("--enforce-eager --a 1 --trust-remote-code", "--enforce-eager")) == [
        "--enforce-eager", "--a", "1", "--trust-remote-code"]
    assert words(merge("--enforce-eager --a 1", "", {"--enforce-eager"})) == ["--a", "1"]
    assert words(merge("--a 1", "--enforce-eager")) == ["--a", "1", "--enforce-eager"]
    # a valued flag replaced by its boolean form, and back
    assert words(merge("--x 1 --a 1", "--x")) == ["--x", "--a", "1"]
    assert words(merge("--x --a 1", "--x 2")) == ["--x", "2", "--a", "1"]


def test_negative_values_follow_their_flag():
    assert words(merge("--offset -1 --b 2", "--offset -2")) == ["--offset", "-2", "--b", "2"]


def test_parent_repeated_flag_is_replaced_whole_at_its_first_place():
    assert words(merge("--lora x --a 1 --lora y", "--lora z")) == ["--lora", "z", "--a", "1"]


def test_repeated_flag_kept_when_child_does_not_touch_it():
    assert words(merge("--lora x --a 1 --lora y", "--a 2")) == ["--lora", "x", "--a", "2", "--lora", "y"]


def test_child_repeated_new_flag_is_appended_whole():
    assert words(merge("--a 1", "--lora x --lora y")) == ["--a", "1", "--lora", "x", "--lora", "y"]


def test_child_repeated_flag_replacing_parent_keeps_all_child_words():
    assert words(merge("--lora p --a 1", "--lora x --lora y")) == ["--lora", "x", "--lora", "y", "--a", "1"]


def test_remove_and_set_the_same_flag_moves_it_to_the_end():
    assert words(merge("--a 1 --b 2", "--a 3", {"--a"})) == ["--b", "2", "--a", "3"]


# --- load_recipe: a chain of three --------------------------------------------------------------------------------

BASE = '''engine = "vllm"
name = "Base"
docker_image = "vllm/vllm-openai:v0.11.0"
model = "Qwen/Qwen3-32B"
required_nodes = 2
tensor_parallel_size = 2
shm_size = "16gb"

args = [
    "--max-model-len", "32768",
    "--max-num-seqs", "8",
    "--enforce-eager",
    "--kv-cache-dtype", "fp8",
]

[[extra_mounts]]
host = "~/.cache/vllm"
container = "/root/.cache/vllm"

[[extra_mounts]]
host = "/data/models"
container = "/models"
read_only = true

[env]
HF_HUB_OFFLINE = "1"
VLLM_LOGGING_LEVEL = "INFO"
OMP_NUM_THREADS = "4"
'''
MID = '''extends = "base"
shm_size = "32gb"
args = ["--max-num-seqs", "16", "--block-size", "256"]
remove_env = ["OMP_NUM_THREADS"]

[env]
VLLM_LOGGING_LEVEL = "DEBUG"
'''
LEAF = '''extends = "../mid/recipe.toml"
name = "Leaf"
remove_args = ["--enforce-eager"]
args = [
    "--max_num_seqs=24",
    "--served-model-name", "leaf",
]

[[extra_mounts]]
host = "~/.cache/vllm-leaf"
container = "/root/.cache/vllm"

[env]
CUDA_VISIBLE_DEVICES = "0"
'''


@pytest.fixture
def chain(tmp_path, monkeypatch):
    """recipes/base <- recipes/mid (extends by id) <- recipes/leaf (extends by relative path)."""
    monkeypatch.chdir(tmp_path)  # shown file names: recipes/<id>/recipe.toml
    for rid, text in (("base", BASE), ("mid", MID), ("leaf", LEAF)):
        write(tmp_path / "recipes" / rid / "recipe.toml", text)
    return load_recipe(tmp_path / "recipes" / "leaf", tmp_path / "recipes")


def o(rid: str, line: int) -> Origin:
    layer = "recipe" if rid == "leaf" else f"parent recipe {rid}"
    return Origin(layer, f"recipes/{rid}/recipe.toml", line)


def test_chain_documents_child_first(chain):
    assert chain.id == "leaf"
    assert [d.shown for d in chain.documents] == ["recipes/leaf/recipe.toml", "recipes/mid/recipe.toml",
                                                  "recipes/base/recipe.toml"]


def test_chain_args(chain):
    assert words(chain.args) == ["--max-model-len", "32768", "--max_num_seqs=24", "--kv-cache-dtype", "fp8",
                                 "--block-size", "256", "--served-model-name", "leaf"]
    assert [a.origin for a in chain.args] == [o("base", 10), o("base", 10), o("leaf", 5), o("base", 13),
                                              o("base", 13), o("mid", 3), o("mid", 3), o("leaf", 6), o("leaf", 6)]


def test_chain_scalars_override(chain):
    assert (chain.name, chain.shm_size, chain.engine, chain.docker_image) == (
        "Leaf", "32gb", "vllm", "vllm/vllm-openai:v0.11.0")
    assert chain.origins["name"] == o("leaf", 2)
    assert chain.origins["shm_size"] == o("mid", 2)
    assert chain.origins["engine"] == o("base", 1)
    assert chain.origins["required_nodes"] == o("base", 5)
    assert chain.pipeline_parallel_size == 1 and chain.origins["pipeline_parallel_size"] == DEFAULT
    assert chain.distributed_backend == "mp" and chain.origins["distributed_backend"] == DEFAULT


def test_chain_env_merges_by_key_and_remove_env_removes(chain):
    assert chain.env == {"HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "DEBUG", "CUDA_VISIBLE_DEVICES": "0"}
    assert chain.env_origins == {"HF_HUB_OFFLINE": o("base", 26), "VLLM_LOGGING_LEVEL": o("mid", 7),
                                 "CUDA_VISIBLE_DEVICES": o("leaf", 14)}


def test_chain_mounts_merge_by_container_path(chain):
    assert [(m.host, m.container, m.read_only, m.origin) for m in chain.mounts] == [
        ("~/.cache/vllm-leaf", "/root/.cache/vllm", False, o("leaf", 9)),
        ("/data/models", "/models", True, o("base", 20)),
    ]


def test_middle_recipe_alone(tmp_path, monkeypatch, chain):
    mid = load_recipe(tmp_path / "recipes" / "mid" / "recipe.toml", tmp_path / "recipes")
    assert words(mid.args) == ["--max-model-len", "32768", "--max-num-seqs", "16", "--enforce-eager",
                               "--kv-cache-dtype", "fp8", "--block-size", "256"]
    assert mid.origins["shm_size"] == Origin("recipe", "recipes/mid/recipe.toml", 2)
    assert mid.name == "Base"
    assert "OMP_NUM_THREADS" not in mid.env and mid.env["VLLM_LOGGING_LEVEL"] == "DEBUG"


def test_extends_by_id_falls_back_to_the_recipes_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "recipes" / "base" / "recipe.toml", BASE)
    child = write(tmp_path / "elsewhere" / "kid" / "recipe.toml", 'extends = "base"\nname = "Kid"\n')
    recipe = load_recipe(child, tmp_path / "recipes")
    assert recipe.name == "Kid" and recipe.model == "Qwen/Qwen3-32B"
    assert recipe.origins["model"] == Origin("parent recipe base", "recipes/base/recipe.toml", 4)


def test_extends_by_path_to_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "recipes" / "base" / "recipe.toml", BASE)
    child = write(tmp_path / "recipes" / "kid" / "recipe.toml", 'extends = "../base"\nshm_size = "8gb"\n')
    recipe = load_recipe(child, tmp_path / "recipes")
    assert recipe.shm_size == "8gb" and recipe.engine == "vllm"


def test_required_keys_may_come_from_any_ancestor(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "recipes" / "half" / "recipe.toml", 'extends = "top"\n')
    write(tmp_path / "recipes" / "top" / "recipe.toml", 'extends = "root"\nengine = "sglang"\n')
    write(tmp_path / "recipes" / "root" / "recipe.toml", 'engine = "vllm"\ndocker_image = "x/y:z"\nmodel = "a/b"\n')
    recipe = load_recipe(tmp_path / "recipes" / "half", tmp_path / "recipes")
    assert (recipe.engine, recipe.model, recipe.docker_image) == ("sglang", "a/b", "x/y:z")
    assert recipe.entrypoint == ("python3", "-m", "sglang.launch_server")  # the engine's default, not the root's


def test_root_of_a_chain_must_have_the_required_keys(tmp_path, monkeypatch):
    """The recipe at the top of a chain extends nothing, so the schema requires engine, docker_image, model there."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "recipes" / "kid" / "recipe.toml", 'extends = "root"\nmodel = "a/b"\n')
    write(tmp_path / "recipes" / "root" / "recipe.toml", 'engine = "vllm"\ndocker_image = "x/y:z"\n')
    with pytest.raises(RecipegenError) as exc:
        load_recipe(tmp_path / "recipes" / "kid", tmp_path / "recipes")
    assert [d.file for d in exc.value.diagnostics] == ["recipes/root/recipe.toml"]
    assert "model" in exc.value.diagnostics[0].message


# --- missing parents and cycles -------------------------------------------------------------------------------


def error_of(path: Path, recipes_dir: Path):
    with pytest.raises(RecipegenError) as exc:
        load_recipe(path, recipes_dir)
    (d,) = exc.value.diagnostics
    return d


def test_missing_parent_names_child_line_and_parent(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    child = write(tmp_path / "recipes" / "orphan" / "recipe.toml",
                  '# a fork of a recipe that is not there\nname = "Orphan"\nextends = "nosuch"\n')
    d = error_of(child, tmp_path / "recipes")
    assert (d.file, d.line, d.key) == ("recipes/orphan/recipe.toml", 3, "extends")
    assert "'nosuch'" in d.message and "not found" in d.message


def test_missing_parent_by_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    child = write(tmp_path / "recipes" / "orphan" / "recipe.toml", 'extends = "../gone/recipe.toml"\n')
    d = error_of(child, tmp_path / "recipes")
    assert (d.file, d.line) == ("recipes/orphan/recipe.toml", 1)
    assert "'../gone/recipe.toml'" in d.message


def test_missing_grandparent_names_the_parent_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "recipes" / "mid" / "recipe.toml", 'name = "Mid"\n\nextends = "gone"\n')
    child = write(tmp_path / "recipes" / "leaf" / "recipe.toml", 'extends = "mid"\n')
    d = error_of(child, tmp_path / "recipes")
    assert (d.file, d.line) == ("recipes/mid/recipe.toml", 3)
    assert "'gone'" in d.message


def test_cycle_of_two(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = write(tmp_path / "recipes" / "a" / "recipe.toml", 'extends = "b"\n')
    write(tmp_path / "recipes" / "b" / "recipe.toml", 'name = "B"\nextends = "a"\n')
    d = error_of(a, tmp_path / "recipes")
    assert "cycle" in d.message
    assert "recipes/a/recipe.toml" in d.message and "recipes/b/recipe.toml" in d.message
    assert (d.file, d.line, d.key) == ("recipes/b/recipe.toml", 2, "extends")  # the link that closes the cycle


def test_cycle_of_three(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = write(tmp_path / "recipes" / "a" / "recipe.toml", 'extends = "b"\n')
    write(tmp_path / "recipes" / "b" / "recipe.toml", 'extends = "c"\n')
    write(tmp_path / "recipes" / "c" / "recipe.toml", 'extends = "../a/recipe.toml"\n')
    d = error_of(a, tmp_path / "recipes")
    assert "cycle" in d.message
    assert ("recipes/a/recipe.toml -> recipes/b/recipe.toml -> recipes/c/recipe.toml -> recipes/a/recipe.toml"
            in d.message)
    assert d.file == "recipes/c/recipe.toml"


@pytest.mark.parametrize("ref", ["self", "recipe.toml", "../self", "./recipe.toml"])
def test_recipe_extending_itself(tmp_path, monkeypatch, ref):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path / "recipes" / "self" / "recipe.toml", f'engine = "vllm"\nextends = "{ref}"\n')
    d = error_of(path, tmp_path / "recipes")
    assert "cycle" in d.message and "recipes/self/recipe.toml" in d.message
    assert (d.file, d.line) == ("recipes/self/recipe.toml", 2)


def test_cycle_through_the_cli_exits_1(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "recipes" / "a" / "recipe.toml", 'extends = "b"\n')
    write(tmp_path / "recipes" / "b" / "recipe.toml", 'extends = "a"\n')
    result = CliRunner().invoke(main, ["validate", "recipes/a/recipe.toml"])
    assert result.exit_code == 1
    assert "recipes/b/recipe.toml:1:11: error: extends: recipes extend each other in a cycle" in result.stderr


# --- the shipped pair: the agent recipe is the standalone recipe it replaced -------------------------------------


@pytest.fixture
def standalone_project(tmp_path, monkeypatch) -> Path:
    """A project whose only recipe is the standalone agent recipe, with the shipped cluster."""
    write(tmp_path / "recipes" / AGENT / "recipe.toml", STANDALONE.read_text("utf-8"))
    shutil.copy(ROOT / "cluster.toml", tmp_path / "cluster.toml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_agent_extends_the_batch_recipe():
    agent = load_recipe(ROOT / "recipes" / AGENT, ROOT / "recipes")
    assert [d.path.resolve() for d in agent.documents] == [
        (ROOT / "recipes" / AGENT / "recipe.toml").resolve(),
        (ROOT / "recipes" / "deepseek-v4-flash-eugr" / "recipe.toml").resolve()]


def test_agent_resolves_to_the_standalone_recipe(standalone_project):
    child = load_recipe(ROOT / "recipes" / AGENT, ROOT / "recipes")
    alone = load_recipe(standalone_project / "recipes" / AGENT, standalone_project / "recipes")
    assert words(child.args) == words(alone.args)  # word for word, in order
    assert child.env == alone.env and list(child.env) == list(alone.env)
    assert [(m.host, m.container, m.read_only) for m in child.mounts] == [
        (m.host, m.container, m.read_only) for m in alone.mounts]
    for key in ("id", "engine", "name", "docker_image", "docker_image_dir", "model", "required_nodes",
                "tensor_parallel_size", "pipeline_parallel_size", "distributed_backend", "shm_size", "entrypoint"):
        assert getattr(child, key) == getattr(alone, key), key


def test_standalone_compiles_to_the_committed_output(standalone_project):
    out = standalone_project / "out"
    result = CliRunner().invoke(main, ["build", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    committed = ROOT / "out" / AGENT
    built = out / AGENT
    names = sorted(p.relative_to(committed).as_posix() for p in committed.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(built).as_posix() for p in built.rglob("*") if p.is_file())
    assert names == ["group-watch.py", "spark1/compose.yaml", "spark2/compose.yaml", "stack.yaml"]
    for name in names:
        assert (built / name).read_bytes() == (committed / name).read_bytes(), name
    assert not filecmp.dircmp(committed, built).diff_files
