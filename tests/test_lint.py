"""Every lint rule, through the real CLI: a bad recipe that triggers exactly that rule and a good recipe, as close
to the bad one as possible, with no finding at all.

Fixtures live in tests/lint/<rule-id>/{good,bad}/recipe.toml and are checked against tests/lint/cluster.toml
(two nodes, one GPU each, the fabric in [env], gpu_memory_ceiling 0.9). The expected line numbers below were
counted by hand from the fixture files: a finding must point at the line a person would fix.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from generator.check.rules import RULES
from generator.check.secrets import SECRET_FIX
from generator.cli import main
from helpers.lint import CLUSTER, FINDING, Finding, HEAD, LINT, ROOT, findings, run, tmp_recipe, validate  # noqa: F401 - moved to tests/helpers/

HOW_TO_PASS = "list its name in `pass_env`"


@pytest.fixture(autouse=True)
def _in_project(monkeypatch):
    monkeypatch.chdir(ROOT)  # file names in messages are shown relative to the working directory


@dataclass(frozen=True)
class Bad:
    """What the bad fixture must produce: one finding of this rule, at this line, naming this key."""

    rule: str
    severity: str
    line: int
    key: str
    names: tuple[str, ...]  # the flag / variable / value the message must name
    folder: str = "bad"
    col: int = 1  # where the key, the array element or the [[table]] name starts, counted by hand
    hf_cache: bool = False  # the `fit` rules: run with tests/fixtures/hf-cache as the local Hugging Face cache


ERROR, WARNING, NOTE = "error", "warning", "note"
# Line numbers counted by hand from the fixtures (see each file).
CASES = [
    Bad("owned-flag", ERROR, 11, "args", ("'--node-rank'", "set by the compiler"), col=5),
    Bad("owned-env", ERROR, 16, "env.MASTER_ADDR", ("'MASTER_ADDR'", "set per rank by the compiler")),
    Bad("bad-json", ERROR, 11, "args", ("'--compilation-config'", "not valid JSON"), col=5),
    Bad("duplicate-flag", WARNING, 11, "args", ("'--max-model-len'", "given twice", "first at line 9"), col=5),
    Bad("parallel-size", ERROR, 6, "tensor_parallel_size",
        ("tensor_parallel_size x pipeline_parallel_size = 1", "2 node(s) x 1 GPU = 2")),
    Bad("too-many-nodes", ERROR, 5, "required_nodes", ("needs 3 nodes", "'lint-duo' has 2")),
    Bad("sglang-backend", ERROR, 7, "distributed_backend", ("SGLang", "'mp'")),
    Bad("cudagraph-capture", WARNING, 14, "args",
        ("--max-cudagraph-capture-size 24", "8 x 4 = 32", "num_speculative_tokens = 3"), col=5),
    Bad("gpu-memory", WARNING, 10, "args", ("--gpu-memory-utilization 0.95", "gpu_memory_ceiling 0.9", "unified"),
        col=5),
    Bad("gpu-memory-range", ERROR, 10, "args", ("--gpu-memory-utilization 1.2", "(0, 1]"), col=5),
    Bad("fabric-env", WARNING, 16, "env.NCCL_SOCKET_IFNAME", ("NCCL_SOCKET_IFNAME", "overrides the cluster")),
    Bad("secret", ERROR, 16, "env.HF_AUTH", ("looks like a secret", HOW_TO_PASS)),  # an hf_ token as a value
    Bad("secret", ERROR, 16, "env.HF_TOKEN", ("looks like a secret", HOW_TO_PASS), "bad-env-name"),
    Bad("secret", ERROR, 11, "args", ("looks like a secret", HOW_TO_PASS), "bad-args", col=5),  # sk-... inside args
    Bad("pass-env", ERROR, 7, "pass_env", ("'NCCL_SOCKET_IFNAME'", "also has a value")),
    Bad("mount-target", ERROR, 10, "extra_mounts", ("/root/.cache/huggingface/", "Hugging Face cache"), col=3),
    Bad("container-user", ERROR, 8, "container_user", ("container_user 'vllm' is a name", "numeric UID[:GID]")),
    Bad("container-user", ERROR, 7, "mods", ("mod 'patch-qwen': __init__.py is empty", "as container_user '1000:1000'"),
        "bad-empty-file", col=9),
    Bad("remove-unused", WARNING, 3, "remove_args", ("'--enforce-eagre'", "not set by any parent"), col=16),
    Bad("shell-literal", WARNING, 11, "args", ("'$HOME/templates/qwen3.jinja'", "reaches the engine literally",
                                                "recipegen runs no shell", "expanded $HOME"), col=24),
    Bad("shell-literal", WARNING, 11, "args", ("'qwen3 \\\\' ends in a backslash", "' --enable-prefix-caching'",
                                               "remove the backslash"), "bad-backslash", col=28),
    Bad("unknown-flag", WARNING, 11, "args", ("'--max-num-seq' is not a vllm 0.34.0 flag",
                                              "did you mean '--max-num-seqs'?"), col=5),
    Bad("flag-value", ERROR, 11, "args", ("'--max-num-seqs' takes an integer, not '6.5'", "vllm 0.34.0"), col=5),
    Bad("engine-release", WARNING, 3, "docker_image", ("vllm 0.11.0 has no --nnodes",
                                                       "of the vllm releases checked, 0.31.0, 0.32.0, 0.33.0, 0.34.0 "
                                                       "have them, 0.10.2, 0.11.0 do not",
                                                       "distributed_backend = 'ray'"), col=1),
    Bad("ray-option", WARNING, 11, "ray_args", ("'--num-cpu' is not a `ray start` option of Ray 2.60.0",
                                                 "did you mean '--num-cpus'?"), col=5),
    Bad("ray-value", ERROR, 11, "ray_args", ("'--num-cpus' takes a value", "'--disable-usage-stats'"), col=5),
    Bad("ray-word", ERROR, 11, "ray_args", ("'true' is no option's value", "takes no positional word"), col=30),
    Bad("ray-unused", WARNING, 10, "ray_args", ("ignored", "starts no Ray", "distributed_backend is not 'ray'"),
        col=5),
    Bad("flag-arity", ERROR, 8, "args", ("'--max-model-len' takes a value, but none follows it",
                                         "'--max-num-seqs' is a flag", "vllm 0.34.0"), col=9),
    Bad("port-collision", ERROR, 8, "args", ("--port 29501", "master_port", "only one of them can bind"), col=9),
    Bad("model-mount", WARNING, 4, "model", ("'/data/qwen3-32b'", "no mount reaches", "/models",
                                             "/root/.cache/huggingface")),
    Bad("outside-project", ERROR, 9, "mods", ("'../../../fixtures/outside-project/patch'", "outside the project",
                                              "other clones"), col=9),
    Bad("outside-project", ERROR, 9, "docker_image_dir", ("'../../../fixtures/outside-project/ctx'",
                                                          "outside the project"), "bad-image-dir"),
    Bad("build-context", ERROR, 9, "docker_image_dir", ("ctx holds no Dockerfile", "Docker refuses to build it")),
    Bad("shm-ignored", WARNING, 8, "shm_size", ("shm_size 64g has no effect", "ipc = \"host\"")),
    Bad("build-settings", WARNING, 10, "build_args", ("without `docker_image_dir` builds nothing",
                                                      "the image is pulled")),
    Bad("stack-argument", ERROR, 9, "setup", ("node node1's launcher", "above Linux's 128 KiB per argument")),
    Bad("fit", ERROR, 4, "model", ("rank 0-1 (node1, node2)", "of weights", "budget 107.6 GiB", "cannot load"),
        hf_cache=True),
    Bad("fit-context", WARNING, 9, "args", ("one request of --max-model-len 131072", "check_enough_kv_cache_memory",
                                            "the largest --max-model-len that fits is"), col=5, hf_cache=True),
    Bad("fit-capacity", NOTE, 4, "model", ("tokens", "requests of 32,768 tokens at once"), hf_cache=True),
    Bad("fit-unknown", NOTE, 4, "model", ("'Qwen/Qwen3-Coder-480B-A35B-Instruct'", "not judged",
                                          "recipegen fit bad --config"), hf_cache=True),
]
RULE_IDS = [r.id for r in RULES]


def _id(case: Bad) -> str:
    return case.rule if case.folder == "bad" else f"{case.rule}/{case.folder}"


# --- the fixtures cover the rules ---------------------------------------------------------------------------


def test_every_rule_has_a_good_and_a_bad_fixture():
    """A new rule without fixtures (or a renamed one) fails here."""
    missing = [f"tests/lint/{r.id}/{kind}/recipe.toml" for r in RULES for kind in ("good", "bad")
               if not (LINT / r.id / kind / "recipe.toml").is_file()]
    assert not missing, f"rules without fixtures: {missing}"


def test_every_fixture_folder_is_a_rule():
    folders = {p.name for p in LINT.iterdir() if p.is_dir()}
    assert folders <= set(RULE_IDS), f"fixtures of no rule: {sorted(folders - set(RULE_IDS))}"


def test_every_rule_has_an_expected_bad_case():
    assert {c.rule for c in CASES if c.folder == "bad"} == set(RULE_IDS)
    assert len(RULE_IDS) == len(set(RULE_IDS)), "two rules share an id"


def test_rule_severities_are_the_documented_ones():
    expected = {c.rule: c.severity for c in CASES}
    assert {r.id: r.severity.value for r in RULES} == expected


def test_lint_cluster_itself_is_clean():
    result = run("validate", str(CLUSTER))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "ok"


# --- bad: exactly the rule, at the right line -----------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_bad_recipe_triggers_exactly_its_rule(case: Bad, monkeypatch):
    if case.hf_cache:
        from conftest import HF_FIXTURE_CACHE

        monkeypatch.setenv("HF_HUB_CACHE", str(HF_FIXTURE_CACHE))
    path = LINT / case.rule / case.folder / "recipe.toml"
    result = validate(path)
    found = findings(result)
    assert len(found) == 1, result.stderr
    (f,) = found
    assert f.rule == case.rule
    assert f.severity == case.severity
    assert f.file == f"tests/lint/{case.rule}/{case.folder}/recipe.toml"
    assert f.line == case.line, f"{case.rule} points at line {f.line}, the fixture has it at {case.line}"
    assert f.col == case.col, f"{case.rule} points at column {f.col}, the fixture has it at {case.col}"
    assert f.key == case.key
    for name in case.names:
        assert name in f.message, f"message does not name {name!r}: {f.message}"
    # errors fail validation; warnings fail only with --strict; notes never
    assert result.exit_code == (1 if case.severity == ERROR else 0), result.output
    assert validate(path, "--strict").exit_code == (0 if case.severity == NOTE else 1)


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_good_recipe_has_no_finding(rule_id: str):
    path = LINT / rule_id / "good" / "recipe.toml"
    result = validate(path, "--strict")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.strip() == "ok"


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_good_differs_from_bad_in_few_lines(rule_id: str):
    """'As close as possible': the pair differs in its comment and the lines of the mistake only."""
    good = (LINT / rule_id / "good" / "recipe.toml").read_text("utf-8").splitlines()
    bad = (LINT / rule_id / "bad" / "recipe.toml").read_text("utf-8").splitlines()
    assert len(good) == len(bad)
    differing = [i + 1 for i, (g, b) in enumerate(zip(good, bad)) if g != b and not g.startswith("#")]
    assert 1 <= len(differing) <= 2, differing


# --- more spellings of the same mistakes (tmp recipes) ----------------------------------------------------------


@pytest.mark.parametrize("args, flag", [
    ('    "--tensor_parallel_size", "2",\n', "--tensor-parallel-size"),  # underscore spelling
    ('    "-tp=2",\n', "-tp"),
    ('    "--master-addr=10.0.0.1",\n', "--master-addr"),
    ('    "--max-model-len", "4096",\n    "--headless",\n', "--headless"),
    ('    "--model", "Qwen/Qwen3-32B",\n', "--model"),
])
def test_owned_flag_spellings(tmp_path, args, flag):
    result = validate(tmp_recipe(tmp_path, args))
    (f,) = findings(result)
    assert (f.rule, f.line, f.key) == ("owned-flag", 7 + args.count("\n") - 1, "args")
    assert f"'{flag}'" in f.message
    assert result.exit_code == 1


@pytest.mark.parametrize("args, flag", [
    ('    "--tp-size", "2",\n', "--tp-size"),
    ('    "--dist-init-addr", "10.0.0.1:5000",\n', "--dist-init-addr"),
    ('    "--node_rank", "0",\n', "--node-rank"),
])
def test_owned_flag_sglang_spellings(tmp_path, args, flag):
    result = validate(tmp_recipe(tmp_path, args, engine="sglang"))
    (f,) = findings(result)
    assert (f.rule, f.line) == ("owned-flag", 7)
    assert f"'{flag}'" in f.message


def test_positional_first_word_is_the_compilers(tmp_path):
    result = validate(tmp_recipe(tmp_path, '    "Qwen/Qwen3-32B",\n    "--max-model-len", "4096",\n'))
    (f,) = findings(result)
    assert (f.rule, f.line, f.key) == ("owned-flag", 7, "args")
    assert "'Qwen/Qwen3-32B' is not a flag" in f.message


def test_sglang_mem_fraction_above_ceiling(tmp_path):
    result = validate(tmp_recipe(tmp_path, '    "--mem-fraction-static", "0.93",\n', engine="sglang"))
    (f,) = findings(result)
    assert (f.rule, f.line) == ("gpu-memory", 7)
    assert "--mem-fraction-static 0.93" in f.message


def test_gpu_memory_inline_value(tmp_path):
    result = validate(tmp_recipe(tmp_path, '    "--gpu-memory-utilization=0.91",\n'))
    (f,) = findings(result)
    assert (f.rule, f.line) == ("gpu-memory", 7)


def test_json_with_a_leading_newline_is_valid(tmp_path):
    """The launcher's multi-line form: a basic string starting with a newline, then the quoted JSON."""
    result = validate(tmp_recipe(tmp_path, '    "--speculative-config", "\\n\'{\\"num_speculative_tokens\\": 2}\'",\n'))
    assert result.exit_code == 0 and findings(result) == [], result.stderr


