"""Lint rules over memory per rank (issue 32): will the model fit the GPUs it is given, before anyone waits 15
minutes for a boot that runs out of memory. The figures come from fitreport.py (the model's config.json and
checkpoint sizes, read from this machine); the judgements are vLLM's own at boot:

- `fit` (error): a rank's weights alone exceed its share of the GPU (gpu_memory x --gpu-memory-utilization);
- `fit-context` (warning): one request of the full --max-model-len does not fit what is left for the KV cache
  (vLLM refuses to start: check_enough_kv_cache_memory), with the largest --max-model-len that would;
- `fit-capacity` (note): the KV pool's size in tokens and the requests of full length it holds at once;
- `fit-unknown` (note): the model's config.json is not on this machine (the Hugging Face cache exists but lacks
  it), so memory is not judged. Without any local cache the rules say nothing; `recipegen fit` says why.
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.check.fitreport import FitReport, fit_report
from generator.check.registry import ERROR, WARNING, FamilyFindings, rule_family
from generator.diagnostics import Severity
from generator.engines.memory import GIB, RankMemory
from generator.resolve.model import Cluster, Origin, Recipe
from generator.resolve.modelfiles import NotFound

NOTE = Severity.NOTE


def gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def _budget(r: FitReport, memory: RankMemory) -> str:
    return (f"{gib(memory.budget)} (gpu_memory {gib(r.settings.gpu_memory)} x {r.flag('utilization')} "
            f"{r.settings.utilization:g})")


def _over(r: FitReport) -> list[RankMemory]:
    return [m for m in r.ranks if m.weights > m.budget]


@dataclass(frozen=True)
class Judgement:
    rule: str
    severity: Severity
    origin: Origin
    key: str
    message: str


def judge(r: FitReport) -> list[Judgement]:
    """Every judgement on one report: the rules below yield them, `recipegen fit` prints them."""
    over = _over(r)
    if over:
        world = r.settings.tp * r.settings.pp
        return [Judgement("fit", ERROR, r.origin, "model",
                          f"{r.rank_nodes(m)} holds {gib(m.weights)} of weights ({r.weights_from}), more than its "
                          f"budget {_budget(r, m)}: it cannot load. Spread it over more GPUs (tensor x pipeline "
                          f"parallel = {world} now) or use a smaller quantisation") for m in over]
    worst = min(r.ranks, key=lambda m: m.usable_pool() - m.request_bytes(max(r.length, 1)))
    left = (f"{gib(max(worst.pool, 0))} is left of its budget {_budget(r, worst)} after {gib(worst.weights)} of "
            f"weights and ~{gib(worst.overhead)} of overhead (estimated)")
    if r.length <= 0 or worst.request_bytes(r.length) > worst.usable_pool():
        longest = min(m.longest(r.length if r.length > 0 else 1 << 30) for m in r.ranks)
        fix = (f"the largest {r.flag('length')} that fits is {longest}" if longest
               else "no context length fits: raise the memory share or spread the model over more GPUs")
        what = "vLLM's auto-fit finds no context length that fits" if r.auto else (
            f"one request of {r.length_said} needs {gib(worst.request_bytes(r.length))} of KV cache on "
            f"{r.rank_nodes(worst)}, but {left}: the engine refuses to start (vLLM's check_enough_kv_cache_memory)")
        where = r.length_origin if r.length_origin is not None else r.origin
        return [Judgement("fit-context", WARNING, where, "args" if r.length_origin is not None else "model",
                          f"{what}; {fix}")]
    tokens, concurrency = min((m.capacity(r.length) for m in r.ranks), key=lambda c: c[0])
    smallest = min(r.ranks, key=lambda m: m.pool)
    extra = f"; not counted: {', '.join(r.uncounted)}" if r.uncounted else ""
    return [Judgement("fit-capacity", NOTE, r.origin, "model",
                      f"KV cache {gib(smallest.pool)} per rank after {gib(smallest.weights)} of weights "
                      f"({r.weights_from}) and ~{gib(smallest.overhead)} of overhead: about {tokens:,} tokens, "
                      f"{concurrency:.1f} requests of {r.length:,} tokens at once "
                      f"({'auto-fit to' if r.auto else 'at'} {r.length:,}; {r.flag('seqs')} "
                      f"{r.settings.max_num_seqs}){extra}")]


@rule_family((
    ("fit", ERROR, "a rank's weights alone exceed its share of the GPU's memory", True),
    ("fit-context", WARNING, "one request of the full --max-model-len does not fit the KV cache left on a rank", True),
    ("fit-capacity", NOTE, "the KV cache's size in tokens and the full-length requests it holds at once", True),
    ("fit-unknown", NOTE, "the model's config.json is not on this machine: memory per rank is not judged", False),
))
def _fit(recipe: Recipe, cluster: Cluster | None) -> FamilyFindings:
    """The model's files are read and the memory computed once per recipe; `fit-unknown` is the same
    computation's answer when the files are not here."""
    r = fit_report(recipe, cluster)
    if not isinstance(r, NotFound):
        yield from ((j.rule, j.origin, j.key, j.message) for j in judge(r))
    elif r.cache_exists:
        origin = recipe.origins.get("model") or recipe.document.origin("recipe", ())
        hint = (f"; `recipegen fit {recipe.id} --config FILE` judges it with a config.json (or a model folder) you "
                "give") if r.files else ""
        yield ("fit-unknown", origin, "model", f"memory per rank not judged: {r.reason}{hint}")

