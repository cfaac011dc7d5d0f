"""Domain rules that catch a recipe which would fail at boot, before anyone waits 15 minutes for it.

Each rule is a small function over the resolved recipe and the cluster that yields findings (Helm's habit);
the schema covers what it can express (types, enums, patterns) and the editor shows it; the rest is here.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import Any

from generator.diagnostics import Diagnostic
from generator.engines.ranks import OWNED_ENV, OWNED_FLAGS, OWNED_RAY_FLAGS
from generator.resolve.argwords import group_flags, json_problem
# The rule modules grouped by what they protect register themselves on import: lint_recipe runs them all.
from generator.check import flags as lint_flags, launch as lint_launch, mounts as lint_mounts, paths as lint_paths, ports as lint_ports, ray as lint_ray  # noqa: F401
from generator.check.registry import ERROR, RULES as RULES, WARNING, Findings, flags, rule
from generator.read.tomldoc import KeyPath, TomlDocument, format_key
from generator.resolve.model import (HF_CACHE_IN_CONTAINER, LAUNCHER_PATH, Cluster, ContainerOptions, FlagGroup, Mount,
                                     NodeChoiceError, Origin, Recipe, container_target)

LAUNCHER_DIR = posixpath.dirname(LAUNCHER_PATH)  # /opt/recipegen: the compiler's, like the cache mount
FABRIC_ENV = re.compile(r"^(NCCL_|UCX_|GLOO_|TP_SOCKET_|OMPI_MCA_btl_tcp_if|NVSHMEM_)")
# Formats of real tokens: Hugging Face, OpenAI-style, GitHub, GitLab, Slack, AWS access keys, JWTs; a URL carrying
# a password (https://user:pw@host, also git+ssh://, redis://), an HTTP Authorization value (Bearer / Basic).
# A URL's scheme starts where no scheme character precedes it: without the lookbehind a long run of letters (a
# 1 MiB mod file or argument) is rescanned from every position, quadratic time.
SECRET_VALUE = re.compile(r"(hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}"
                          r"|glpat-[A-Za-z0-9_-]{20,}|xox[baprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}"
                          r"|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\."
                          r"|(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@"
                          r"|\b(?:[Bb]earer|BEARER|[Bb]asic|BASIC)\s+[A-Za-z0-9._~+/-]{8,}=*)")
# Whole words of a variable name: HF_TOKEN, OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, SSH_PASSPHRASE; a name ending
# in TOKEN (HFTOKEN) or _KEY (WANDB_KEY, OPENAI_KEY); not TOKENIZERS_PARALLELISM, MAX_NUM_BATCHED_TOKENS or
# NCCL_IB_GID_INDEX.
SECRET_NAME = re.compile(r"(^|[_-])(TOKEN|SECRET|PASSWORD|PASSWD|PASS|PASSPHRASE|API[_-]?KEY|ACCESS[_-]KEY"
                         r"|PRIVATE[_-]KEY|CREDENTIALS?)($|[_-])|TOKEN$|[_-]KEY$", re.I)
# Docker's *_FILE convention and friends name where a secret lives, not the secret; a public key, and the keys
# of caches, sorts and maps, are not secrets.
NOT_A_SECRET_NAME = re.compile(r"[_-](FILE|PATH|DIR|MOUNT)$|(^|[_-])(PUBLIC|CACHE|SORT|HASH|PARTITION|SHARD|ROUTING"
                               r"|PRIMARY|LOOKUP|INDEX|MAP|GROUP)[_-]KEY$", re.I)


def secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name)) and not NOT_A_SECRET_NAME.search(name)


def secret_env(name: str, value: str) -> bool:
    """A variable (or build arg) that is a secret: named like one, or holding what looks like a token."""
    return secret_name(name) or bool(SECRET_VALUE.search(value))


SECRET_FIX = ("secrets must not be written in recipes or clusters (they would land in committed out/): export it in "
              "the shell that deploys and list its name in `pass_env`, so Compose passes it through at `up`")


def lint_recipe(recipe: Recipe, cluster: Cluster | None) -> list[Diagnostic]:
    found = []
    child = recipe.document.shown
    for r in RULES:
        for origin, key, message in r.check(recipe, cluster):
            file = origin.file or child
            if file != child:  # a parent's line: say which recipe it is a problem for
                message += f" (inherited by {child})"
            line = origin.line
            found.append(Diagnostic(file, line, (origin.col or 1) if line else None, key, message, r.severity, r.id))
    return sorted(set(found), key=lambda d: (d.file, d.line or 0, d.col or 0, d.rule or "", d.message))


def _last(recipe: Recipe, flag: str) -> FlagGroup | None:
    groups = [g for g in flags(recipe) if g.flag == flag]
    return groups[-1] if groups else None


def _number(group: FlagGroup | None) -> float | None:
    try:
        return float(group.values[0]) if group and group.values else None
    except ValueError:
        return None


@rule("owned-flag", ERROR, "a flag the compiler writes itself (parallel sizes, rank wiring, the model)")
def _owned_flag(recipe: Recipe, cluster: Cluster | None) -> Findings:
    owned = OWNED_FLAGS[recipe.engine]
    for group in flags(recipe):
        if group.flag in owned:
            yield group.args[0].origin, "args", f"'{group.flag}' is set by the compiler: {owned[group.flag]}"
    for group in group_flags(recipe.ray_args):
        if group.flag in OWNED_RAY_FLAGS:
            yield (group.args[0].origin, "ray_args",
                   f"'{group.flag}' is set by the compiler: {OWNED_RAY_FLAGS[group.flag]}")
    words = recipe.flag_groups
    if words and words[0].flag is None:
        yield (words[0].args[0].origin, "args", f"'{words[0].args[0].word}' is not a flag: positional arguments are "
                                                "the compiler's (it passes the model); start args with a flag")


@rule("owned-env", ERROR, "an environment variable the compiler sets per rank")
def _owned_env(recipe: Recipe, cluster: Cluster | None) -> Findings:
    for name in OWNED_ENV:
        if name in recipe.env:
            yield recipe.env_origins[name], f"env.{name}", (f"'{name}' is set per rank by the compiler from the "
                                                             "cluster's node addresses")


@rule("bad-json", ERROR, "a flag that takes JSON (the engine data says which) whose value does not parse")
def _bad_json(recipe: Recipe, cluster: Cluster | None) -> Findings:
    for group in flags(recipe):
        for value in group.values[:1]:
            problem = json_problem(value)
            if problem and not lint_flags.takes_json(recipe, group):
                continue  # looks like JSON, but the engine reads it as text (a chat template, a [name])
            if problem:
                yield (group.args[0].origin, "args",
                       f"'{group.flag}' value is not valid JSON: {problem}: {value.strip()[:60]}"
                       + _json_quoting_hint(group))


def _json_quoting_hint(group: FlagGroup) -> str:
    """JSON written without shell quotes loses its double quotes and splits at its blanks (args are shell
    words): say so, since the message about the broken JSON alone sends people looking for a typo."""
    value = group.values[0]
    if len(group.values) == 1 and '"' in value:
        return ""  # the quotes survived: a real JSON typo
    words = f"{len(group.values)} words" if len(group.values) > 1 else "1 word without its double quotes"
    return (f"; args are split as a shell does and this JSON became {words}: wrap it in single quotes inside "
            "the string, e.g. \"'{\\\"method\\\": \\\"mtp\\\"}'\"")


@rule("pass-env", ERROR, "a pass_env name that also has a value in the recipe or the cluster",
      needs_cluster=True)
def _pass_env(recipe: Recipe, cluster: Cluster | None) -> Findings:
    valued = set(recipe.env) | set(OWNED_ENV)
    if cluster is not None:
        valued |= set(cluster.env) | {k for n in cluster.nodes for k in n.env}
    for name in recipe.pass_env:
        if name in valued:
            yield (recipe.origins["pass_env"], "pass_env",
                   f"'{name}' is passed from the deploying shell but also has a value here or in the cluster "
                   "(or is set by the compiler): keep one")


@rule("mount-target", ERROR, "an extra mount on /, on a path the compiler mounts or over its launcher's folder, or "
                        "twice on one folder")
def _mount_target(recipe: Recipe, cluster: Cluster | None) -> Findings:
    reserved = {HF_CACHE_IN_CONTAINER: "the Hugging Face cache (set hf_cache in the cluster)",
                "/dev/shm": "shared memory (set shm_size)"}
    seen: dict[str, Mount] = {}
    for mount in recipe.mounts:  # compared as the container resolves them: //dev/shm is /dev/shm
        target = container_target(mount.container)
        if target == "/":
            yield mount.origin, "extra_mounts", f"'{mount.container}' is the container's root: Docker refuses it"
        elif _overlaps(target, LAUNCHER_DIR):
            yield (mount.origin, "extra_mounts",
                   f"'{mount.container}' overlaps recipegen's launcher folder {LAUNCHER_DIR} (it, a folder above it "
                   "or a file in it): the mount would hide or replace the launcher that runs setup, mods and Ray "
                   "before the engine; mount elsewhere")
        elif target in reserved:
            yield mount.origin, "extra_mounts", f"'{mount.container}' is {reserved[target]}; mount elsewhere"
        elif target in seen:
            first = seen[target]
            yield (mount.origin, "extra_mounts",
                   f"'{mount.container}' and '{first.container}' (line {first.origin.line}) are both {target}: "
                   "one folder takes one mount; keep one")
        else:
            seen[target] = mount


def _overlaps(target: str, folder: str) -> bool:
    return target == folder or folder.startswith(target.rstrip("/") + "/") or target.startswith(folder + "/")


@rule("container-user", ERROR, "a non-root container_user that mods cannot run as: a user name, or an empty mod file")
def _container_user(recipe: Recipe, cluster: Cluster | None) -> Findings:
    """Mod files reach the container as Compose configs, in folders Docker creates as root; Compose gives a file
    to a user only by uid, and the launcher (running as that user) must create the mod's empty files itself."""
    given = recipe.container.get("container_user")  # the schema made it a string
    user = str(given) if given else (cluster.container.container_user if cluster else None)
    options = ContainerOptions(container_user=user)
    if options.as_root or not recipe.mods:
        return
    origin = recipe.origins.get("container_user") or recipe.origins["mods"]
    key = "container_user" if "container_user" in recipe.origins else "mods"
    if options.numeric_user is None:
        yield (origin, key, f"container_user '{user}' is a name: Compose gives the mods' files to a user by uid "
                            "only, and a name's uid is in the image's /etc/passwd, which compiling cannot read; "
                            "write the numeric UID[:GID] (`docker run --rm IMAGE id USER` shows it)")
    for mod in recipe.mods:
        for file in mod.files:
            if not file.text:
                yield (mod.origin, "mods",
                       f"mod '{mod.source}': {file.path} is empty, so the launcher creates it (Compose copies no "
                       f"empty config), in a folder Docker makes as root: as container_user '{user}' it cannot; "
                       "give the file content (a comment), or run as root")