def test_dotted_flags_with_different_subkeys_are_not_duplicates(tmp_path):
    args = ('    "--default-chat-template-kwargs.thinking=true",\n'
            '    "--default-chat-template-kwargs.reasoning_effort=high",\n')
    # --default-chat-template-kwargs is newer than vLLM 0.11.0 (unknown-flag says so): a release that has it
    result = validate(tmp_recipe(tmp_path, args, image="vllm/vllm-openai:v0.34.0"), "--strict")
    assert result.exit_code == 0 and findings(result) == [], result.stderr


def test_parallel_size_with_default_tp_points_at_required_nodes(tmp_path):
    path = tmp_path / "case" / "recipe.toml"
    path.parent.mkdir()
    path.write_text('engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\nmodel = "Qwen/Qwen3-32B"\n'
                    "required_nodes = 2\n", "utf-8")
    result = validate(path)
    assert result.exit_code == 1
    # today: "<file>: error[parallel-size]: tensor_parallel_size: ..." with no line at all
    assert "recipe.toml:4:1: error[parallel-size]: tensor_parallel_size: " in result.stderr


# --- secrets ----------------------------------------------------------------------------------------------------


def test_secret_in_a_cluster_file():
    path = LINT / "secret" / "bad-cluster" / "cluster.toml"
    result = run("validate", str(path))
    (f,) = findings(result)
    # line 13 is `HF_TOKEN = "hf_..."`; the finding points at the value (column 12)
    assert (f.file, f.line, f.col) == ("tests/lint/secret/bad-cluster/cluster.toml", 13, 12)
    assert (f.rule, f.severity, f.key) == ("secret", ERROR, "env.HF_TOKEN")
    assert HOW_TO_PASS in f.message
    assert result.exit_code == 1


