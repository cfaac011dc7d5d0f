"""spark-arena/sparkrun recipes (`recipe_version: "2"`, or none) as sparkrun 0.2.40 runs them.

Reproduced from sparkrun's code (src/sparkrun/...): the runtime resolvers of core/recipe.py (explicit
`runtime:`, else the command's first words; bare vllm becomes vllm-ray when `defaults.distributed_executor_backend`
is ray or the command says `--distributed-executor-backend ray`, else vllm-distributed), `render_command` (vpd's
`arg_substitute` repeated until nothing changes: `{key}` becomes `str()` of the defaults' value, `{model}` the
model; a key without a value stays as written), the runtimes' extra flags and environment
(runtimes/_util.py, vllm_distributed.py, vllm_ray.py, sglang.py), the node count of cli/_common.py
(tensor x pipeline x data parallel from the defaults, else min_nodes; max_nodes and solo cap it) and the
executor defaults of orchestration/executor.py.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from generator.importers.bench import bench_table
from generator.importers.base import (EnvVar, Field, ImportedRecipe, ImportOptions, NotCarried, launcher_env,
                                      no_model, parallel_size, scalar_default)
from generator.importers.command import Command, split_command
from generator.importers.modsearch import find_mods, mods_fields
from generator.importers.passenv import split_secrets
from generator.importers.yamlfile import YamlFile

_ARG = re.compile(r"\{(.*?)\}")  # vpd.legacy.arguments._find_arg_re
_TRAILING_SPACE_CONTINUATION = re.compile(r"\\ +\n")
_RAY_BACKEND = re.compile(r"--distributed-executor-backend\s+ray\b")
_CMD_VLLM = re.compile(r"^vllm\s+serve\b")
_CMD_SGLANG = re.compile(r"^(?:sglang\s+serve|python3?\s+-m\s+sglang\.launch_server)\b")
_CMD_OTHER = re.compile(r"^(?:llama-server\b|trtllm-serve|mpirun\b.*trtllm)")
_RUNTIMES = {"vllm-distributed": "vllm", "vllm-ray": "vllm", "sglang": "sglang"}
_HF_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # runtimes/_util.py default_env_hf_offline
_CLUSTER_ENV = {  # each runtime's get_cluster_env
    "vllm-distributed": {"NCCL_CUMEM_ENABLE": "0", "OMP_NUM_THREADS": "4"},
    "vllm-ray": {"RAY_memory_monitor_refresh_ms": "0", "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"},
    "sglang": {"NCCL_CUMEM_ENABLE": "0", "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK": "0"},
}
_SHM_DEFAULT = "32gb"  # orchestration/executor.py EXECUTOR_DEFAULTS
_EXECUTOR_KEYS = {"shm_size": "shm_size", "ipc": "ipc", "user": "container_user", "memory_limit": "memory_limit"}
_NOT_CARRIED = {
    "post_exec": "commands sparkrun runs in the head container after the engine serves: recipegen runs nothing "
                 "after start; run them yourself once `recipegen up` returns",
    "post_commands": "commands sparkrun runs on the control machine after start: run them after `recipegen up`",
    "stop_after_post": "belongs to post_exec / post_commands (not carried)",
    "builder": "sparkrun's image builder plugin: build the image yourself (or give the recipe `docker_image_dir`)",
    "builder_config": "sparkrun's image builder settings: build the image yourself",
    "distribution_config": "what sparkrun copies to the nodes: `recipegen images` and `recipegen models` copy the "
                           "recipe's image and model (and draft models) instead",
    "runtime_version": "sparkrun's runtime version pin: the image tag decides the engine release here",
    "name": "sparkrun ignores it too: a recipe's name is its file's (and the recipe id here)",
}
# defaults sparkrun reads itself, beyond the command's placeholders (node count, runtime, served name, health check)
_READ_BY_SPARKRUN = {"tensor_parallel", "pipeline_parallel", "data_parallel", "distributed_executor_backend",
                     "served_model_name", "port", "host"}
_IGNORED = {"benchmark", "recipe_version", "sparkrun_version", "description", "metadata", "mode", "min_nodes",
            "max_nodes", "solo_only", "cluster_only", "runtime", "model", "container", "defaults", "env",
            "command", "mods", "pre_exec", "executor_config", "runtime_config", "model_revision"}


class SparkrunImporter:
    peer = "sparkrun v2"

    def accepts(self, doc: YamlFile) -> bool:
        if "recipe_version" in doc.data:
            return str(doc.data["recipe_version"]) == "2"
        return any(k in doc.data for k in ("command", "container", "model"))  # sparkrun's v2 may omit the version

    def convert(self, doc: YamlFile, options: ImportOptions) -> ImportedRecipe:
        data, src = doc.data, _Sources(doc)
        _refuse_foreign_runtime(doc)
        for key in ("container", "model", "command"):
            if not isinstance(data.get(key), str) or not data[key].strip():
                raise doc.error(key, "required: a non-empty string" + (
                    " (recipegen imports the command sparkrun renders from `command`)" if key == "command" else ""))
        defaults, env_in, executor = _mapping(doc, "defaults"), _mapping(doc, "env"), _mapping(doc, "executor_config")
        runtime, nodes = _runtime(doc, defaults), _node_count(doc, defaults)
        if int(defaults.get("data_parallel") or 1) > 1:
            raise doc.error(("defaults", "data_parallel"), "sparkrun runs data_parallel replicas (--data-parallel-rank "
                                                           "and -address per node): recipegen has no form for that yet")
        chain = {**defaults}
        chain.setdefault("model", data["model"])
        rendered, unresolved = _rendered(doc, chain, runtime, nodes)
        cmd = split_command(rendered, lambda m: doc.error("command", m))
        if cmd.engine != _RUNTIMES[runtime]:
            raise doc.error("command", f"runtime {runtime} runs {_RUNTIMES[runtime]}, but the command starts "
                                       f"{' '.join(cmd.entrypoint)}")
        fields = _fields(doc, src, cmd, runtime, nodes, defaults, executor)
        mods = find_mods(doc, data.get("mods"), options.mods_dirs)
        fields += mods_fields(mods, src.of("mods"))
        setup, not_carried = _pre_exec(doc, chain)
        if setup:
            fields.append(Field("setup", setup, f"{src.of('pre_exec')}, rendered over defaults (hooks.py)"))
        if runtime == "vllm-ray" and nodes > 1:
            fields.append(Field("ray_args", ["--disable-usage-stats"],
                                "sparkrun's `ray start --head ... --disable-usage-stats` (orchestration/executor.py)"))
        fields += _args(doc, src, cmd, rendered)
        env = _env(src, env_in, cmd, runtime, nodes)
        not_carried += _unknown(doc, executor, unresolved, cmd, nodes, env)
        env, secret_fields, secret_notes = split_secrets(doc, env)
        fields += secret_fields
        not_carried += secret_notes
        if cmd.model is None:
            not_carried.append(no_model(doc))
        bench, bench_notes = bench_table(doc)
        return ImportedRecipe(doc.path, self.peer, tuple(fields), tuple(env), mods, tuple(not_carried + bench_notes),
                              notes=(f"as sparkrun runs it: the {runtime} runtime on {nodes} node(s)",),
                              bench=tuple(bench))


def _rendered(doc: YamlFile, chain: dict[str, Any], runtime: str, nodes: int) -> tuple[str, list[str]]:
    """The command as sparkrun renders it, with the flags its runtimes add: vllm_ray's backend on several nodes,
    base._augment_served_model_name's served name; and the placeholders left without a value."""
    rendered, unresolved = _render(doc, doc.data["command"].strip(), chain)
    if runtime == "vllm-ray" and nodes > 1 and "--distributed-executor-backend" not in rendered:
        rendered = rendered.rstrip() + " --distributed-executor-backend ray"  # vllm_ray.generate_command
    served = chain.get("served_model_name")
    if served is not None and "--served-model-name" not in rendered:  # base._augment_served_model_name
        rendered = f"{rendered.rstrip()} --served-model-name {served}"
    return rendered, unresolved