@rule("remove-unused", WARNING, "remove_args / remove_env naming what no parent sets")
def _remove_unused(recipe: Recipe, cluster: Cluster | None) -> Findings:
    for origin, key, name in recipe.unused_removals:
        yield origin, key, f"'{name}' is not set by any parent recipe: nothing to remove (a typo?)"


@rule("duplicate-flag", WARNING, "the same flag given twice (the engine silently keeps one)")
def _duplicate_flag(recipe: Recipe, cluster: Cluster | None) -> Findings:
    seen: dict[str | None, FlagGroup] = {}
    for group in flags(recipe):
        if group.flag in seen:
            first = seen[group.flag].args[0].origin
            yield group.args[0].origin, "args", f"'{group.flag}' is given twice (first at line {first.line})"
        else:
            seen[group.flag] = group


# Data parallel replicas multiply the ranks: vLLM's and SGLang's spellings.
DATA_PARALLEL_FLAGS = {"vllm": ("--data-parallel-size", "-dp"), "sglang": ("--dp", "--dp-size", "--data-parallel-size")}


@rule("parallel-size", ERROR, "tensor x pipeline (x data) parallel size must equal the GPUs of the nodes used",
      needs_cluster=True)
def _parallel_size(recipe: Recipe, cluster: Cluster | None) -> Findings:
    gpus_per_node = cluster.gpus_per_node if cluster else 1
    world = recipe.tensor_parallel_size * recipe.pipeline_parallel_size
    dp_group = next((g for g in reversed(flags(recipe)) if g.flag in DATA_PARALLEL_FLAGS[recipe.engine]), None)
    dp = _number(dp_group)
    if dp is not None and dp >= 1 and dp == int(dp):
        world *= int(dp)
    gpus = recipe.required_nodes * gpus_per_node
    if world != gpus:
        keys = ("tensor_parallel_size", "pipeline_parallel_size", "required_nodes")
        candidates = [recipe.origins.get(k) for k in keys]
        origin = next((o for o in candidates if o is not None and o.file), recipe.document.origin("recipe", ()))
        product = "tensor_parallel_size x pipeline_parallel_size"
        if dp_group is not None:
            product += f" x {dp_group.flag}"
        yield (origin, "tensor_parallel_size",
               f"{product} = {world}, but {recipe.required_nodes} node(s) x "
               f"{gpus_per_node} GPU = {gpus}: every GPU of the nodes used must hold a rank")


