"""Lint rules over the engine's flags, judged against the flag data of the release the image runs
(generator/data/engine_flags.json): how many values each flag takes, and which flags take JSON.

engineflags (and its data) is imported on first use: only a run that lints flags pays for it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from generator.check.registry import ERROR, WARNING, Findings, flags, rule
from generator.engines.ranks import OWNED_FLAGS, port_problem
from generator.resolve.argwords import json_problem
from generator.resolve.model import Cluster, FlagGroup, Recipe

if TYPE_CHECKING:
    from generator.engines.flags import FlagSpec, Lookup, Release

# The entrypoints whose flags are the engine's server flags; any other entrypoint (a wrapper script) is not checked.
ENGINE_SERVERS = {"vllm": ("vllm serve", "vllm.entrypoints.openai.api_server"),
                  "sglang": ("sglang.launch_server", "sglang serve")}

# Flags whose value the engine reads as JSON although its parser takes a plain string, so the flag data records
# them as `str`: SGLang's --json-model-override-args (a string its model config passes to json.loads).
JSON_STRINGS = {"sglang": ("--json-model-override-args",)}


def engine_flag_groups(recipe: Recipe) -> tuple[Release | None, list[tuple[FlagGroup, Lookup]]]:
    """(release, [(group, lookup)]) for the recipe's non-owned flags, or (None, []) when there is nothing to check."""
    from generator.engines import flags as engineflags

    command = " ".join(recipe.entrypoint)
    if not any(server in command for server in ENGINE_SERVERS.get(recipe.engine, ())):
        return None, []
    release = engineflags.release_for_image(recipe.engine, recipe.docker_image)
    if release is None:
        return None, []
    owned = OWNED_FLAGS[recipe.engine]
    return release, [(g, engineflags.lookup(release, g.args[0].word)) for g in flags(recipe) if g.flag not in owned]


def takes_json(recipe: Recipe, group: FlagGroup) -> bool:
    """The flag's value is JSON to the engine: the data says so (`json`, or `json_or_str` and the value is `{...}`)
    for the image's release or, where that release does not know the flag (or the entrypoint is a wrapper), for
    the newest release that does."""
    from generator.engines import flags as engineflags

    if group.flag in JSON_STRINGS.get(recipe.engine, ()):
        return True
    exact = engineflags.release_for_image(recipe.engine, recipe.docker_image)
    versions = ([exact.version] if exact else []) + list(reversed(engineflags.releases(recipe.engine)))
    for version in versions:
        spec = engineflags.lookup(engineflags.Release(recipe.engine, version, True, ""), group.args[0].word).spec
        if spec is not None:  # vLLM's union_dict_and_str (json_or_str) reads only a {...} value as JSON
            braced = bool(group.values) and group.values[0].lstrip().startswith("{")
            return spec.type == "json" or (spec.type == "json_or_str" and braced)
    return False


def _given(group: FlagGroup) -> list[str]:
    """The values the flag's words give it: after `=`, attached to a one-letter flag (`-O3`), then the words."""
    head = group.args[0].word
    attached = not head.startswith("--") and "=" not in head and len(head) > 2
    return ([head[2:]] if attached else []) + group.values


def _arity(spec: FlagSpec) -> tuple[int, float]:
    nargs = spec.nargs
    if isinstance(nargs, int):
        return nargs, nargs
    return {None: (1, 1), "?": (0, 1), "+": (1, math.inf), "*": (0, math.inf)}.get(nargs, (0, math.inf))


def arity_problem(spec: FlagSpec, group: FlagGroup, following: FlagGroup | None) -> str | None:
    """Why argparse would refuse the number of words after the flag, or None. A switch given a value is
    flag-value's finding."""
    if spec.type == "bool":
        return None
    values = _given(group)
    least, most = _arity(spec)
    if len(values) < least:
        after = (f"the next word '{following.args[0].word}' is a flag" if following is not None
                 else "it is the last word")
        return (f"takes a value, but none follows it ({after}; an empty element \"\" gives no word, \"''\" is an "
                "empty value): the engine refuses it at start-up (\"expected one argument\")")
    if len(values) > most:
        stray = values[int(most):]
        shown = ", ".join(f"'{v}'" for v in stray[:3]) + (" ..." if len(stray) > 3 else "")
        takes = "no value" if most == 0 else ("one value" if most == 1 else f"{int(most)} values")
        return (f"takes {takes}; the word(s) after it ({shown}) are positional arguments the engine refuses "
                "(\"unrecognized arguments\"): quote a value holding blanks as one word ('a b'), or remove them")
    return None


