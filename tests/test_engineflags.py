"""The engine flag data: its extraction from source shaped like each engine's (no network), the shipped data file,
which release an image runs, and what a release makes of a flag and its value."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from textwrap import dedent

import pytest

from generator.engines import flags as engineflags
from generator.engines.flags import FlagSpec, Release, lookup, release_for_image, value_problem

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("extract_engine_flags", ROOT / "tools" / "extract_engine_flags.py")
assert _spec and _spec.loader
extract = importlib.util.module_from_spec(_spec)
sys.modules["extract_engine_flags"] = extract
_spec.loader.exec_module(extract)


def sources(files: dict[str, str]):
    return extract.Sources({path: dedent(text) for path, text in files.items()})


# --- vLLM-shaped source: serve.py -> make_arg_parser -> FrontendArgs / EngineArgs.add_cli_args -> config fields --

VLLM = {
    "vllm/entrypoints/cli/serve.py": """
        from vllm.entrypoints.openai.cli_args import make_arg_parser

        class ServeSubcommand:
            def subparser_init(self, subparsers):
                serve_parser = subparsers.add_parser("serve")
                serve_parser = make_arg_parser(serve_parser)
                return serve_parser
    """,
    "vllm/entrypoints/openai/cli_args.py": """
        import json
        from dataclasses import dataclass, field
        from typing import Literal
        from vllm.engine.arg_utils import AsyncEngineArgs, optional_type

        @dataclass
        class FrontendArgs:
            port: int = 8000
            uvicorn_log_level: Literal["info", "debug"] = "info"
            allowed_origins: list[str] = field(default_factory=list)
            api_key: list[str] | None = None

            @staticmethod
            def add_cli_args(parser):
                frontend_kwargs = get_kwargs(FrontendArgs)
                frontend_kwargs["allowed_origins"]["type"] = json.loads
                del frontend_kwargs["allowed_origins"]["nargs"]
                group = parser.add_argument_group("Frontend")
                for key, value in frontend_kwargs.items():
                    group.add_argument(f"--{key.replace('_', '-')}", **value)
                return parser

        def make_arg_parser(parser):
            parser.add_argument("model_tag", type=str, nargs="?")
            parser.add_argument("--headless", action="store_true", default=False)
            parser.add_argument("--api-server-count", "-asc", type=int, default=1)
            parser = FrontendArgs.add_cli_args(parser)
            parser = AsyncEngineArgs.add_cli_args(parser)
            return parser
    """,
    "vllm/config/scheduler.py": """
        from dataclasses import dataclass
        from typing import Literal

        SchedulerPolicy = Literal["fcfs", "priority"]

        @dataclass
        class SchedulerConfig:
            max_num_seqs: int = 128
            max_num_batched_tokens: int = 2048
            policy: SchedulerPolicy = "fcfs"
            enable_chunked_prefill: bool = True
            max_model_len: int | None = None
    """,
    "vllm/config/cache.py": """
        from dataclasses import dataclass
        from typing import Literal, Optional

        CacheDType = Literal["auto", "fp8"]

        @dataclass
        class CacheConfig:
            gpu_memory_utilization: float = 0.9
            cache_dtype: CacheDType = "auto"
            prefix_caching_hash_algo: CacheDType | str = "auto"
            enable_prefix_caching: Optional[bool] = None
            cpu_offload_gb: float = 0
    """,
    "vllm/config/speculative.py": """
        from vllm.config.utils import config

        @config
        class SpeculativeConfig:
            num_speculative_tokens: int = 1
    """,
    "vllm/config/vllm.py": """
        from vllm.config.speculative import SpeculativeConfig

        class VllmConfig:
            speculative_config: SpeculativeConfig | None = None
            compilation_config: "CompilationConfig" = None

        @dataclass
        class CompilationConfig:
            level: int = 0
    """,
    "vllm/engine/arg_utils.py": """
        import argparse
        from vllm.config import CacheConfig, SchedulerConfig, VllmConfig

        def _compute_kwargs(cls):
            for field in fields(cls):
                if contains_type(type_hints, int):
                    human_readable_ints = {"max_num_batched_tokens"}
                    if name == "max_model_len":
                        pass

        @dataclass
        class EngineArgs:
            @staticmethod
            def add_cli_args(parser):
                scheduler_kwargs = get_kwargs(SchedulerConfig)
                group = parser.add_argument_group("SchedulerConfig")
                group.add_argument("--max-num-seqs", **{**scheduler_kwargs["max_num_seqs"], "default": None})
                group.add_argument("--max-num-batched-tokens", **scheduler_kwargs["max_num_batched_tokens"])
                group.add_argument("--max-model-len", **scheduler_kwargs["max_model_len"])
                group.add_argument("--scheduling-policy", **scheduler_kwargs["policy"])
                group.add_argument("--enable-chunked-prefill", **scheduler_kwargs["enable_chunked_prefill"])
                cache_kwargs = get_kwargs(CacheConfig)
                cache_group = parser.add_argument_group("CacheConfig")
                cache_group.add_argument("--gpu-memory-utilization", **cache_kwargs["gpu_memory_utilization"])
                cache_group.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
                cache_group.add_argument("--prefix-caching-hash-algo", **cache_kwargs["prefix_caching_hash_algo"])
                cache_group.add_argument("--enable-prefix-caching", **cache_kwargs["enable_prefix_caching"])
                cpu_kwargs = cache_kwargs["cpu_offload_gb"]
                cpu_kwargs["type"] = lambda s: float(s.rstrip("G"))
                cache_group.add_argument("--cpu-offload-gb", **cpu_kwargs)
                vllm_kwargs = get_kwargs(VllmConfig)
                vllm_group = parser.add_argument_group("VllmConfig")
                vllm_group.add_argument("--speculative-config", "-sc", **vllm_kwargs["speculative_config"])
                vllm_group.add_argument("--compilation-config", "-O", **vllm_kwargs["compilation_config"])
                parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
                parser.add_argument("--disable-log-stats", action="store_true")
                parser.add_argument("--disable-log-requests", action=argparse.BooleanOptionalAction,
                                    deprecated=True)
                return parser

        @dataclass
        class AsyncEngineArgs(EngineArgs):
            @staticmethod
            def add_cli_args(parser, async_args_only=False):
                if not async_args_only:
                    parser = EngineArgs.add_cli_args(parser)
                parser.add_argument("--enable-log-requests", action=argparse.BooleanOptionalAction)
                return parser
    """,
    "vllm/utils/argparse_utils.py": """
        class EnableDisableAction(BooleanOptionalAction):
            pass

        class FlexibleArgumentParser(ArgumentParser):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.register("action", BooleanOptionalAction, EnableDisableAction)

            def parse_args(self, args=None, namespace=None):
                for arg in args:
                    key = arg.replace("_", "-")
                    if arg.startswith("-O"):
                        pass
                    keys = arg.split(".")
                    create_nested_dict(keys, value)
    """,
}


@pytest.fixture(scope="module")
def vllm_release():
    return extract.extract_vllm(sources(VLLM), "9.9.0")


def test_vllm_every_flag_and_alias_is_found(vllm_release):
    assert set(vllm_release.flags) == {
        "--headless", "--api-server-count", "-asc", "--port", "--uvicorn-log-level", "--allowed-origins",
        "--api-key", "--max-num-seqs", "--max-num-batched-tokens", "--max-model-len", "--scheduling-policy",
        "--enable-chunked-prefill", "--no-enable-chunked-prefill", "--disable-chunked-prefill",
        "--gpu-memory-utilization", "--kv-cache-dtype", "--prefix-caching-hash-algo", "--enable-prefix-caching",
        "--no-enable-prefix-caching", "--disable-prefix-caching", "--cpu-offload-gb", "--speculative-config",
        "-sc", "--compilation-config", "-O", "--tensor-parallel-size", "-tp", "--disable-log-stats",
        "--disable-log-requests", "--no-disable-log-requests", "--enable-log-requests",
        "--no-enable-log-requests",
    }


@pytest.mark.parametrize("name, spec", [
    ("--max-num-seqs", {"type": "int"}),  # **{**kwargs["x"], "default": None}
    ("--max-num-batched-tokens", {"type": "str"}),  # a human-readable int _compute_kwargs names: '2k' parses
    ("--max-model-len", {"type": "str", "optional": True}),
    ("--scheduling-policy", {"type": "choice", "choices": ["fcfs", "priority"]}),  # a Literal alias
    ("--kv-cache-dtype", {"type": "choice", "choices": ["auto", "fp8"]}),
    ("--prefix-caching-hash-algo", {"type": "str"}),  # Literal | str: any string
    ("--gpu-memory-utilization", {"type": "float"}),
    ("--enable-prefix-caching", {"type": "bool"}),  # Optional[bool]: BooleanOptionalAction
    ("--disable-prefix-caching", {"type": "bool", "of": "--enable-prefix-caching"}),  # EnableDisableAction
    ("--cpu-offload-gb", {"type": "any"}),  # a lambda type= set on an alias of the field's kwargs
    ("--speculative-config", {"type": "json", "optional": True}),  # a @config dataclass
    ("-sc", {"type": "json", "optional": True, "of": "--speculative-config"}),
    ("--compilation-config", {"type": "json"}),  # a forward reference to a dataclass
    ("-tp", {"type": "int", "of": "--tensor-parallel-size"}),
    ("--disable-log-requests", {"type": "bool", "deprecated": True}),
    ("--uvicorn-log-level", {"type": "choice", "choices": ["debug", "info"]}),
    ("--allowed-origins", {"type": "json"}),  # the frontend's own edits of get_kwargs' result
    ("--api-key", {"type": "str", "nargs": "+", "optional": True}),
    ("--port", {"type": "int"}),
    ("--headless", {"type": "bool"}),
])
def test_vllm_flag_types(vllm_release, name, spec):
    assert vllm_release.flags[name] == spec


def test_vllm_parser_traits(vllm_release):
    assert (vllm_release.underscores, vllm_release.dotted_json, vllm_release.abbrev, vllm_release.short_o) == (
        True, True, True, True)


# --- SGLang-shaped source: classic add_argument calls, and the arg_groups dataclass fields -----------------------

SGLANG_CLASSIC = {
    "sglang/srt/server_args.py": """
        import argparse
        LOAD_FORMAT_CHOICES = ["auto", "pt", "safetensors"]

        @dataclasses.dataclass
        class ServerArgs:
            mem_fraction_static: Optional[float] = None

            @staticmethod
            def add_cli_args(parser: argparse.ArgumentParser):
                parser.add_argument("--model-path", "--model", type=str, required=True)
                parser.add_argument("--mem-fraction-static", type=float, default=ServerArgs.mem_fraction_static)
                parser.add_argument("--load-format", type=str, choices=LOAD_FORMAT_CHOICES + ["dummy"])
                parser.add_argument("--trust-remote-code", action="store_true")
                parser.add_argument("--tool-call-parser", type=str,
                                    choices=list(FunctionCallParser.ToolCallParserEnum.keys()))
                parser.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1)
                parser.add_argument("--json-model-override-args", type=str, default="{}")
    """,
}


def test_sglang_classic_add_argument_calls():
    rel = extract.extract_sglang(sources(SGLANG_CLASSIC), "0.5.3")
    assert rel.flags == {
        "--model-path": {"type": "str"},
        "--model": {"type": "str", "of": "--model-path"},
        "--mem-fraction-static": {"type": "float"},
        "--load-format": {"type": "choice", "choices": ["auto", "dummy", "pt", "safetensors"]},
        "--trust-remote-code": {"type": "bool"},  # store_true: no --no- form
        "--tool-call-parser": {"type": "any"},  # choices computed at run time: any value, never judged
        "--tp-size": {"type": "int"},
        "--tensor-parallel-size": {"type": "int", "of": "--tp-size"},
        "--json-model-override-args": {"type": "str"},
    }
    assert (rel.underscores, rel.abbrev) == (False, True)


SGLANG_FIELDS = {
    "sglang/srt/server_args.py": """
        class ServerArgs:
            @staticmethod
            def add_cli_args(parser):
                add_cli_args_from_dataclass(parser, ServerArgs)
                parser.add_argument("--disable-cuda-graph", action=DeprecatedStoreTrueAction, new_flag="x")
                parser.add_argument("--reasoning-parser", type=str, choices=["auto"] + reasoning_parser_choices)
    """,
    "sglang/srt/arg_groups/choices.py": """
        RADIX_EVICTION_POLICY_CHOICES = ["lru", "lfu"]
    """,
    "sglang/srt/arg_groups/fields/memory.py": """
        from sglang.srt.arg_groups.choices import RADIX_EVICTION_POLICY_CHOICES

        class Memory(msgspec.Struct):
            radix_eviction_policy: A[str, Arg(help="x", choices=RADIX_EVICTION_POLICY_CHOICES)] = "lru"
            _explicit: A[bool, Arg(no_cli=True)] = False
            mem_fraction_static: A[Optional[float], "fraction"] = None
            tp_size: A[int, Arg(cli_name="--tp-size", aliases=["--tensor-parallel-size"])] = 1
            dtype: A[Literal["auto", "half"], Arg(help="d")] = "auto"
            context_length: A[Optional[int], Arg(type_parser=human_int)] = None
            cuda_graph_bs: A[Optional[List[int]], Arg(help="bs")] = None
            enable_metrics: A[bool, "metrics"] = False
            overrides: A[str, Arg(type_parser=json.loads)] = "{}"
            internal: int = 0
    """,
}


def test_sglang_dataclass_fields():
    rel = extract.extract_sglang(sources(SGLANG_FIELDS), "0.5.23")
    assert rel.flags == {
        "--radix-eviction-policy": {"type": "choice", "choices": ["lfu", "lru"]},
        "--mem-fraction-static": {"type": "float"},  # Optional[float] is type=float: "None" is refused
        "--tp-size": {"type": "int"},
        "--tensor-parallel-size": {"type": "int", "of": "--tp-size"},
        "--dtype": {"type": "choice", "choices": ["auto", "half"]},
        "--context-length": {"type": "any"},  # a type_parser of its own: never judged
        "--cuda-graph-bs": {"type": "int", "nargs": "+"},
        "--enable-metrics": {"type": "bool"},
        "--overrides": {"type": "json"},
        "--disable-cuda-graph": {"type": "bool"},
        "--reasoning-parser": {"type": "any"},
    }


def test_combine_is_compact_and_deterministic():
    a = extract.Release("vllm", "0.2.0", {"--x": {"type": "int"}, "--y": {"type": "bool"}}, True, True, True, False)
    b = extract.Release("vllm", "0.10.0", {"--x": {"type": "float"}, "--y": {"type": "bool"}}, True, True, True,
                        False)
    data = extract.combine([b, a], "cmd")
    vllm = data["engines"]["vllm"]
    assert vllm["releases"] == ["0.2.0", "0.10.0"]  # version order, not string order
    assert vllm["flags"] == {"--x": [{"type": "int", "in": [0]}, {"type": "float", "in": [1]}],
                             "--y": [{"type": "bool", "in": [0, 1]}]}
    assert json.dumps(data, sort_keys=True) == json.dumps(extract.combine([a, b], "cmd"), sort_keys=True)


# --- the shipped data ----------------------------------------------------------------------------------------

SHIPPED = json.loads((ROOT / "generator" / "data" / "engine_flags.json").read_text("utf-8"))
KNOWN = {  # flags each release is known to have; a broken regeneration loses them
    "vllm": ["--max-num-seqs", "--speculative-config", "--kv-cache-dtype", "--gpu-memory-utilization",
             "--enable-prefix-caching", "--no-enable-prefix-caching", "--served-model-name", "--port",
             "--tensor-parallel-size", "-tp", "--enforce-eager", "--max-model-len", "--compilation-config",
             "--tool-call-parser", "--enable-auto-tool-choice", "--trust-remote-code", "--api-server-count"],
    "sglang": ["--mem-fraction-static", "--model-path", "--tp-size", "--context-length", "--served-model-name",
               "--trust-remote-code", "--port", "--dist-init-addr", "--nnodes", "--node-rank", "--kv-cache-dtype",
               "--tool-call-parser", "--reasoning-parser", "--attention-backend"],
}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_shipped_data_has_the_known_flags_in_every_release(engine):
    data = SHIPPED["engines"][engine]
    assert len(data["releases"]) >= 3
    for index, version in enumerate(data["releases"]):
        have = {name for name, variants in data["flags"].items() for v in variants if index in v["in"]}
        assert len(have) > 200, (version, len(have))
        missing = [f for f in KNOWN[engine] if f not in have]
        assert not missing, f"{engine} {version} lacks {missing}"


def test_shipped_data_types_of_known_flags():
    for version in releases("vllm"):
        release = Release("vllm", version, True, "test")
        assert lookup(release, "--max-num-seqs").spec.type == "int"
        assert lookup(release, "--gpu-memory-utilization").spec.type == "float"
        assert lookup(release, "--enforce-eager").spec.type == "bool"
    assert lookup(Release("vllm", "0.34.0", True, "t"), "--disable-prefix-caching").spec is not None  # 0.33+
    assert lookup(Release("vllm", "0.11.0", True, "t"), "--disable-prefix-caching").spec is None
    for version in releases("sglang"):
        assert lookup(Release("sglang", version, True, "t"), "--mem-fraction-static").spec.type == "float"


def releases(engine: str) -> list[str]:
    return engineflags.releases(engine)


def test_shipped_data_says_how_to_regenerate():
    assert SHIPPED["regenerate"].startswith("python3 tools/extract_engine_flags.py")
    assert "tools/extract_engine_flags.py --download" in (ROOT / "docs" / "lint.md").read_text("utf-8")


# --- image -> release -------------------------------------------------------------------------------------------

GUESSED = "names no vllm release: the newest with flag data assumed"


@pytest.mark.parametrize("engine, image, version, exact, said", [
    ("vllm", "vllm/vllm-openai:v0.11.0", "0.11.0", True, "image tag v0.11.0"),
    ("vllm", "docker.io/vllm/vllm-openai:v0.34.0@sha256:0123", "0.34.0", True, "v0.34.0"),
    ("vllm", "nvcr.io/nvidia/vllm:25.10-py3", "0.10.2", True, "NGC 25.10 ships vLLM 0.10.2"),
    ("vllm", "nvcr.io/nvidia/vllm:26.10-py3", "0.31.0", True, "NGC 26.10"),
    ("vllm", "nvcr.io/nvidia/vllm:26.03-py3", "0.11.0", False, "no flag data for 0.17.1"),
    ("vllm", "eugr/spark-vllm-b12x:sm121", "0.34.0", False, GUESSED),
    ("vllm", "vllm/vllm-openai:latest", "0.34.0", False, GUESSED),
    ("vllm", "localhost:5000/vllm", "0.34.0", False, GUESSED),
    ("sglang", "lmsysorg/sglang:v0.5.3-cu129", "0.5.3", True, "v0.5.3-cu129"),
    ("sglang", "lmsysorg/sglang:spark", "0.5.23", False, GUESSED.replace("vllm", "sglang")),
    ("sglang", "lmsysorg/sglang:v0.5.22.post1-cu130", "0.5.22", False, "no flag data for 0.5.22.post1"),
])
def test_release_for_image(engine, image, version, exact, said):
    release = release_for_image(engine, image)
    assert (release.version, release.exact) == (version, exact)
    assert said in release.why


# --- what a release makes of a flag and its value ---------------------------------------------------------------

V011 = Release("vllm", "0.11.0", True, "image tag v0.11.0")
SG = Release("sglang", "0.5.3", True, "image tag v0.5.3")


@pytest.mark.parametrize("release, word, canonical, problem", [
    (V011, "--max-num-seqs", "--max-num-seqs", None),
    (V011, "--max_num_seqs=8", "--max-num-seqs", None),  # vLLM turns _ into -
    (V011, "--compilation-config.level", "--compilation-config", None),  # a dotted JSON key
    (V011, "-O3", "--compilation-config", None),
    (Release("vllm", "0.34.0", True, "t"), "-O", "--optimization-level", None),
    (Release("vllm", "0.34.0", True, "t"), "-O3", "--optimization-level", None),
    (V011, "--max-num-seq", "--max-num-seqs", "did you mean '--max-num-seqs'?"),  # an abbreviation argparse takes
    (V011, "--max", None, "ambiguous abbreviation"),
    (V011, "--gpu-memory-utilisation", None, "did you mean '--gpu-memory-utilization'?"),
    (V011, "--max-cudagraph-capture-size", None, "added after 0.11.0, it is in 0.31.0 and later"),
    (SG, "--mem_fraction_static", None, "does not accept '_'"),
    (SG, "--mem-fraction-static", "--mem-fraction-static", None),
])
def test_lookup(release, word, canonical, problem):
    found = lookup(release, word)
    assert (found.spec.canonical if found.spec else None) == canonical
    if problem is None:
        assert found.problem is None
    else:
        assert problem in found.problem


def test_removed_flag_says_when():
    gone = [n for n, vs in SHIPPED["engines"]["vllm"]["flags"].items()
            if all(v["in"] == [0, 1] for v in vs) and n.startswith("--") and not n.startswith("--no-")]
    assert gone, "no flag of 0.10.2/0.11.0 only: pick another example"
    assert "removed after 0.11.0" in lookup(Release("vllm", "0.34.0", True, "t"), gone[0]).problem


@pytest.mark.parametrize("spec, values, problem", [
    (FlagSpec("--n", "int"), ["6"], None),
    (FlagSpec("--n", "int"), ["6.5"], "takes an integer, not '6.5'"),
    (FlagSpec("--n", "int", optional=True), ["None"], None),
    (FlagSpec("--f", "float"), ["abc"], "takes a number, not 'abc'"),
    (FlagSpec("--f", "float"), ["1e-3"], None),
    (FlagSpec("--b", "bool"), [], None),
    (FlagSpec("--b", "bool"), ["true"], "takes no value"),
    (FlagSpec("--c", "choice", ("auto", "fp8")), ["fp9"], "not one of auto, fp8; did you mean 'fp8'?"),
    (FlagSpec("--c", "choice", ("8", "16")), ["08"], None),  # argparse compares after type=int
    (FlagSpec("--l", "int", nargs="+"), ["1", "2", "x"], "not 'x'"),
    (FlagSpec("--s", "str"), ["anything"], None),
    (FlagSpec("--a", "any"), ["anything"], None),
])
def test_value_problem(spec, values, problem):
    found = value_problem(spec, values, sure_of_choices=True)
    assert (found is None) if problem is None else (problem in found)


def test_choices_are_not_judged_when_the_release_is_a_guess():
    assert value_problem(FlagSpec("--c", "choice", ("auto",)), ["custom"], sure_of_choices=False) is None


def test_only_linting_loads_the_flag_data():
    """The lint rules (generator/check/flags.py) import engineflags (and read the JSON) inside the rules, not at
    import time."""
    code = "import sys, generator.cli, generator.check.rules; print('generator.engines.flags' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("kinds, expected", [
    ({"dict", "other"}, "json_or_str"),  # hf_overrides: dict | Callable -> union_dict_and_str
    ({"dict", "str", "None"}, "json_or_str"),  # additional_config: dict | str
    ({"dict"}, "json"),  # a plain dict: json.loads
    ({"dict", "None"}, "json"),
])
def test_vllm_dict_unions_are_json_only_when_braced(kinds, expected):
    """vLLM's _compute_kwargs gives a dict in a union with a string or a class `union_dict_and_str`, which reads
    the value as JSON only when it is `{...}`: the data says so, and bad-json judges only such values."""
    kw = extract.vllm_field_kwargs({extract.Atom(k) for k in kinds}, lenient=False, optional_bool_str=False)
    assert kw["type"] == expected


def test_the_shipped_data_knows_the_braced_json_flags():
    release = Release("vllm", "0.34.0", True, "")
    assert lookup(release, "--hf-overrides").spec.type == "json_or_str"
    assert lookup(release, "--speculative-config").spec.type == "json"
    assert lookup(release, "--chat-template").spec.type == "str"