@rule("too-many-nodes", ERROR, "the recipe needs more nodes than the cluster has, or names nodes it lacks",
      needs_cluster=True)
def _too_many_nodes(recipe: Recipe, cluster: Cluster | None) -> Findings:
    if cluster is None:
        return
    try:
        cluster.nodes_for(recipe)
    except NodeChoiceError as exc:
        yield recipe.origins[exc.key], exc.key, str(exc)


@rule("sglang-backend", ERROR, "SGLang wires its ranks itself; the ray backend is vLLM's")
def _sglang_backend(recipe: Recipe, cluster: Cluster | None) -> Findings:
    if recipe.engine == "sglang" and recipe.distributed_backend == "ray":
        yield recipe.origins["distributed_backend"], "distributed_backend", "SGLang supports the 'mp' backend only"


@rule("cudagraph-capture", WARNING, "with speculative decoding, cudagraph capture size should be max_num_seqs x (k+1)")
def _cudagraph_capture(recipe: Recipe, cluster: Cluster | None) -> Findings:
    spec = _last(recipe, "--speculative-config")
    capture = _last(recipe, "--max-cudagraph-capture-size")
    seqs = _last(recipe, "--max-num-seqs")
    if not (spec and spec.values and capture and seqs):
        return
    try:
        k = int(json.loads(spec.values[0]).get("num_speculative_tokens", 0))
    except (ValueError, AttributeError, TypeError):
        return
    want = int(_number(seqs) or 0) * (k + 1)
    captured = _number(capture)
    if k and captured is not None and int(captured) != want:
        yield (capture.args[0].origin, "args",
               f"--max-cudagraph-capture-size {capture.values[0]} should be --max-num-seqs x (k+1) = "
               f"{seqs.values[0]} x {k + 1} = {want} with num_speculative_tokens = {k}")