@rule("flag-arity", ERROR, "an engine flag given no value (the next word is a flag), or a stray extra word")
def _flag_arity(recipe: Recipe, cluster: Cluster | None) -> Findings:
    from generator.engines import flags as engineflags

    release, checked = engine_flag_groups(recipe)
    if release is None:
        return
    groups = flags(recipe)
    following = {id(g): nxt for g, nxt in zip(groups, [*groups[1:], None])}
    for group, found in checked:
        if found.spec is None or (not release.exact and not engineflags.same_type_everywhere(release, found.spec)):
            continue
        if group.values and json_problem(group.values[0]) and takes_json(recipe, group):
            continue  # JSON split into words: bad-json says so, with how to quote it
        problem = arity_problem(found.spec, group, following[id(group)])
        if problem:
            yield group.args[0].origin, "args", f"'{group.flag}' {problem} ({release})"


@rule("bad-json", ERROR, "a flag that takes JSON (the engine data says which) whose value does not parse")
def _bad_json(recipe: Recipe, cluster: Cluster | None) -> Findings:
    for group in flags(recipe):
        for value in group.values[:1]:
            problem = json_problem(value)
            if problem and not takes_json(recipe, group):
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


@rule("unknown-flag", WARNING, "a flag the engine release the image runs does not accept (did-you-mean)")
def _unknown_flag(recipe: Recipe, cluster: Cluster | None) -> Findings:
    from generator.engines import flags as engineflags

    release, checked = engine_flag_groups(recipe)
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
    from generator.engines import flags as engineflags

    # `--port` whatever the entrypoint and release: the router, the healthcheck and the watch read it too.
    for port in (g for g in flags(recipe) if g.flag == "--port" and g.values):
        problem = port_problem(port.values[0])
        if problem:
            yield port.args[0].origin, "args", f"'{port.flag}' {problem}"
    release, checked = engine_flag_groups(recipe)
    if release is None:
        return
    for group, found in checked:
        if group.flag == "--port" or found.spec is None or (
                not release.exact and not engineflags.same_type_everywhere(release, found.spec)):
            continue
        problem = engineflags.value_problem(found.spec, group.values, sure_of_choices=release.exact)
        if problem:
            yield group.args[0].origin, "args", f"'{group.flag}' {problem} ({release})"


@rule("engine-release", WARNING, "the image's engine release lacks a flag the compiler writes (rank wiring)")
def _engine_release(recipe: Recipe, cluster: Cluster | None) -> Findings:
    """The compiler's own words must be ones the engine accepts: vLLM's multi-node `mp` wiring (--nnodes,
    --node-rank, --master-addr, --master-port) exists only in newer releases."""
    from generator.engines import flags as engineflags

    if recipe.engine != "vllm" or recipe.distributed_backend != "mp" or recipe.required_nodes < 2:
        return
    release = engineflags.release_for_image(recipe.engine, recipe.docker_image)
    if release is None or not release.exact:
        return
    wiring = ("--nnodes", "--node-rank", "--master-addr", "--master-port")
    missing = [flag for flag in wiring if engineflags.lookup(release, flag).spec is None]
    if missing:
        # Say which releases the data holds, not "in X and later": the releases between were never checked.
        having = engineflags.releases_with(recipe.engine, missing[0])
        lacking = [v for v in engineflags.releases(recipe.engine) if v not in having]
        since = (f" (of the {recipe.engine} releases checked, {', '.join(having)} have them, {', '.join(lacking)} "
                 "do not)") if having else ""
        yield (recipe.origins.get("docker_image", recipe.document.origin("recipe", ())), "docker_image",
               f"{release} has no {', '.join(missing)}{since}: the multi-node wiring recipegen writes for "
               "distributed_backend = 'mp' would be refused at boot; use a newer image, or distributed_backend = "
               "'ray'")