def _fields(doc: YamlFile, src: _Sources, cmd: Command, runtime: str, nodes: int, defaults: dict[str, Any],
            executor: dict[str, Any]) -> list[Field]:
    """The recipe's keys from the command, the node count and the executor settings."""
    data = doc.data
    fields = [Field("engine", cmd.engine, src.engine(runtime)),
              *_names(doc),
              Field("docker_image", data["container"], src.of("container")),
              Field("model", cmd.model or data["model"],
                    src.of("model") if cmd.model in (None, data["model"]) else f"{src.cmd} (its model word)"),
              Field("required_nodes", nodes, src.nodes(defaults)),
              parallel_size("tensor_parallel_size", cmd.tensor_parallel, src.cmd, "tensor"),
              parallel_size("pipeline_parallel_size", cmd.pipeline_parallel, src.cmd, "pipeline")]
    if nodes > 1 and cmd.engine == "vllm":  # SGLang has one multi-node mode: the key stays unset
        fields.append(Field("distributed_backend", "ray" if runtime == "vllm-ray" else "mp",
                            f"{src.cmd}: sparkrun's {runtime} runtime"))
    fields.append(Field("shm_size", str(executor.get("shm_size") or _SHM_DEFAULT),
                        src.of("executor_config", "shm_size") if executor.get("shm_size")
                        else "sparkrun's executor default shm_size (orchestration/executor.py)"))
    for key, ours in _EXECUTOR_KEYS.items():
        if key != "shm_size" and executor.get(key) is not None:
            fields.append(Field(ours, str(executor[key]), src.of("executor_config", key)))
    fields.append(Field("entrypoint", list(cmd.entrypoint), src.cmd))
    return fields


