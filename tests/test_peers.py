"""Real recipes from the peers (eugr/spark-vllm-docker, spark-arena/sparkrun, NVIDIA/dgx-spark-playbooks), each
translated by hand to a recipe.toml, compared with what the peer's own launcher runs on each node.

Each tests/peers/<case>/ holds `recipe.toml` (the translation), `peer.json` (where the recipe came from, which
launcher code computes the command, the assumptions, and per node, head first, the engine argv, the environment,
the `ray start` argv, the setup and mod steps and the docker options, all for the two nodes of
tests/peers/cluster.toml) and any mod folders. peer.json was computed by reading the launcher code; argv words were
split by bash itself, as the launchers do.

The comparison is word for word:
- the engine argv: entrypoint and positional words exactly; flags as a multiset of exact word groups (a flag and
  the values after it: argparse does not care about their order); compiler-owned flags after mapping the peer's
  spelling through OWNED_SPELLINGS;
- the environment: every peer variable present with the same value; a variable only recipegen sets must be in
  ALLOWED_EXTRA_ENV;
- `ray start`, setup commands, mods and docker options likewise.
Each case whose peer has a recipe file (sparkrun's registry YAML, eugr's `recipes/*.yaml`) also holds that original
file (peer.json `original`; `original.ray` true imports with `--ray`): every comparison runs a second time on what
`recipegen import` makes of it (variant "import"), with the same allowed differences and no others.

Whatever recipegen does differently on purpose is listed in the case's peer.json under `differences` (with the
reason), and each test checks that the differences it finds are exactly that list: one more or one fewer fails.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tomllib
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from generator.importers import ImportOptions, ImportResult, import_files
from generator.plan.nodes import plan_recipe
from generator.plan.types import NodePlan, RecipePlan, shm_bytes
from generator.resolve.argwords import flag_name
from generator.resolve.load import load_cluster, load_recipe

PEERS = Path(__file__).resolve().parent / "peers"


def import_recipe(path: Path, recipes_dir: Path, recipe_id: str | None, options: ImportOptions,
                  cluster_file: Path | None = None) -> ImportResult:
    """One recipe file imported as `recipegen import` imports it (the package's import_files), checked against
    `cluster_file` when given."""
    results, _ = import_files([path], recipes_dir, cluster_file or recipes_dir / "no-cluster.toml", recipe_id,
                              options)
    return results[0]
CLUSTER = PEERS / "cluster.toml"
CASES = sorted(p.name for p in PEERS.iterdir() if (p / "peer.json").is_file())
IMPORTED = [c for c in CASES if "original" in json.loads((PEERS / c / "peer.json").read_text("utf-8"))]
# (case, variant): the hand translation of every case, and the import of every case with an original file.
VARIANTS = [(c, "hand") for c in CASES] + [(c, "import") for c in IMPORTED]
DIFF_KINDS = {"argv", "env", "ray_start", "docker"}

# The peer's spelling of a flag the compiler owns -> recipegen's spelling. Values are compared exactly.
OWNED_SPELLINGS = {
    "vllm": {
        "-tp": "--tensor-parallel-size", "--tensor-parallel-size": "--tensor-parallel-size",
        "-pp": "--pipeline-parallel-size", "--pipeline-parallel-size": "--pipeline-parallel-size",
        "--distributed-executor-backend": "--distributed-executor-backend",
        "--nnodes": "--nnodes", "--node-rank": "--node-rank", "--master-addr": "--master-addr",
        "--master-port": "--master-port", "--headless": "--headless",
    },
    "sglang": {
        "--model-path": "--model-path",
        "--tp-size": "--tp-size", "--tp": "--tp-size", "--tensor-parallel-size": "--tp-size",
        "--pp-size": "--pp-size", "--pp": "--pp-size", "--pipeline-parallel-size": "--pp-size",
        "--dist-init-addr": "--dist-init-addr", "--nnodes": "--nnodes", "--node-rank": "--node-rank",
    },
}
# `ray start` options the compiler owns: click accepts `--flag=value` and `--flag value` alike, so these are
# compared as (flag, value); every other ray option word for word.
RAY_OWNED = {"--head", "--address", "--port", "--node-ip-address", "--block"}

# Word groups recipegen may add where the peer writes nothing: the engine's own default, stated explicitly.
ALLOWED_EXTRA_GROUPS = {
    ("--pipeline-parallel-size", "1"): "vLLM's default; recipegen always states the parallel sizes",
    ("--tensor-parallel-size", "1"): "vLLM's default; recipegen always states the parallel sizes",
    ("--tp-size", "1"): "SGLang's default; recipegen always states the parallel size",
}
# Variables recipegen may set where the peer sets none (a peer that sets one must agree on the value).
_FABRIC = ("the cluster's fabric environment (tests/peers/cluster.toml [env]): recipegen binds every rank to the "
           "CX7 port even where the peer's launcher leaves the variable unset")
ALLOWED_EXTRA_ENV = {
    **dict.fromkeys(("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "UCX_NET_DEVICES",
                     "MN_IF_NAME", "OMPI_MCA_btl_tcp_if_include", "NCCL_IB_HCA", "NCCL_IB_DISABLE",
                     "NCCL_IB_GID_INDEX", "NCCL_IGNORE_CPU_AFFINITY", "NCCL_DEBUG"), _FABRIC),
    "VLLM_HOST_IP": "compiler-owned: the rank's own fabric address (vLLM binds it)",
    "MASTER_ADDR": "compiler-owned rank wiring (the head's fabric address)",
    "MASTER_PORT": "compiler-owned rank wiring (the cluster's master_port)",
    "RAY_NODE_IP_ADDRESS": "compiler-owned with Ray: the node's fabric address",
    "RAY_OVERRIDE_NODE_IP_ADDRESS": "compiler-owned with Ray: the node's fabric address",
}


# --- loading --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    name: str
    peer: dict
    plan: RecipePlan


_cache: dict[tuple[str, str], Case] = {}


def case(name: str, tmp_path_factory: pytest.TempPathFactory, variant: str = "hand") -> Case:
    if (name, variant) not in _cache:
        peer = json.loads((PEERS / name / "peer.json").read_text("utf-8"))
        root = PEERS
        path = PEERS / name / "recipe.toml"
        if variant == "import":  # the peer's own file, imported into a fresh project
            root = tmp_path_factory.mktemp("import")
            original = peer["original"]
            with home(PEERS / name / original["home"] if "home" in original else root / "home"):
                path = import_recipe(PEERS / name / original["file"], root / "recipes", name,
                                     ImportOptions(ray=original.get("ray", False))).folder / "recipe.toml"
        recipe = load_recipe(path)
        plan = plan_recipe(recipe, load_cluster(CLUSTER), root, tmp_path_factory.mktemp("out"))
        _cache[name, variant] = Case(name, peer, plan)
    return _cache[name, variant]


@contextmanager
def home(folder: Path) -> Iterator[None]:
    """HOME for an import: the case's own (sparkrun's checkout of eugr's registry under it), else an empty one, so
    what the machine running the tests keeps in ~/.cache/sparkrun plays no part."""
    before = os.environ.get("HOME")
    os.environ["HOME"] = str(folder)
    try:
        yield
    finally:
        if before is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = before


def cases_with(predicate) -> list[tuple[str, str]]:
    return [(c, v) for c, v in VARIANTS if predicate(json.loads((PEERS / c / "peer.json").read_text("utf-8")))]


# --- what a rank runs, taken from the plan ----------------------------------------------------------------------

@dataclass(frozen=True)
class Steps:
    engine: list[str] | None  # the engine's argv, None when the rank runs no engine (a Ray worker)
    ray: list[str] | None  # the `ray start` argv, None without Ray
    setup: list[list[str]]  # commands run before `ray start` / the engine, as words


def steps(node: NodePlan) -> Steps:
    """What the rank runs, from the plan: its command (the engine, or `ray start` on a Ray worker) and what the
    launcher runs before it (setup commands; a Ray head's `ray start`). The one place that reads that shape."""
    argv = [a.word for a in node.command]
    launch = node.launch
    setup = [shlex.split(step.word) for step in launch.setup] if launch else []
    if argv[:2] == ["ray", "start"]:
        return Steps(None, argv, setup)
    ray = list(launch.ray_head.start) if launch and launch.ray_head else None
    return Steps(argv, ray, setup)


def groups(words: list[str]) -> list[tuple[str, ...]]:
    """Words grouped into a flag and the values after it; a JSON value or a path is a value."""
    out: list[list[str]] = []
    for word in words:
        if flag_name(word) is not None or not out:
            out.append([word])
        else:
            out[-1].append(word)
    return [tuple(g) for g in out]


def split_positional(words: list[str]) -> tuple[list[str], list[str]]:
    for i, word in enumerate(words):
        if flag_name(word) is not None:
            return words[:i], words[i:]
    return words, []


def owned(engine: str, group: tuple[str, ...]) -> tuple[str, ...]:
    spelling = OWNED_SPELLINGS[engine].get(group[0])
    return (spelling, *group[1:]) if spelling else group


def ray_group(group: tuple[str, ...]) -> tuple[str, ...]:
    flag = group[0].split("=", 1)[0]
    if flag in RAY_OWNED and "=" in group[0]:
        return (flag, group[0].split("=", 1)[1], *group[1:])
    return group


def declared(peer: dict, kind: str, rank: int) -> list[dict]:
    return [d for d in peer["differences"] if d["kind"] == kind and rank in d.get("nodes", [])]


def group_diff(ours: Counter, theirs: Counter, allowed: dict, decl: list[dict], norm) -> tuple:
    missing = theirs - ours
    extra = Counter({g: n for g, n in (ours - theirs).items() if g not in allowed})
    want_missing = Counter(norm(tuple(d["peer"])) for d in decl if d["peer"])
    want_extra = Counter(norm(tuple(d["recipegen"])) for d in decl if d["recipegen"])
    return (dict(missing), dict(extra)), (dict(want_missing), dict(want_extra))


# --- the corpus itself ------------------------------------------------------------------------------------------

def test_corpus_size_and_coverage():
    features = " ".join(f for c in CASES for f in json.loads((PEERS / c / "peer.json").read_text())["features"])
    assert len(CASES) >= 10 and len(IMPORTED) > 10  # cases with the peer's own file, imported and compared
    for needed in ("mp (native multi-node)", "ray", "sglang", "single node", "draft model", "MTP",
                   "JSON-valued", "multi-line serve command", "mods", "setup step", "many env vars",
                   "eugr mainline launcher", "solo rule (tensor_parallel 1)",
                   "mods from sparkrun's checkout of eugr's registry"):
        assert needed in features, needed
    assert {json.loads((PEERS / c / "peer.json").read_text())["peer"] for c in CASES} == {
        "eugr/spark-vllm-docker", "spark-arena/sparkrun", "NVIDIA/dgx-spark-playbooks"}


@pytest.mark.parametrize("name", CASES)
def test_case_files_are_complete(name):
    folder = PEERS / name
    peer = json.loads((folder / "peer.json").read_text("utf-8"))
    assert (folder / "recipe.toml").read_text("utf-8").startswith("#:schema ../../../schema/recipe.schema.json\n")
    for key in ("peer", "source", "launcher", "invocation", "assumptions", "features", "docker", "mods", "setup",
                "nodes", "differences"):
        assert key in peer, key
    assert peer["source"]["repo"] and peer["source"]["path"] and peer["launcher"]["computes"]
    assert "http" not in json.dumps(peer["launcher"]), "the launcher description names code, not URLs"
    assert [n["address"] for n in peer["nodes"]] == ["192.168.100.10", "192.168.100.11"][: len(peer["nodes"])]
    assert peer["nodes"][0]["argv"], "the head runs the engine"
    for d in peer["differences"]:
        assert d["kind"] in DIFF_KINDS and d["why"], d
    for mod in peer["mods"]:
        files = sorted(p.name for p in (folder / mod["folder"]).iterdir())
        assert files == sorted(mod["files"]) and "run.sh" in files, mod["name"]


# --- the comparisons --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,variant", VARIANTS)
def test_engine_argv(name, variant, tmp_path_factory):
    c = case(name, tmp_path_factory, variant)
    engine = c.plan.recipe.engine
    width = len(c.plan.recipe.entrypoint)
    for rank, (want, node) in enumerate(zip(c.peer["nodes"], c.plan.nodes, strict=True)):
        got = steps(node).engine
        if want["argv"] is None or got is None:
            assert got == want["argv"], f"rank {rank}: engine argv"
            continue
        assert got[:width] == want["argv"][:width], f"rank {rank}: entrypoint"
        want_pos, want_flags = split_positional(want["argv"][width:])
        got_pos, got_flags = split_positional(got[width:])
        assert got_pos == want_pos, f"rank {rank}: positional words"
        theirs = Counter(owned(engine, g) for g in groups(want_flags))
        ours = Counter(groups(got_flags))
        found, expected = group_diff(ours, theirs, ALLOWED_EXTRA_GROUPS, declared(c.peer, "argv", rank),
                                     lambda g: owned(engine, g))
        assert found == expected, f"rank {rank}: (missing, extra) flag groups vs peer.json differences"


@pytest.mark.parametrize("name,variant", VARIANTS)
def test_environment(name, variant, tmp_path_factory):
    c = case(name, tmp_path_factory, variant)
    for rank, (want, node) in enumerate(zip(c.peer["nodes"], c.plan.nodes, strict=True)):
        ours = {var.name: var.value for var in node.env}
        theirs = want["env"]
        found = set()
        for var in sorted(set(ours) | set(theirs)):
            if ours.get(var) == theirs.get(var) or (var not in theirs and var in ALLOWED_EXTRA_ENV):
                continue
            found.add((var, theirs.get(var), ours.get(var)))
        expected = {(d["name"], d["peer"], d["recipegen"]) for d in declared(c.peer, "env", rank)}
        assert found == expected, f"rank {rank}: (variable, peer, recipegen) vs peer.json differences"
        assert set(want["pass_env"]) <= set(node.pass_env), f"rank {rank}: pass_env"


@pytest.mark.parametrize("name,variant", cases_with(lambda p: any(n["ray_start"] for n in p["nodes"])))
def test_ray_start(name, variant, tmp_path_factory):
    c = case(name, tmp_path_factory, variant)
    for rank, (want, node) in enumerate(zip(c.peer["nodes"], c.plan.nodes, strict=True)):
        got = steps(node).ray
        assert got is not None, f"rank {rank}: no `ray start` in the rank's command"
        assert got[:2] == want["ray_start"][:2] == ["ray", "start"]
        theirs = Counter(ray_group(g) for g in groups(want["ray_start"][2:]))
        ours = Counter(ray_group(g) for g in groups(got[2:]))
        found, expected = group_diff(ours, theirs, {}, declared(c.peer, "ray_start", rank), ray_group)
        assert found == expected, f"rank {rank}: (missing, extra) ray start options vs peer.json differences"


@pytest.mark.parametrize("name,variant", cases_with(lambda p: p["setup"]))
def test_setup_runs_on_every_node_before_ray_and_engine(name, variant, tmp_path_factory):
    c = case(name, tmp_path_factory, variant)
    want = [shlex.split(step["command"]) for step in c.peer["setup"]]
    for rank, node in enumerate(c.plan.nodes):
        assert steps(node).setup == want, f"rank {rank}: setup commands (in the rank's command, before ray/engine)"


def plan_mods(node: NodePlan) -> list[tuple[str, list[str]]]:
    """The mods a rank runs, as (folder name, file names), in order: the launcher's mod steps and the files the
    rank's container gets in each mod's folder."""
    mods = node.launch.mods if node.launch else ()
    return [(m.name, sorted(Path(f.path).name for f in node.files if f.path.startswith(m.directory + "/")))
            for m in mods]


@pytest.mark.parametrize("name,variant", cases_with(lambda p: p["mods"]))
def test_mods_run_on_every_node_in_order(name, variant, tmp_path_factory):
    c = case(name, tmp_path_factory, variant)
    want = [(m["name"], sorted(m["files"])) for m in c.peer["mods"]]
    for rank, node in enumerate(c.plan.nodes):
        assert plan_mods(node) == want, f"rank {rank}"


def recipegen_docker(node: NodePlan) -> dict:
    """The plan's container options in peer.json's vocabulary."""
    ulimits = {"memlock": [node.ulimits.memlock] * 2, "stack": [node.ulimits.stack] * 2}
    return {
        "privileged": False, "gpus": "all" if node.gpus else None, "network": "host", "auto_remove": False,
        "ipc": node.container.ipc or "private", "shm_size": node.shm_size,
        "memory": node.container.memory_limit, "pids_limit": node.container.pids_limit,
        "user": node.container.container_user, "ulimits": ulimits,
        "log_max_size": node.container.log_max_size or None, "published_ports": [],
        "mounts": [f"{v.source}:{v.target}" for v in node.volumes],
    }


def _same(name: str, a, b) -> bool:
    if name == "shm_size" and a and b:
        return shm_bytes(a) == shm_bytes(b)
    return a == b


@pytest.mark.parametrize("name,variant", VARIANTS)
def test_docker_options(name, variant, tmp_path_factory):
    c = case(name, tmp_path_factory, variant)
    want = c.peer["docker"]
    for rank, node in enumerate(c.plan.nodes):
        ours = recipegen_docker(node)
        found = {key: (want[key], ours[key]) for key in ours if key in want and not _same(key, want[key], ours[key])}
        expected = {d["name"]: (d["peer"], d["recipegen"]) for d in c.peer["differences"] if d["kind"] == "docker"}
        assert set(found) == set(expected), f"rank {rank}: differing docker options vs peer.json differences"
        for key, (theirs, recipegen) in expected.items():
            assert _same(key, found[key][1], recipegen), f"rank {rank}: {key}: recipegen has {found[key][1]!r}"
            assert found[key][0] == theirs, f"rank {rank}: {key}"


# --- real peer files refused, each for the reason its author would accept ------------------------------------------

REFUSED = json.loads((PEERS / "refused" / "refused.json").read_text("utf-8"))["files"]


@pytest.mark.parametrize("file", sorted(REFUSED))
def test_refused_originals_name_their_reason_in_one_line(file, tmp_path):
    from generator.diagnostics import RecipegenError

    want = REFUSED[file]
    assert want["source"]["repo"] and len(want["source"]["commit"]) == 40
    with home(tmp_path / "home"), pytest.raises(RecipegenError) as refused:
        import_recipe(PEERS / "refused" / file, tmp_path / "recipes", None, ImportOptions())
    (d,) = refused.value.diagnostics
    assert (d.line, d.key) == (want["line"], want["key"]) and d.file.endswith(file)
    assert "\n" not in str(d) and all(words in d.message for words in want["expect"]), d.message
    assert not (tmp_path / "recipes").exists()


# --- real peer files that must import into what validate and build accept -------------------------------------------

IMPORTS = json.loads((PEERS / "imported" / "imported.json").read_text("utf-8"))["files"]


@pytest.mark.parametrize("file", sorted(IMPORTS))
def test_published_files_import_into_recipes_validate_and_build_accept(file, tmp_path):
    want = IMPORTS[file]
    peer = tmp_path / "peer"
    shutil.copytree(PEERS / "imported", peer)
    for path, size in want.get("stand_ins", {}).items():  # a payload too large to keep in the repository
        (peer / path).write_bytes(bytes(range(256)) * (size // 256) + b"\xff" * (size % 256))
    with home(tmp_path / "home"):  # the import itself runs validate's and build's rules against the cluster
        result = import_recipe(peer / file, tmp_path / "recipes", None, ImportOptions(), cluster_file=CLUSTER)
    for key, value in want.get("recipe", {}).items():
        assert tomllib.loads((result.folder / "recipe.toml").read_text("utf-8"))[key] == value, key
    recipe = load_recipe(result.folder / "recipe.toml")
    plan = plan_recipe(recipe, load_cluster(CLUSTER), tmp_path, tmp_path / "out")
    words = steps(plan.nodes[0]).engine
    at = words.index(want["words"][0])
    assert words[at:at + len(want["words"])] == want["words"] and words.count(want["words"][0]) == 1
    assert [n.key for n in result.imported.not_carried if n.key in want["named"]] == want["named"]


def test_the_tests_page_counts_the_peer_cases_there_are():
    """docs/tests.md states the corpus' size; a case added without updating it makes the page wrong."""
    import re

    page = (PEERS.parent.parent / "docs" / "tests.md").read_text("utf-8")
    stated = re.search(r"`tests/peers/`: (\d+) cases", page)
    assert stated is not None and int(stated[1]) == len(CASES), (stated and stated[0], len(CASES))