def test_cluster_without_secret_is_clean():
    result = run("validate", str(LINT / "secret" / "good-cluster" / "cluster.toml"), "--strict")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_secret_in_a_node_env_of_a_cluster(tmp_path):
    text = CLUSTER.read_text("utf-8").replace('context = "node2"\n',
                                              'context = "node2"\n\n[nodes.env]\nGH_PAT = "ghp_FakeForTests000000000000000000000000"\n')
    path = tmp_path / "cluster.toml"
    path.write_text(text, "utf-8")
    line = text.splitlines().index('GH_PAT = "ghp_FakeForTests000000000000000000000000"') + 1
    result = run("validate", str(path))
    (f,) = findings(result)
    assert (f.rule, f.line, f.key) == ("secret", line, "nodes[1].env.GH_PAT")


def test_secret_named_engine_flags_are_judged_by_the_engines_flag_data():
    """Every flag of the flag data with "token", "key" or "pass" in its name: a number or a switch there (a count,
    a size, a threshold) is no secret; these four take one."""
    import json
    import re

    from generator.check.secrets import secret_flag

    data = json.loads((ROOT / "generator" / "data" / "engine_flags.json").read_text("utf-8"))["engines"]
    named = {(engine, flag) for engine, table in data.items() for flag in table["flags"]
             if re.search("token|key|pass", flag, re.I)}
    assert ("vllm", "--long-prefill-token-threshold") in named and len(named) > 40
    judged = {(engine, flag) for engine, flag in named if secret_flag(engine, flag)}
    assert judged == {("sglang", "--api-key"), ("sglang", "--admin-api-key"), ("sglang", "--ssl-keyfile-password"),
                      ("vllm", "--api-key"), ("vllm", "--hf-token")}