def _memory_fraction(recipe: Recipe) -> tuple[FlagGroup | None, float | None]:
    group = _last(recipe, "--gpu-memory-utilization") or _last(recipe, "--mem-fraction-static")
    return group, _number(group)


@rule("gpu-memory", WARNING, "--gpu-memory-utilization above the cluster's ceiling (unified memory)",
      needs_cluster=True)
def _gpu_memory(recipe: Recipe, cluster: Cluster | None) -> Findings:
    group, value = _memory_fraction(recipe)
    ceiling = cluster.gpu_memory_ceiling if cluster else 0.9
    if group is not None and value is not None and ceiling < value <= 1:
        yield (group.args[0].origin, "args",
               f"{group.flag} {value} is above the cluster's gpu_memory_ceiling {ceiling}: GB10 memory is unified, "
               "so the OS, the page cache and the weights' staging share what this leaves; under load the node can "
               "stall or the engine be OOM-killed (known to work for some models: measure it)")


@rule("gpu-memory-range", ERROR, "--gpu-memory-utilization / --mem-fraction-static outside (0, 1]")
def _gpu_memory_range(recipe: Recipe, cluster: Cluster | None) -> Findings:
    group, value = _memory_fraction(recipe)
    if group is not None and value is not None and not 0 < value <= 1:
        yield (group.args[0].origin, "args",
               f"{group.flag} {group.values[0]} is a fraction of the GPU's memory: the engine refuses values "
               "outside (0, 1] at start-up")