def _args(doc: YamlFile, src: _Sources, cmd: Command, rendered: str) -> list[Field]:
    args, said = ([cmd.args] if cmd.args.strip() else []), f"{src.cmd}, rendered over defaults"
    revision = doc.data.get("model_revision")
    if revision is not None and not _has_flag(rendered, "--revision"):
        # sparkrun downloads and distributes the model at this revision (orchestration/distribution.py): here
        # the engine loads it and `recipegen models` copies it, both from `--revision`
        args.append(f"--revision {shlex.quote(str(revision))}")
        said += f"; {src.of('model_revision')} as --revision (the revision sparkrun downloads)"
    return [Field("args", args, said)] if args else []


def _env(src: _Sources, env_in: dict[str, Any], cmd: Command, runtime: str, nodes: int) -> list[EnvVar]:
    env = [EnvVar(str(k), str(v), src.of("env", str(k))) for k, v in env_in.items()]
    env += [EnvVar(k, v, f"{src.cmd}: sparkrun sets it before `{' '.join(cmd.entrypoint)}` runs")
            for k, v in cmd.env]
    launcher = {k: (v, "solo and cluster") for k, v in _HF_OFFLINE.items()}
    launcher.update({k: (v, "cluster") for k, v in (_CLUSTER_ENV[runtime] if nodes > 1 else {}).items()})
    return env + launcher_env(env, [(k, v, f"sparkrun's {runtime} runtime sets it ({when})")
                                    for k, (v, when) in launcher.items()])


def _has_flag(command: str, flag: str) -> bool:
    return re.search(rf"(^|\s){re.escape(flag)}(=|\s|$)", command) is not None


def _names(doc: YamlFile) -> list[Field]:
    """`name`: sparkrun's recipe name, the file's stem (sparkrun ignores a `name:` key; it is named); `description`:
    `description`, else `metadata.description`, as sparkrun reads it."""
    fields = [Field("name", doc.path.stem, f"{doc.name}: the file's name (sparkrun's recipe name)")]
    meta = doc.data.get("metadata")
    for value, key in ((doc.data.get("description"), "description"),
                       ((meta if isinstance(meta, dict) else {}).get("description"), "metadata.description")):
        if value:
            return fields + [Field("description", str(value), f"{doc.name}: {key}")]
    return fields


class _Sources:
    def __init__(self, doc: YamlFile):
        self.doc = doc
        self.cmd = f"{doc.name}: command"

    def of(self, *key: str) -> str:
        return f"{self.doc.name}: {'.'.join(key)}"

    def nodes(self, defaults: dict[str, Any]) -> str:
        keys = [f"defaults.{k}" for k in ("tensor_parallel", "pipeline_parallel", "data_parallel") if k in defaults]
        keys += [k for k in ("min_nodes", "max_nodes", "mode", "solo_only", "cluster_only") if k in self.doc.data]
        return f"{self.doc.name}: {', '.join(keys) or 'no node keys'} (sparkrun's node count)"

    def engine(self, runtime: str) -> str:
        said = f"runtime {self.doc.data['runtime']} and " if self.doc.data.get("runtime") else ""
        return f"{self.doc.name}: {said}command: sparkrun's {runtime} runtime"


