"""eugr/spark-vllm-docker recipes (`recipe_version: "1"`) as mainline run-recipe.py and launch-cluster.sh run them.

The reference is eugr's mainline for DGX Spark at EUGR_COMMIT (launch-cluster.sh read at that commit; run-recipe.py
at the release that goes with it: no Ray by default, `--ray` to opt in, the solo TP rule). Reproduced from that code:
run-recipe.py's generate_launch_script (`command.format(**params)`, params = defaults with the CLI overrides over
them: Python str.format, so `{{` and `}}` are literal braces and a placeholder without a value stops eugr with an
error; without Ray, solo or multi-node, `--distributed-executor-backend <x>` is cut out and lines left empty or
holding only a continuation are dropped; a trailing continuation goes), its solo rule (`--solo` sets the override
tensor_parallel=1 unless `--tp` is given), its `export K="v"` of the recipe's env, and launch-cluster.sh's
container: DOCKER_ARGS' `-e NCCL_IGNORE_CPU_AFFINITY=1 -e PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`, the
Hugging Face cache, its cache folders (~/.cache/vllm, ~/.cache/flashinfer, ~/.triton, ~/.tilelang; `--no-cache-dirs`
leaves them out) mounted at root's; the run-wide Ray variables its get_env_flags gives every container, solo too
(RAY_memory_monitor_refresh_ms=0, RAY_num_prestart_python_workers=0, RAY_object_store_memory=1073741824); with Ray
the `ray start` options its start_ray_head and start_ray_worker pass (`--object-store-memory 1073741824 --num-cpus 2
--disable-usage-stats`, the head also `--include-dashboard=false`). The node count is what launch-cluster.sh keeps:
tensor x pipeline x data parallel as its parse_parallelism_from_text reads them from the command (else the defaults'
tensor_parallel x pipeline_parallel); solo_only: one node. docs/fidelity.md lists every launcher default.
"""

from __future__ import annotations

import re
import string
from typing import Any

from generator.check.secrets import secret_env
from generator.importers.base import (EnvVar, Field, ImportedRecipe, ImportOptions, NotCarried, launcher_env,
                                      no_model, parallel_size, scalar_default)
from generator.importers.command import Command, split_command, tidy
from generator.importers.modsearch import find_mods, mods_fields
from generator.importers.passenv import split_secrets
from generator.importers.yamlfile import YamlFile

_BACKEND = re.compile(r"--distributed-executor-backend\s+\S+")
# The mainline commit the import reproduces (launch-cluster.sh read there); named in each imported file's header.
EUGR_COMMIT = "013cd2ea2264d7af8567aa763ac6ccd8f0338c1a"
_CACHES = (("~/.cache/vllm", "/root/.cache/vllm"), ("~/.cache/flashinfer", "/root/.cache/flashinfer"),
           ("~/.triton", "/root/.triton"), ("~/.tilelang", "/root/.tilelang"))
# launch-cluster.sh start_ray_head / start_ray_worker: the options both give `ray start`
# launch-cluster.sh's `ray start` options; its head-only --include-dashboard=false reaches the head alone
# (generator/engines/ranks.py)
_RAY_ARGS = ("--object-store-memory", "1073741824", "--num-cpus", "2", "--disable-usage-stats",
             "--include-dashboard=false")
