"""Lint rules over `ray_args`, checked against Ray's own option list (generator/engines/rayoptions.py) the way
`args` are checked against the engine's flags. The rules register themselves (generator/check/registry.py);
check/rules.py imports this module and runs cluster_findings on cluster files.

`ray start` is a click command: an option takes one value or none, a value-taking option swallows the next word
whatever it is, and a word that is no option's value is refused ("Got unexpected extra argument").
"""

from __future__ import annotations

import json
from generator.check.registry import ERROR, WARNING, Findings, rule
from generator.diagnostics import Diagnostic
from generator.engines import rayoptions
from generator.engines.ranks import OWNED_RAY_FLAGS
from generator.engines.rayoptions import RayWord
from generator.read.tomldoc import TomlDocument
from generator.resolve.model import Arg, Cluster, Origin, Recipe

_BOOLS = {"true", "false", "1", "0", "yes", "no", "y", "n", "on", "off", "t", "f"}  # click's BOOL, any case


def starts_ray(recipe: Recipe) -> bool:
    """Whether the compiler writes `ray start` for this recipe (vLLM on the Ray backend over several nodes; on one
    node vLLM starts its own Ray, without these options)."""
    return recipe.engine == "vllm" and recipe.distributed_backend == "ray" and recipe.required_nodes > 1


def _unknown(args: tuple[Arg, ...]) -> Findings:
    for word in rayoptions.read(args):
        if word.name is not None and word.option is None and word.name not in OWNED_RAY_FLAGS:
            yield (word.args[0].origin, "ray_args", f"'{word.name}' is not a `ray start` option of Ray "
                                                    f"{rayoptions.release()}; {rayoptions.did_you_mean(word.name)}")


def _value_problem(value: str, kind: str | None, choices: tuple[str, ...]) -> str | None:
    if kind == "int":
        try:
            int(value)
        except ValueError:
            return f"takes an integer, not {value!r}"
    elif kind == "float":
        try:
            float(value)
        except ValueError:
            return f"takes a number, not {value!r}"
    elif kind == "bool" and value.strip().lower() not in _BOOLS:
        return f"takes true or false, not {value!r}"
    elif kind == "choice" and value.lower() not in choices:
        return f"takes one of {', '.join(choices)}, not {value!r}"
    elif kind == "json":
        try:
            json.loads(value)
        except ValueError as exc:
            return f"takes JSON, and {value[:40]!r} does not parse: {exc.args[0].split(':')[0]}"
    return None


def _split_json(read: list[RayWord], i: int) -> int:
    """How many stray words follow read[i], a JSON-valued option whose value does not parse: the rest of a JSON
    value that unquoted blanks split (ray_args are shell words), reported with it rather than one by one."""
    n = 0
    while i + 1 + n < len(read) and read[i + 1 + n].name is None:
        n += 1
    return n


def _values(args: tuple[Arg, ...]) -> Findings:
    read = rayoptions.read(args)
    for i, word in enumerate(read):
        spec, first = word.option, word.args[0]
        if spec is None or word.name in OWNED_RAY_FLAGS:
            continue
        if spec.value is None and word.inline:
            yield (first.origin, "ray_args", f"'{word.name}' is a switch and takes no value (`ray start` refuses "
                                             f"'{first.word}'): write '{word.name}' alone")
        elif word.missing_value:
            after = (f"the next word is the option '{read[i + 1].args[0].word}'" if i + 1 < len(read)
                     else "nothing follows it")
            yield (first.origin, "ray_args", f"'{word.name}' takes a value, but {after} (`ray start` would take that "
                                             "as the value or refuse the command): give it its value")
        elif spec.value is not None and word.value is not None:
            problem = _value_problem(word.value, spec.value, spec.choices)
            split = _split_json(read, i) if problem and spec.value == "json" else 0
            if problem and spec.value == "json" and (split or '"' not in word.value):
                # JSON written without shell quotes loses its double quotes and splits at its blanks
                became = f"{split + 1} words" if split else "1 word without its double quotes"
                problem = (f"takes JSON, and ray_args are split as a shell does: this JSON became {became}; wrap "
                           "it in single quotes inside the string, e.g. \"'{\\\"GPU\\\": 1}'\"")
            if problem:
                yield first.origin, "ray_args", f"'{word.name}' {problem}"


def _stray(args: tuple[Arg, ...]) -> Findings:
    read = rayoptions.read(args)
    continued = set()  # the rest of a split JSON value: ray-value reports it
    for i, word in enumerate(read):
        if word.option is not None and word.option.value == "json" and word.value is not None:
            if _value_problem(word.value, "json", ()) is not None:
                continued |= set(range(i + 1, i + 1 + _split_json(read, i)))
    for i, word in enumerate(read):
        if word.name is None and i not in continued:
            yield (word.args[0].origin, "ray_args", f"'{word.args[0].word[:60]}' is no option's value: `ray start` "
                                                    "takes no positional word and refuses it (\"Got unexpected extra "
                                                    "argument\"); a value with spaces is one quoted word")


@rule("ray-option", WARNING, "a `ray_args` option the Ray release of the option data lacks (did-you-mean)")
def unknown_option(recipe: Recipe, cluster: Cluster | None) -> Findings:
    if starts_ray(recipe):
        yield from _unknown(recipe.ray_args)


@rule("ray-value", ERROR, "a `ray_args` option without its value, a switch given one, a value Ray cannot parse "
                         "(a number, true/false, a choice, JSON split into words)")
def option_value(recipe: Recipe, cluster: Cluster | None) -> Findings:
    if starts_ray(recipe):
        yield from _values(recipe.ray_args)


@rule("ray-word", ERROR, "a word in `ray_args` that is no option's value: `ray start` takes no positional word")
def stray_word(recipe: Recipe, cluster: Cluster | None) -> Findings:
    if starts_ray(recipe):
        yield from _stray(recipe.ray_args)


@rule("ray-unused", WARNING, "`ray_args` on a recipe that starts no Ray: ignored")
def unused(recipe: Recipe, cluster: Cluster | None) -> Findings:
    if starts_ray(recipe):
        return
    why = ("SGLang does not use Ray" if recipe.engine == "sglang" else
           "distributed_backend is not 'ray'" if recipe.distributed_backend != "ray" else
           "on one node vLLM starts its own Ray, without `ray start`")
    if recipe.ray_args:
        yield recipe.ray_args[0].origin, "ray_args", f"ignored: this recipe starts no Ray ({why})"
    if cluster is not None and cluster.ray_args and recipe.ray_args == () and recipe.distributed_backend == "ray":
        # the cluster's defaults are for every recipe: said only where the recipe asked for Ray and gets none
        yield (cluster.ray_args[0].origin, "ray_args", f"the cluster's ray_args are ignored for {recipe.id}: it "
                                                        f"starts no Ray ({why})")


def cluster_findings(doc: TomlDocument, args: tuple[Arg, ...]) -> list[Diagnostic]:
    """The same checks on a cluster file's own `ray_args` (they reach every Ray node of every recipe)."""
    found = []
    for rule_id, severity, check in (("ray-option", WARNING, _unknown), ("ray-value", ERROR, _values),
                                     ("ray-word", ERROR, _stray)):
        for origin, key, message in check(args):
            found.append(Diagnostic(doc.shown, origin.line, origin.col or 1 if origin.line else None, key, message,
                                    severity, rule_id))
    return found
