"""Lint rules over the recipe's `args` as written: words the compiler writes itself, a flag given twice, a word
meant for a shell that runs none (a `$x`, or a line continuation that glues the next element on), and removals
(remove_args / remove_env) that remove nothing."""

from __future__ import annotations

from generator.check.registry import ERROR, WARNING, Findings, flags, rule
from generator.engines.ranks import OWNED_FLAGS, OWNED_RAY_FLAGS
from generator.resolve.argwords import group_flags
from generator.resolve.model import Cluster, FlagGroup, Recipe


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


@rule("shell-literal", WARNING, "a word sh would have expanded or cut ($, backticks, ; | & < > ( ), a leading # or ~, "
                                "a glob): recipegen runs no shell, the engine gets it as written; or an element "
                                "ending in a backslash, which glues the next element on as sh does")
def _shell_literal(recipe: Recipe, cluster: Cluster | None) -> Findings:
    for arg in recipe.args:
        shown = arg.word if len(arg.word) <= 60 else arg.word[:57] + "..."
        if arg.glued is not None:  # a shell's line continuation inside an element: sh glues the next one on
            yield (arg.origin, "args", f"{arg.glued!r} ends in a backslash, which escapes the space after it: the "
                                       f"next element becomes part of the one word {shown!r}; remove the backslash")
        if arg.shell:
            yield (arg.origin, "args", f"{shown!r} reaches the engine literally (recipegen runs no shell), but sh "
                                       f"would have {'; '.join(arg.shell)}: quote it in single quotes to keep it "
                                       "as written, or write the value it stands for")