@rule("fabric-env", WARNING, "a recipe env var overriding the cluster's fabric variables",
      needs_cluster=True)
def _fabric_env(recipe: Recipe, cluster: Cluster | None) -> Findings:
    if cluster is None:
        return
    fabric = set(cluster.env) | {k for n in cluster.nodes for k in n.env}
    for name, value in recipe.env.items():
        same = all(cluster.node_env(n).get(name) == value for n in cluster.nodes)
        if FABRIC_ENV.match(name) and name in fabric and not same:  # restating the cluster's value is harmless
            yield (recipe.env_origins[name], f"env.{name}",
                   f"overrides the cluster's {name}: fabric variables belong to the cluster (per node where names "
                   "differ), or ranks end up on the wrong interface")


@rule("secret", ERROR, "a value that looks like a secret in a recipe")
def _secret(recipe: Recipe, cluster: Cluster | None) -> Findings:
    for name, value in recipe.env.items():
        if value and secret_env(name, value):
            yield recipe.env_origins[name], f"env.{name}", f"looks like a secret: {SECRET_FIX}"
    for name, value in recipe.build_args.items():  # written into the compose files' `build.args`
        if value and secret_env(name, value):
            yield (recipe.build_arg_origins.get(name) or recipe.origins["build_args"], f"build_args.{name}",
                   f"looks like a secret: {SECRET_FIX} (a build secret belongs in a BuildKit secret mount)")
    for group in recipe.flag_groups:  # a token-looking word anywhere, or the value of --api-key and the like
        named = group.flag is not None and secret_name(group.flag.lstrip("-")) and group.values
        if named or any(SECRET_VALUE.search(arg.word) for arg in group.args):
            yield group.args[0].origin, "args", f"{group.flag or 'a word'} looks like a secret: {SECRET_FIX}"
    # `ray start --redis-password x`: the value of a secret-named flag, or a token-looking word
    for i, arg in enumerate(recipe.ray_args):
        flag, eq, inline = arg.word.partition("=")
        has_value = bool(inline) if eq else (i + 1 < len(recipe.ray_args)
                                               and not recipe.ray_args[i + 1].word.startswith("-"))
        secret_flag = flag.startswith("-") and secret_name(flag.lstrip("-")) and has_value
        if secret_flag or SECRET_VALUE.search(arg.word):
            yield arg.origin, "ray_args", f"{flag if secret_flag else 'a word'} looks like a secret: {SECRET_FIX}"
    for i, step in enumerate(recipe.setup):  # the launcher script is in the compose file, word for word
        if SECRET_VALUE.search(step.word):
            yield step.origin, f"setup[{i}]", f"looks like a secret: {SECRET_FIX}"
    for key in ("entrypoint", "model", "docker_image", "name", "dockerfile", "docker_image_dir"):
        words = getattr(recipe, key)
        if words and any(SECRET_VALUE.search(word) for word in ([words] if isinstance(words, str) else words)):
            yield recipe.origins[key], key, f"looks like a secret: {SECRET_FIX}"
    for key, setting in recipe.container.items():
        if isinstance(setting, str) and SECRET_VALUE.search(setting):
            yield recipe.origins[key], key, f"looks like a secret: {SECRET_FIX}"
    for mount in recipe.mounts:
        if SECRET_VALUE.search(mount.host) or SECRET_VALUE.search(mount.container):
            yield mount.origin, "extra_mounts", f"looks like a secret: {SECRET_FIX}"
    for mod in recipe.mods:  # a mod's files travel inside every compose file
        for file in mod.files:
            found = SECRET_VALUE.search(file.text)
            if found:
                line = file.text.count("\n", 0, found.start()) + 1
                yield (mod.origin, "mods", f"mod '{mod.source}': {file.path} line {line} looks like a secret: "
                                           f"{SECRET_FIX}")