def test_a_numeric_flag_named_like_a_token_is_not_a_secret(tmp_path):
    for spelling in ("--long-prefill-token-threshold", "--long_prefill_token_threshold"):
        result = validate(tmp_recipe(tmp_path, f'    "{spelling}", "4096",\n'), "--strict")
        assert "secret" not in result.stderr, result.stderr
    result = validate(tmp_recipe(tmp_path, '    "--api-key", "abc",\n'))
    assert "error[secret]" in result.stderr and "--api-key" in result.stderr


def test_secret_message_explains_how_to_pass_it():
    assert HOW_TO_PASS in SECRET_FIX and "out/" in SECRET_FIX


def test_empty_secret_named_variable_is_not_a_secret(tmp_path):
    """An empty value holds nothing to leak."""
    result = validate(tmp_recipe(tmp_path, '    "--max-model-len", "4096",\n', env='HF_TOKEN = ""\n'), "--strict")
    assert result.exit_code == 0, result.stderr


def test_tokenizers_parallelism_is_not_a_secret(tmp_path):
    result = validate(tmp_recipe(tmp_path, '    "--max-model-len", "4096",\n',
                                 env='TOKENIZERS_PARALLELISM = "false"\n'), "--strict")
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize("folder", ["bad", "bad-env-name", "bad-args"])
def test_build_refuses_a_recipe_with_a_secret(tmp_path, folder):
    out = tmp_path / "out"
    out.mkdir()
    result = run("build", str(LINT / "secret" / folder / "recipe.toml"), "--cluster", str(CLUSTER), "--out", str(out))
    assert result.exit_code == 1
    assert "error[secret]" in result.stderr and HOW_TO_PASS in result.stderr
    assert list(out.iterdir()) == []


