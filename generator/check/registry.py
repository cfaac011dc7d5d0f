"""The lint rule registry: what a rule is and the list every rule module adds itself to.

Rules live in modules of generator/check/ grouped by what they protect (flags.py: flags against the engine's
data; secrets.py; paths.py: build contexts and paths; ports.py: ports on the host network; mounts.py: mounts and
the model's path ...); each module registers its rules with `@rule` on import, and rules.py imports them all, so
`validate` and `build` run the same list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from generator.diagnostics import Severity
from generator.resolve.model import Cluster, FlagGroup, Origin, Recipe

ERROR, WARNING = Severity.ERROR, Severity.WARNING

Findings = Iterator[tuple[Origin, str | None, str]]  # (where, key, message) of each problem a rule finds


# (node name, bytes) of each node's Swarm launcher, rendered as `build` renders it. Rendering comes after checking
# in the flow, so the entry points hand this in (generator/render/sizes.py) and check/ imports no later stage.
LauncherSizes = Callable[[Recipe, Cluster], list[tuple[str, int]]]


@dataclass(frozen=True)
class Rule:
    id: str
    severity: Severity
    summary: str
    check: Callable[[Recipe, Cluster | None, LauncherSizes], Findings]  # rule() adapts checks that render nothing
    needs_cluster: bool = False  # without a cluster it is skipped or checks defaults: `validate` says so


RULES: list[Rule] = []
# Rules one computation judges together: each runs once per recipe and names the member rule of each finding.
FAMILIES: list[Callable[[Recipe, "Cluster | None"], "FamilyFindings"]] = []
FamilyFindings = Iterator[tuple[str, Origin, str | None, str]]  # (rule id, where, key, message)


Check = Callable[[Recipe, "Cluster | None"], Findings]
RenderingCheck = Callable[[Recipe, "Cluster | None", LauncherSizes], Findings]


def rule(rule_id: str, severity: Severity, summary: str, needs_cluster: bool = False) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        RULES.append(Rule(rule_id, severity, summary, lambda recipe, cluster, _sizes: fn(recipe, cluster),
                          needs_cluster))
        return fn
    return register


def rendering_rule(rule_id: str, severity: Severity, summary: str,
                   needs_cluster: bool = False) -> Callable[[RenderingCheck], RenderingCheck]:
    """A rule over rendered text (the launchers): its check is handed the renderer as its third argument."""
    def register(fn: RenderingCheck) -> RenderingCheck:
        RULES.append(Rule(rule_id, severity, summary, fn, needs_cluster))
        return fn
    return register


def rule_family(members: tuple[tuple[str, Severity, str, bool], ...]) -> Callable[
        [Callable[[Recipe, "Cluster | None"], FamilyFindings]], Callable[[Recipe, "Cluster | None"], FamilyFindings]]:
    """Rules that share one computation (fit: the model's memory per rank), run once per recipe: each member is
    listed in RULES as a rule of its own (id, severity, summary, needs_cluster), the check runs once and names
    each finding's rule."""
    def register(fn: Callable[[Recipe, Cluster | None], FamilyFindings]) -> Callable[
            [Recipe, Cluster | None], FamilyFindings]:
        for rule_id, severity, summary, needs_cluster in members:
            RULES.append(Rule(rule_id, severity, summary, lambda _recipe, _cluster, _sizes: iter(()), needs_cluster))
        FAMILIES.append(fn)
        return fn
    return register


def flags(recipe: Recipe) -> list[FlagGroup]:
    """The recipe's `args` grouped by flag, without the words before the first flag."""
    return [g for g in recipe.flag_groups if g.flag]