@rule("shell-literal", WARNING, "a word sh would have expanded or cut ($, backticks, ; | & < > ( ), a leading # or ~, "
                                "a glob): recipegen runs no shell, the engine gets it as written")
def _shell_literal(recipe: Recipe, cluster: Cluster | None) -> Findings:
    for arg in recipe.args:
        if arg.shell:
            shown = arg.word if len(arg.word) <= 60 else arg.word[:57] + "..."
            yield (arg.origin, "args", f"{shown!r} reaches the engine literally (recipegen runs no shell), but sh "
                                       f"would have {'; '.join(arg.shell)}: quote it in single quotes to keep it "
                                       "as written, or write the value it stands for")


@rule("unknown-flag", WARNING, "a flag the engine release the image runs does not accept (did-you-mean)")
def _unknown_flag(recipe: Recipe, cluster: Cluster | None) -> Findings:
    from generator.engines import engineflags

    release, checked = lint_flags.engine_flag_groups(recipe)
    if release is None:
        return
    for group, found in checked:
        if found.spec is not None and not found.abbreviation:
            continue
        name = group.args[0].word.split("=", 1)[0]
        if not release.exact and engineflags.known_in_some_release(recipe.engine, name):
            continue  # the image's release is a guess and some release has the flag: not sure enough to warn
        assumed = "" if release.exact else f" ({release.why})"
        yield (group.args[0].origin, "args", f"'{name}' is not a {release} flag; {found.problem}{assumed}")


@rule("flag-value", ERROR, "a flag value the engine cannot parse (a number, a choice, a switch given a value)")
def _flag_value(recipe: Recipe, cluster: Cluster | None) -> Findings:
    from generator.engines import engineflags

    release, checked = lint_flags.engine_flag_groups(recipe)
    if release is None:
        return
    for group, found in checked:
        if found.spec is None or (not release.exact and not engineflags.same_type_everywhere(release, found.spec)):
            continue
        problem = engineflags.value_problem(found.spec, group.values, sure_of_choices=release.exact)
        if problem:
            yield group.args[0].origin, "args", f"'{group.flag}' {problem} ({release})"