def _mapping(doc: YamlFile, key: str) -> dict[str, Any]:
    value = doc.data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise doc.error(key, f"must be a mapping, not {type(value).__name__}")
    return value


# sparkrun's runtimes whose engine is neither vLLM nor SGLang (its pyproject's sparkrun.runtimes entry points)
_FOREIGN = {
    "atlas": "sparkrun's atlas runtime runs Atlas (Avarok-Cybersecurity/atlas, a pure-Rust inference server, not vLLM "
             "underneath): the runtime builds its own `atlas serve --rank/--world-size ...` command from the recipe's "
             "keys (runtimes/atlas.py), which is why the file has no command",
    "llama-cpp": "sparkrun's llama-cpp runtime runs llama.cpp's llama-server, not vLLM or SGLang",
    "trtllm": "sparkrun's trtllm runtime runs TensorRT-LLM's trtllm-serve, not vLLM or SGLang",
}


def _refuse_foreign_runtime(doc: YamlFile) -> None:
    """A runtime whose engine recipegen does not compile: refused first, naming the runtime and why (a missing
    `command:` is the runtime's design, not the file's fault)."""
    runtime = str(doc.data.get("runtime") or "")
    if runtime in _FOREIGN:
        raise doc.error("runtime", f"runtime {runtime}: {_FOREIGN[runtime]}; recipegen compiles vLLM and SGLang "
                                   f"only, so it has nothing to run this recipe with")


def _runtime(doc: YamlFile, defaults: dict[str, Any]) -> str:
    runtime = str(doc.data.get("runtime") or "")
    if runtime == "eugr-vllm":  # runtimes/eugr_vllm_ray.py: vllm-ray with eugr's builder and mods (deprecated)
        runtime = "vllm-ray"
    command = doc.data["command"].strip()
    if not runtime:
        if _CMD_VLLM.match(command):
            runtime = "vllm"
        elif _CMD_SGLANG.match(command):
            runtime = "sglang"
        elif _CMD_OTHER.match(command):
            raise doc.error("command", "a llama.cpp or TensorRT-LLM command: recipegen runs vLLM and SGLang only")
    if runtime in ("vllm", ""):
        ray = str(defaults.get("distributed_executor_backend", "")).lower() == "ray"
        runtime = "vllm-ray" if ray or _RAY_BACKEND.search(command) else "vllm-distributed"
    if runtime not in _RUNTIMES:
        raise doc.error("runtime", f"sparkrun runtime '{runtime}' has no recipegen engine (vllm-distributed, "
                                   f"vllm-ray and sglang do)")
    return runtime


def _node_count(doc: YamlFile, defaults: dict[str, Any]) -> int:
    data = doc.data

    def whole(key: tuple[str, ...], value: Any) -> int:
        try:
            return int(value)
        except (TypeError, ValueError):
            raise doc.error(key, f"a node count or parallel size is not a whole number: {value!r}") from None

    min_nodes = whole(("min_nodes",), data.get("min_nodes", 1))
    max_nodes = None if data.get("max_nodes") is None else whole(("max_nodes",), data["max_nodes"])
    sizes = [defaults.get(k) for k in ("tensor_parallel", "pipeline_parallel", "data_parallel")]
    product = 1
    for k, size in zip(("tensor_parallel", "pipeline_parallel", "data_parallel"), sizes):
        product *= whole(("defaults", k), size) if size is not None else 1
    solo = data.get("mode") == "solo" or bool(data.get("solo_only"))
    if data.get("cluster_only"):
        min_nodes = max(min_nodes, 2)
    nodes = product if any(s is not None for s in sizes) else min_nodes
    if max_nodes is not None:
        nodes = min(nodes, max_nodes)
    return 1 if solo else max(nodes, 1)


def _substitute(doc: YamlFile, key: str, text: str, chain: dict[str, Any]) -> str:
    """vpd's arg_substitute repeated until nothing changes, as sparkrun renders a command and its pre_exec
    (hooks.render_hook_command): `{key}` becomes str() of the value; a key without one stays as written."""
    def replace(m: re.Match[str]) -> str:
        name = m.group().strip("}{")
        value = chain.get(name)
        scalar_default(doc, name, value)
        return str(value) if value is not None else m.group()

    rendered, last = text, None
    for _ in range(100):
        if rendered == last:
            return rendered
        last, rendered = rendered, _ARG.sub(replace, rendered)
    raise doc.error(key, "its placeholders never stop expanding (a default names itself)")