_LAUNCHER_ENV = {"NCCL_IGNORE_CPU_AFFINITY": "1",  # launch-cluster.sh DOCKER_ARGS
                 "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
# launch-cluster.sh get_env_flags: every container it starts, solo or not, with or without Ray
_RAY_ENV = {"RAY_memory_monitor_refresh_ms": "0", "RAY_num_prestart_python_workers": "0",
                "RAY_object_store_memory": "1073741824"}
_SH_DOUBLE = re.compile(r'[$`"\\]')  # what `export K="v"` would expand or unescape
_KNOWN = {"recipe_version", "name", "description", "model", "container", "command", "defaults", "env", "mods",
          "cluster_only", "solo_only", "build_args"}


class EugrImporter:
    peer = "eugr v1"

    def accepts(self, doc: YamlFile) -> bool:
        return str(doc.data.get("recipe_version")) == "1"

    def convert(self, doc: YamlFile, options: ImportOptions) -> ImportedRecipe:
        defaults, env_in = _checked_keys(doc)
        solo = _node_count(doc, defaults) == 1  # run-recipe.py: --solo, or a single node configured
        ray = options.ray and not solo
        command = _rendered(doc, defaults, solo, ray)
        cmd = split_command(command.strip(), lambda m: doc.error("command", m), vllm_wrapper=True)
        nodes = _nodes(doc, defaults, cmd, command, solo)
        how = "with Ray (--ray)" if ray else ("solo" if nodes == 1 else "without Ray (run-recipe.py's default)")
        fields = _fields(doc, cmd, nodes, solo, ray, how)
        mods = find_mods(doc, doc.data.get("mods"), options.mods_dirs)
        fields += mods_fields(mods, f"{doc.name}: mods")
        if ray:
            fields.append(Field("ray_args", list(_RAY_ARGS), "launch-cluster.sh's `ray start` (the head-only "
                                                            "--include-dashboard=false goes to the head alone)"))
        if cmd.args.strip():
            fields.append(Field("args", [cmd.args], f"{doc.name}: command, formatted over defaults"))
        env, secret_fields, notes = split_secrets(doc, _env(doc, env_in, cmd))
        fields += secret_fields
        if cmd.model is None:
            notes.append(no_model(doc))
        notes = _not_carried(doc, env_in, cmd.wiring) + _backend_dropped(doc, ray, nodes) + notes
        return ImportedRecipe(doc.path, self.peer, tuple(fields), tuple(env), mods, tuple(notes),
                              notes=(f"as eugr/spark-vllm-docker @{EUGR_COMMIT[:8]} (mainline: run-recipe.py, "
                                     f"launch-cluster.sh) runs it {how} on {nodes} node(s)",))


def _checked_keys(doc: YamlFile) -> tuple[dict[str, Any], dict[str, Any]]:
    """The keys run-recipe.py requires, checked; the `defaults` and `env` mappings."""
    for key in ("name", "container", "command"):
        if not isinstance(doc.data.get(key), str) or not doc.data[key].strip():
            raise doc.error(key, "required by run-recipe.py: a non-empty string")
    defaults = doc.data.get("defaults") or {}
    env_in = doc.data.get("env") or {}
    for key, value in (("defaults", defaults), ("env", env_in)):
        if not isinstance(value, dict):
            raise doc.error(key, f"must be a mapping, not {type(value).__name__}")
    return defaults, env_in


def _rendered(doc: YamlFile, defaults: dict[str, Any], solo: bool, ray: bool) -> str:
    """The command as run-recipe.py's generate_launch_script renders it: `command.format(**params)`, then without
    Ray the backend flag cut out (and the lines left empty dropped), and no trailing continuation."""
    # run-recipe.py's solo rule: the override tensor_parallel=1 (unless --tp is given) over the defaults
    params = {**defaults, **({"tensor_parallel": 1} if solo else {})}
    template = doc.data["command"]
    for name, value in params.items():  # the values format() fills in, the solo override included
        if name in _placeholders(template):
            scalar_default(doc, str(name), value)
    try:
        command = template.format(**params)
    except KeyError as exc:
        raise doc.error("command", f"placeholder {exc} has no value in defaults (run-recipe.py stops "
                                   f"with 'Missing parameter')") from None
    except IndexError:  # `{0}` or `{}`: format(**params) has no positional values
        raise doc.error("command", "a positional placeholder (`{}` or `{0}`): run-recipe.py fills only named "
                                   "ones from defaults (`{port}`); name it, or write {{ }} for literal "
                                   "braces") from None
    except (ValueError, AttributeError, TypeError) as exc:
        raise doc.error("command", f"Python str.format refuses the template: {exc} (write {{{{ and }}}} "
                                   f"for literal braces)") from None
    return tidy(command if ray else _BACKEND.sub("", command), drop_lines=not ray)


def _nodes(doc: YamlFile, defaults: dict[str, Any], cmd: Command, command: str, solo: bool) -> int:
    """How many nodes launch-cluster.sh keeps: tp x pp x dp of the command (parse_parallelism_from_text), else the
    defaults'; one solo, at least two cluster_only."""
    if cmd.engine != "vllm":
        raise doc.error("command", "eugr's launcher runs vLLM; this command starts " + " ".join(cmd.entrypoint))
    if cmd.model is None and not isinstance(doc.data.get("model"), str):
        raise doc.error("command", "names no model (`vllm serve <model>`) and the recipe has no `model`")
    sizes = (cmd.tensor_parallel or 1) * (cmd.pipeline_parallel or 1) * _data_parallel(command)
    if solo and sizes > 1:
        raise doc.error("command", f"runs solo (one node), but the command fixes tensor x pipeline x data "
                                   f"parallel {sizes} where run-recipe.py's solo rule sets only "
                                   f"{{tensor_parallel}} to 1: vLLM would want {sizes} GPUs on one node")
    nodes = 1 if solo else (sizes if cmd.tensor_parallel or cmd.pipeline_parallel else _node_count(doc, defaults))
    return max(nodes, 2) if doc.data.get("cluster_only") else nodes


def _fields(doc: YamlFile, cmd: Command, nodes: int, solo: bool, ray: bool, how: str) -> list[Field]:
    data, src = doc.data, f"{doc.name}: command"
    wrapped = ("" if cmd.entrypoint == ("vllm", "serve") else
               ": vLLM behind the image's own program, as eugr's launcher runs any command")
    counted = ("solo (run-recipe.py's solo rule: tensor_parallel 1)" if solo else
               "the command's tensor x pipeline x data parallel (launch-cluster.sh keeps that many nodes)"
               if cmd.tensor_parallel or cmd.pipeline_parallel else "defaults tensor_parallel x pipeline_parallel")
    fields = [Field("engine", "vllm", f"{src} ({' '.join(cmd.entrypoint)}{wrapped})"),
              Field("name", data["name"], f"{doc.name}: name"),
              *([Field("description", str(data["description"]), f"{doc.name}: description")]
                if data.get("description") else []),
              Field("docker_image", data["container"], f"{doc.name}: container"),
              Field("model", cmd.model or data["model"], f"{doc.name}: model" if cmd.model is None else
                    f"{src} (its model word{', as model says' if cmd.model == data.get('model') else ''})"),
              Field("required_nodes", nodes, f"{doc.name}: {counted}"
                    + "".join(f", {k} {str(data[k]).lower()}" for k in ("solo_only", "cluster_only") if k in data)),
              parallel_size("tensor_parallel_size", cmd.tensor_parallel, src, "tensor"),
              parallel_size("pipeline_parallel_size", cmd.pipeline_parallel, src, "pipeline")]
    if nodes > 1:
        fields.append(Field("distributed_backend", "ray" if ray else "mp", f"eugr's launcher, {how}"))
    fields.append(Field("entrypoint", list(cmd.entrypoint), src))
    fields.append(Field("extra_mounts", [{"host": h, "container": c} for h, c in _CACHES],
                        "launch-cluster.sh mounts its cache folders (--no-cache-dirs leaves them out)"))
    return fields


def _env(doc: YamlFile, env_in: dict[str, Any], cmd: Command) -> list[EnvVar]:
    env = [EnvVar(str(k), str(v), f"{doc.name}: env.{k}") for k, v in env_in.items()]
    env += [EnvVar(k, v, f"{doc.name}: command: set before `vllm serve`") for k, v in cmd.env]
    return env + launcher_env(env, [(k, v, "launch-cluster.sh sets it in every container")
                                    for k, v in _LAUNCHER_ENV.items()]
                              + [(k, v, "launch-cluster.sh's get_env_flags sets it in every container, solo too, Ray "
                                        "or not") for k, v in _RAY_ENV.items()])


def _backend_dropped(doc: YamlFile, ray: bool, nodes: int) -> list[NotCarried]:
    """run-recipe.py without --ray cuts the command's `--distributed-executor-backend ray`: say so, and why."""
    found = _BACKEND.search(str(doc.data.get("command")))
    if ray or found is None or found[0].split()[-1] != "ray":
        return []
    why = ("one node needs no backend (run-recipe.py's solo rule)" if nodes == 1 else
           "run-recipe.py runs vLLM's own multi-node backend unless given --ray, so the recipe sets "
           "distributed_backend = \"mp\"; import with --ray to keep Ray")
    return [NotCarried("command", doc.line("command"), f"--distributed-executor-backend ray: cut out as eugr's "
                                                       f"launcher cuts it: {why}")]


def _node_count(doc: YamlFile, defaults: dict[str, Any]) -> int:
    if doc.data.get("solo_only"):
        return 1
    try:
        nodes = int(defaults.get("tensor_parallel", 1)) * int(defaults.get("pipeline_parallel", 1))
    except (TypeError, ValueError):
        raise doc.error("defaults", "tensor_parallel and pipeline_parallel must be whole numbers") from None
    return max(nodes, 2) if doc.data.get("cluster_only") else max(nodes, 1)


def _data_parallel(command: str) -> int:
    """`-dp N` / `--data-parallel-size N` (or `=N`) as launch-cluster.sh's parse_parallelism_from_text reads it."""
    found = re.findall(r"(?:^|\s)(?:-dp|--data-parallel-size)(?:=|\s+)(\d+)(?=\s|$)", command)
    return int(found[-1]) if found else 1


# Keys newer run-recipe.py releases read, with no recipegen home.
_OTHER_KEYS = {"benchmark": "the benchmark newer run-recipe.py releases run after launch when `enabled`: "
                            "`recipegen bench` runs llama-benchy against the head instead; not carried"}


def _not_carried(doc: YamlFile, env: dict[str, Any], wiring: tuple[str, ...]) -> list[NotCarried]:
    named = []
    if doc.data.get("build_args"):
        named.append(NotCarried("build_args", doc.line("build_args"),
                                "options of eugr's build-and-copy.sh (not Docker build args): build the image "
                                "with that script, or give the recipe a `docker_image_dir`"))
    named += [NotCarried(f"env.{k}", doc.line("env", str(k)), "eugr exports it in double quotes, so bash would "
                                                             "expand or unescape it there; carried as written")
              for k, v in env.items() if _SH_DOUBLE.search(str(v)) and not secret_env(str(k), str(v))]  # a secret
    # is not carried at all: split_secrets names it (pass_env)
    used = _placeholders(str(doc.data.get("command"))) | {"tensor_parallel", "pipeline_parallel"}
    named += [NotCarried(f"defaults.{k}", doc.line("defaults", str(k)), "no placeholder in the command uses it")
              for k in (doc.data.get("defaults") or {}) if str(k) not in used]
    named += [NotCarried(k, doc.line(k), _OTHER_KEYS.get(str(k), "not a key run-recipe.py reads: no recipegen home"))
              for k in doc.data if k not in _KNOWN]
    named += [NotCarried("command", doc.line("command"), f"{flag}: rank wiring the compiler writes from the "
                                                         f"cluster file (dropped from args)") for flag in wiring]
    return named


def _placeholders(command: str) -> set[str]:
    """The defaults a str.format template reads (`{a.b}` and `{a[0]}` read a)."""
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(command) if f is not None}
    except ValueError:
        return set()
    return {re.split(r"[.\[]", f, maxsplit=1)[0] for f in fields}