def lint_cluster(doc: TomlDocument) -> list[Diagnostic]:
    """Rules over a cluster file alone: secrets, pass_env clashes, owned env and Ray flags, its ports."""
    found = []

    def walk(value: Any, path: KeyPath) -> None:
        if path and path[-1] == "pass_env":
            return  # names of variables passed through, not values
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, path + (k,))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, path + (i,))
        elif isinstance(value, str) and value:
            named = len(path) >= 2 and path[-2] == "env" and secret_name(str(path[-1]))
            if SECRET_VALUE.search(value) or named:
                found.append(doc.diagnostic(path, f"looks like a secret: {SECRET_FIX}", rule="secret"))

    walk(doc.data, ())
    envs = [(("env",), doc.data.get("env", {}))] + [(("nodes", i, "env"), n.get("env", {}))
                                                    for i, n in enumerate(doc.data.get("nodes", []))]
    valued = {name: path + (name,) for path, env in envs for name in env}
    for i, name in enumerate(doc.data.get("pass_env", [])):  # as the recipe's pass-env rule, for the cluster
        if name in OWNED_ENV:
            found.append(doc.diagnostic(("pass_env", i), f"'{name}' is set per rank by the compiler from the nodes' "
                                                         "addresses: it cannot be passed from the deploying shell",
                                        rule="pass-env"))
        elif name in valued:
            found.append(doc.diagnostic(("pass_env", i), f"'{name}' is passed from the deploying shell but also has "
                                                         f"a value at {format_key(valued[name])} (line "
                                                         f"{doc.key_position(valued[name]).line}): keep one",
                                        rule="pass-env"))
    for path, env in envs:
        for name in OWNED_ENV:
            if name in env:
                found.append(doc.diagnostic(path + (name,), f"'{name}' is set per rank by the compiler from the "
                                                            "nodes' addresses; this value is not used",
                                            at_value=False, rule="owned-env", severity=WARNING))
    found += _cluster_ray_flags(doc)
    found += lint_ports.cluster_port_findings(doc)
    return found


def _cluster_ray_flags(doc: TomlDocument) -> list[Diagnostic]:
    """The cluster's `ray_args` go to every Ray node too: the compiler's own `ray start` flags are errors there,
    as in a recipe (a `--block` there would stop the head before the engine, a `--port` split head and workers)."""
    from generator.diagnostics import RecipegenError
    from generator.resolve.argwords import split_words

    try:
        words = split_words(doc, doc.data.get("ray_args", []), "cluster", key="ray_args")
    except RecipegenError:
        return []  # loading the cluster reports the quoting
    return [Diagnostic(doc.shown, group.args[0].origin.line, group.args[0].origin.col, "ray_args",
                       f"'{group.flag}' is set by the compiler: {OWNED_RAY_FLAGS[group.flag]}", ERROR, "owned-flag")
            for group in group_flags(words) if group.flag in OWNED_RAY_FLAGS] + lint_ray.cluster_findings(doc, words)


@rule("engine-release", WARNING, "the image's engine release lacks a flag the compiler writes (rank wiring)")
def _engine_release(recipe: Recipe, cluster: Cluster | None) -> Findings:
    """The compiler's own words must be ones the engine accepts: vLLM's multi-node `mp` wiring (--nnodes,
    --node-rank, --master-addr, --master-port) exists only in newer releases."""
    from generator.engines import engineflags

    if recipe.engine != "vllm" or recipe.distributed_backend != "mp" or recipe.required_nodes < 2:
        return
    release = engineflags.release_for_image(recipe.engine, recipe.docker_image)
    if release is None or not release.exact:
        return
    wiring = ("--nnodes", "--node-rank", "--master-addr", "--master-port")
    missing = [flag for flag in wiring if engineflags.lookup(release, flag).spec is None]
    if missing:
        having = engineflags.releases_with(recipe.engine, missing[0])
        since = f" (it is in {having[0]} and later)" if having else ""
        yield (recipe.origins.get("docker_image", recipe.document.origin("recipe", ())), "docker_image",
               f"{release} has no {', '.join(missing)}{since}: the multi-node wiring recipegen writes for "
               "distributed_backend = 'mp' would be refused at boot; use a newer image, or distributed_backend = "
               "'ray'")