def _render(doc: YamlFile, command: str, chain: dict[str, Any]) -> tuple[str, list[str]]:
    """sparkrun's Recipe.render_command: the substitution, then `\\ <newline>` made a line continuation."""
    rendered = _TRAILING_SPACE_CONTINUATION.sub("\\\n", _substitute(doc, "command", command, chain))
    unresolved = [m.group() for m in _ARG.finditer(rendered)
                  if m.group().strip("}{") not in chain and not m.group().startswith(('{"', "{'"))]
    return rendered, unresolved


def _pre_exec(doc: YamlFile, chain: dict[str, Any]) -> tuple[list[str], list[NotCarried]]:
    value = doc.data.get("pre_exec") or []
    if not isinstance(value, list):
        raise doc.error("pre_exec", "must be a list of commands")
    setup, named = [], []
    for i, step in enumerate(value):
        if isinstance(step, str):
            setup.append(_substitute(doc, "pre_exec", step, chain))
        else:
            named.append(NotCarried(f"pre_exec[{i}]", doc.line("pre_exec"),
                                    "a file copy step: put the files in a mod folder (a run.sh that copies them)"))
    return setup, named


def _unknown(doc: YamlFile, executor: dict[str, Any], unresolved: list[str], cmd: Command, nodes: int,
             env: list[EnvVar]) -> list[NotCarried]:
    """Every peer key and value with no recipegen home, named with what to do."""
    named = [NotCarried(k, doc.line(k), why) for k, why in _NOT_CARRIED.items() if k in doc.data]
    if doc.data.get("model_revision") is not None and _has_flag(str(doc.data.get("command")), "--revision"):
        named.append(NotCarried("model_revision", doc.line("model_revision"),
                                "the command's own --revision wins (the engine loads that one, and `recipegen models` "
                                "copies it)"))
    plugin = "runtime_config for sparkrun's runtime plugin: no recipegen home"
    named += [NotCarried(k, doc.line(k), "not a sparkrun recipe key recipegen knows (sparkrun hands such keys to its "
                                         "runtime plugin): no recipegen home")
              for k in doc.data if k not in _IGNORED and k not in _NOT_CARRIED]
    named += [NotCarried(f"runtime_config.{k}", doc.line("runtime_config", str(k)), plugin)
              for k in _mapping(doc, "runtime_config")]
    named += [NotCarried(f"executor_config.{k}", doc.line("executor_config", k),
                         "a docker option recipegen sets itself (GPU, host network, RDMA devices and capabilities)"
                         " or not at all") for k in executor if k not in _EXECUTOR_KEYS]
    meta = doc.data.get("metadata")
    if isinstance(meta, dict) and any(k != "description" for k in meta):
        named.append(NotCarried("metadata", doc.line("metadata"), "descriptive only ("
                                + ", ".join(str(k) for k in meta if k != "description") + "): no recipegen home"))
    used = set(_ARG.findall(str(doc.data.get("command")))) | _READ_BY_SPARKRUN
    named += [NotCarried(f"defaults.{k}", doc.line("defaults", str(k)), "no placeholder in the command uses it, "
                         "and sparkrun reads it nowhere else") for k in _mapping(doc, "defaults") if str(k) not in used]
    named += [NotCarried("command", doc.line("command"), f"{p} has no value in defaults: sparkrun leaves it as "
                                                         f"written, so it reaches the engine as written")
              for p in dict.fromkeys(unresolved)]
    named += [NotCarried("command", doc.line("command"), f"{flag}: rank wiring the compiler writes from the "
                                                         f"cluster file (dropped from args)") for flag in cmd.wiring]
    if cmd.backend and nodes == 1:
        named.append(NotCarried("command", doc.line("command"), f"--distributed-executor-backend "
                                f"{cmd.backend} on one node: recipegen runs a single node without it"))
    return named + [NotCarried(f"env.{e.name}", doc.line("env", e.name), "sparkrun expands $VARs in it from the "
                               "shell that runs sparkrun; carried as written") for e in env if "$" in e.value]