def test_build_writes_the_good_recipe(tmp_path):
    """The control of the test above: the same command with the good recipe does write."""
    out = tmp_path / "out"
    out.mkdir()
    result = run("build", str(LINT / "secret" / "good" / "recipe.toml"), "--cluster", str(CLUSTER), "--out", str(out))
    assert result.exit_code == 0, result.stderr
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.yaml")) == [
        "good/node1/compose.yaml", "good/node2/compose.yaml", "good/stack.yaml"]


def test_build_refuses_a_cluster_with_a_secret(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    result = run("build", str(LINT / "secret" / "good" / "recipe.toml"),
                 "--cluster", str(LINT / "secret" / "bad-cluster" / "cluster.toml"), "--out", str(out))
    assert list(out.rglob("*.yaml")) == [], "the token landed in out/"
    assert result.exit_code == 1
    assert "error[secret]" in result.stderr


# --- secrets: wider names and values, and the ordinary ones that must stay unflagged ------------------------------

def _env_names_in_the_repository() -> set[str]:
    """Every env name the shipped recipes, the cluster and the golden inputs use: all ordinary."""
    import tomllib

    names: set[str] = set()

    def walk(value):
        if isinstance(value, dict):
            for k, v in value.items():
                if k == "env" and isinstance(v, dict):
                    names.update(v)
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for path in [*ROOT.glob("recipes/**/*.toml"), *ROOT.glob("tests/golden/**/*.toml"), ROOT / "cluster.toml"]:
        walk(tomllib.loads(path.read_text("utf-8")))
    return names


# Common vLLM / SGLang / NCCL / CUDA / PyTorch / Hugging Face / Ray / shell variables: none is a secret.
ORDINARY_NAMES = [
    "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_HUB_ENABLE_HF_TRANSFER", "HF_HUB_DISABLE_TELEMETRY",
    "HF_ENDPOINT", "HF_DATASETS_OFFLINE", "HF_HUB_DOWNLOAD_TIMEOUT", "TRANSFORMERS_OFFLINE", "TRANSFORMERS_CACHE",
    "TOKENIZERS_PARALLELISM", "VLLM_LOGGING_LEVEL", "VLLM_ATTENTION_BACKEND", "VLLM_WORKER_MULTIPROC_METHOD",
    "VLLM_CACHE_ROOT", "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "VLLM_USE_V1", "VLLM_RPC_TIMEOUT", "VLLM_PORT",
    "VLLM_ENGINE_ITERATION_TIMEOUT_S", "VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE", "MAX_NUM_BATCHED_TOKENS",
    "SGLANG_DISABLE_TOKENIZER_BATCH_DECODE", "SGLANG_ENABLE_TORCH_COMPILE", "NCCL_IB_GID_INDEX",
    "NCCL_NET_GDR_LEVEL", "NCCL_IB_SL", "NCCL_IB_TC", "NCCL_NVLS_ENABLE", "NCCL_ALGO", "NCCL_PROTO",
    "NCCL_MIN_NCHANNELS", "NCCL_TOPO_FILE", "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD", "UCX_TLS",
    "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING", "CUDA_HOME", "LD_LIBRARY_PATH", "PATH", "PYTHONPATH",
    "PYTHONUNBUFFERED", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_DISTRIBUTED_DEBUG", "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR", "RAY_ADDRESS", "RAY_memory_monitor_refresh_ms", "MAX_JOBS", "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES", "MKL_NUM_THREADS", "HOME", "PWD", "USER", "LANG", "TZ", "SSH_AUTH_SOCK",
    "WANDB_PROJECT", "WANDB_MODE", "WANDB_DIR", "PASSTHROUGH_MODE", "KEYRING_BACKEND", "HF_TOKEN_PATH",
    "SSH_KEY_FILE", "GPG_PUBLIC_KEY", "CACHE_KEY", "VLLM_CACHE_KEY", "SORT_KEY", "MONKEY", "TURNKEY",
]
ORDINARY_VALUES = [
    "https://huggingface.co/Qwen/Qwen3-32B", "http://10.0.0.1:8000/v1", "ssh://spark@spark1.local",
    "expandable_segments:True", "user@host:/srv/models", "https://host:443/api@v1", "redis://cache:6379/0",
    "postgres://db.local:5432/runs", "Basic", "bearer", "Bearer", '{"method": "mtp", "num_speculative_tokens": 2}',
    "rocep1s0f0,roceP2p1s0f0", "enp1s0f0np0", "12.1a", "sm_121a", "/root/.cache/huggingface", "PCI_BUS_ID",
    "0x1F", "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8", "a" * 64, "sha256:" + "0" * 64,
]
SECRET_NAMES = ["HFTOKEN", "HF_TOKEN", "HF_HUB_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GITHUBTOKEN", "SSH_PASSPHRASE",
                "WANDB_KEY", "WANDB_API_KEY", "OPENAI_KEY", "OPENAI_API_KEY", "ANTHROPIC_KEY", "AWS_SECRET_ACCESS_KEY",
                "DB_PASSWORD", "REDIS_PASS", "SIGNING_KEY", "SSH_PRIVATE_KEY", "GOOGLE_CREDENTIALS", "VLLM_API_KEY"]
SECRET_VALUES = ["https://user:pw@host/org/repo", "git+https://oauth2:abc123@gitlab.example/x.git",
                 "redis://:hunter2@cache:6379/0", "Bearer abcdef1234567890", "Authorization: Bearer eyJhb.abc.def",
                 "Basic dXNlcjpwYXNzd29yZA==", "hf_" + "a" * 34]


@pytest.mark.parametrize("name", sorted(_env_names_in_the_repository()) + ORDINARY_NAMES)
def test_ordinary_env_names_are_not_secrets(name):
    from generator.check.secrets import secret_name

    assert not secret_name(name)


@pytest.mark.parametrize("value", ORDINARY_VALUES)
def test_ordinary_values_are_not_secrets(value):
    from generator.check.secrets import SECRET_VALUE

    assert not SECRET_VALUE.search(value)


def test_the_repository_has_env_names_to_check():
    assert len(_env_names_in_the_repository()) >= 20


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names_are_refused(tmp_path, name):
    result = validate(tmp_recipe(tmp_path, '    "--max-model-len", "4096",\n', env=f'{name} = "x"\n'))
    (f,) = findings(result)
    assert (f.rule, f.key) == ("secret", f"env.{name}")


@pytest.mark.parametrize("value", SECRET_VALUES)
@pytest.mark.parametrize("where", ["env", "args", "mount"])
def test_secret_values_are_refused_anywhere(tmp_path, value, where):
    quoted = json.dumps(value)
    if where == "env":
        path = tmp_recipe(tmp_path, '    "--max-model-len", "4096",\n', env=f"SOURCE = {quoted}\n")
    elif where == "args":
        path = tmp_recipe(tmp_path, f'    "--served-model-name", {json.dumps(shlex.quote(value))},\n')
    else:
        path = tmp_recipe(tmp_path, '    "--max-model-len", "4096",\n')
        path.write_text(path.read_text("utf-8").replace(
            "args = [", f'extra_mounts = [{{ host = "/srv", container = {json.dumps("/m/" + value)} }}]\nargs = ['),
            "utf-8")
    result = validate(path)
    assert result.exit_code == 1, result.stderr
    assert [f.rule for f in findings(result)] == ["secret"], result.stderr


def test_secret_in_a_cluster_pass_env_value_is_refused(tmp_path):
    text = CLUSTER.read_text("utf-8").replace("[env]\n", '[env]\nPROXY = "http://me:pw@proxy:3128"\n', 1)
    path = tmp_path / "cluster.toml"
    path.write_text(text, "utf-8")
    result = run("validate", str(path))
    assert [(f.rule, f.key) for f in findings(result)] == [("secret", "env.PROXY")], result.stderr


# --- bad-json: JSON without shell quotes -------------------------------------------------------------------------

QUOTING_HINT = "wrap it in single quotes inside the string"


@pytest.mark.parametrize("args, became", [
    ('    "--speculative-config", "{\\"method\\": \\"mtp\\", \\"num_speculative_tokens\\": 2}",\n', "4 words"),
    ('    "--compilation-config", "{\\"level\\":3}",\n', "1 word without its double quotes"),
    ('    "--speculative-config={\\"method\\": \\"mtp\\"}",\n', "2 words"),
    ('    "--override-generation-config", "{\\"temperature\\": 0.6,}",\n', "2 words"),
    ('    "--hf-overrides", "{\\"max_position_embeddings\\": 4096}",\n', "2 words"),  # vLLM: JSON when {...}
])
def test_unquoted_json_hints_at_shell_quotes(tmp_path, args, became):
    result = validate(tmp_recipe(tmp_path, args))
    (f,) = findings(result)
    assert f.rule == "bad-json" and f"this JSON became {became}: {QUOTING_HINT}" in f.message, f.message


@pytest.mark.parametrize("args", [
    "    \"--override-generation-config\", \"'{\\\"temperature\\\": 0.6,}'\",\n",  # quoted, a real typo
    '    "--compilation-config", """\n\'{"cudagraph_mode": "FULL",}\'""",\n',
])
def test_quoted_json_typo_has_no_quoting_hint(tmp_path, args):
    result = validate(tmp_recipe(tmp_path, args))
    (f,) = findings(result)
    assert f.rule == "bad-json" and QUOTING_HINT not in f.message, f.message


# --- unknown-flag and flag-value: the engine release the image runs -------------------------------------------


@pytest.mark.parametrize("args, engine, image, names", [
    ('    "--gpu-memory-utilisation", "0.8",\n', "vllm", "vllm/vllm-openai:v0.11.0",
     ("'--gpu-memory-utilisation' is not a vllm 0.11.0 flag", "did you mean '--gpu-memory-utilization'?")),
    ('    "--max-cudagraph-capture-size", "32",\n', "vllm", "vllm/vllm-openai:v0.11.0",
     ("not a vllm 0.11.0 flag", "it is in 0.31.0 and later")),
    ('    "--max", "8",\n', "vllm", "vllm/vllm-openai:v0.34.0", ("ambiguous abbreviation", "'--max-")),
    ('    "--mem_fraction_static", "0.8",\n', "sglang", "lmsysorg/sglang:v0.5.3-cu129",
     ("not a sglang 0.5.3 flag", "did you mean '--mem-fraction-static'?")),
    ('    "--mem_fraction_static", "0.8",\n', "sglang", "lmsysorg/sglang:spark",  # no SGLang release takes _
     ("not a sglang 0.5.23 flag", "does not accept '_'", "lmsysorg/sglang:spark names no sglang release")),
    ('    "--enable-prefix-cachin",\n', "vllm", "eugr/spark-vllm-b12x:sm121",  # a custom image: says what it assumed
     ("not a vllm 0.34.0 flag", "did you mean '--enable-prefix-caching'?", "the newest with flag data assumed")),
])
def test_unknown_flag(tmp_path, args, engine, image, names):
    result = validate(tmp_recipe(tmp_path, args, engine=engine, image=image, nodes=1))
    (f,) = findings(result)
    assert (f.rule, f.severity, f.line, f.key) == ("unknown-flag", WARNING, 7, "args")
    for name in names:
        assert name in f.message, f.message


@pytest.mark.parametrize("args, engine, image", [
    ('    "--max_num_seqs=8",\n', "vllm", "vllm/vllm-openai:v0.11.0"),  # vLLM takes _ for -
    ('    "-O3",\n', "vllm", "vllm/vllm-openai:v0.11.0"),
    ('    "--compilation-config.cudagraph_mode", "FULL",\n', "vllm", "vllm/vllm-openai:v0.34.0"),  # dotted JSON key
    ('    "--no-enable-prefix-caching",\n', "vllm", "nvcr.io/nvidia/vllm:25.10-py3"),
    ('    "--disable-prefix-caching",\n', "vllm", "vllm/vllm-openai:v0.34.0"),  # EnableDisableAction, 0.33+
    # a guessed release (custom image) does not warn on a flag some release has: it may be that one
    ('    "--max-num-seqs", "8",\n    "--disable-log-requests",\n', "vllm", "eugr/spark-vllm-b12x:sm121"),
    ('    "--mem-fraction-static", "0.8",\n    "--tool-call-parser", "glm45",\n', "sglang", "lmsysorg/sglang:spark"),
])
def test_accepted_flags_have_no_finding(tmp_path, args, engine, image):
    result = validate(tmp_recipe(tmp_path, args, engine=engine, image=image, nodes=1), "--strict")
    assert result.exit_code == 0 and findings(result) == [], result.stderr


def test_a_wrapper_entrypoint_is_not_checked(tmp_path):
    path = tmp_recipe(tmp_path, '    "--whatever-my-script-takes", "x",\n')
    path.write_text(path.read_text() + 'entrypoint = ["/opt/start.sh"]\n')
    result = validate(path, "--strict")
    assert result.exit_code == 0 and findings(result) == [], result.stderr


@pytest.mark.parametrize("args, engine, image, names", [
    ('    "--gpu-memory-utilization", "abc",\n', "vllm", "vllm/vllm-openai:v0.11.0",
     ("'--gpu-memory-utilization' takes a number, not 'abc'", "vllm 0.11.0")),
    ('    "--enforce-eager", "true",\n', "vllm", "vllm/vllm-openai:v0.11.0", ("is a switch and takes no value",)),
    ('    "--enforce-eager=true",\n', "vllm", "vllm/vllm-openai:v0.34.0", ("takes no value", "'true'")),
    ('    "--kv-cache-dtype", "fp9",\n', "vllm", "vllm/vllm-openai:v0.11.0",
     ("'fp9' is not one of", "did you mean 'fp8'?")),
    ('    "--trust-remote-code", "yes",\n', "sglang", "lmsysorg/sglang:v0.5.3", ("takes no value", "sglang 0.5.3")),
    ('    "--max-num-seqs", "6.5",\n', "vllm", "eugr/spark-vllm-b12x:sm121", ("takes an integer",)),
])
def test_flag_value(tmp_path, args, engine, image, names):
    result = validate(tmp_recipe(tmp_path, args, engine=engine, image=image, nodes=1))
    (f,) = findings(result)
    assert (f.rule, f.severity, f.line, f.key) == ("flag-value", ERROR, 7, "args")
    for name in names:
        assert name in f.message, f.message
    assert result.exit_code == 1


@pytest.mark.parametrize("args, image", [
    ('    "--kv-cache-dtype", "fp8_e4m3",\n', "vllm/vllm-openai:v0.11.0"),
    ('    "--speculative-config", "None",\n', "vllm/vllm-openai:v0.11.0"),  # optional_type: "None" parses
    # choices of a guessed release are not judged: a custom image may add backends
    ('    "--dtype", "float8_custom",\n', "eugr/spark-vllm-b12x:sm121"),
])
def test_valid_values_have_no_finding(tmp_path, args, image):
    result = validate(tmp_recipe(tmp_path, args, image=image, nodes=1), "--strict")
    assert result.exit_code == 0 and findings(result) == [], result.stderr
