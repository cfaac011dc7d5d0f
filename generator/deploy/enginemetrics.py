"""An engine head's /metrics read directly (no Prometheus): the figures `recipegen top` shows, for vLLM's and
SGLang's names (the same pairs the metrics stack's rules read, render/metrics_rules.py).

A Sample is one read of the text; a Row compares two reads of one head for its rates. Parsing is Prometheus's text
format as the engines write it (prometheus_client): `name{label="value",...} number`, one sample a line.
"""

from __future__ import annotations

import math
import re
import time
import urllib.error
from dataclasses import dataclass

from generator.deploy.readiness import DIRECT
from generator.plan.metrics import EngineTarget
from generator.render.metrics_rules import GENERATION, KV_USAGE, PROMPT, RUNNING, TTFT, WAITING

_LINE = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
STALL_AFTER = 30.0  # seconds of no token while requests run before top says "stalled"


def parse(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample by metric name: (labels, value). Comments and lines that are not samples are skipped."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            continue
        try:
            value = float(match[3])
        except ValueError:
            continue
        labels = dict(_LABEL.findall(match[2] or ""))
        found.setdefault(match[1], []).append((labels, value))
    return found


def quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus's histogram_quantile over cumulative (upper bound, count) buckets: linear within a bucket."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower  # in the +Inf bucket: the highest finite bound, as Prometheus answers
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 0.0)
        lower, below = bound, count
    return lower


@dataclass(frozen=True)
class Sample:
    """One read of a head's /metrics, summed over its label sets (one engine; DP ranks add up)."""

    at: float  # time.monotonic()
    models: frozenset[str]  # the model_name labels: which served name this head's engine has
    generation: float
    prompt: float
    running: float
    waiting: float
    kv: float | None  # fraction in use
    ttft: tuple[tuple[float, float], ...]  # cumulative (le, count)


def _total(samples: dict[str, list[tuple[dict[str, str], float]]], names: tuple[str, ...]) -> float | None:
    for name in names:
        if name in samples:
            return sum(v for _, v in samples[name])
    return None


def sample(text: str, at: float) -> Sample:
    samples = parse(text)
    ttft: dict[float, float] = {}
    for name in TTFT:
        for labels, value in samples.get(name, []):
            le = float(labels.get("le", "nan"))
            if not math.isnan(le):
                ttft[le] = ttft.get(le, 0.0) + value
    kv = [v for name in KV_USAGE for _, v in samples.get(name, [])]
    models = frozenset(labels["model_name"] for rows in samples.values() for labels, _ in rows
                       if "model_name" in labels)
    return Sample(at, models, _total(samples, GENERATION) or 0.0, _total(samples, PROMPT) or 0.0,
                  _total(samples, RUNNING) or 0.0, _total(samples, WAITING) or 0.0, max(kv) if kv else None,
                  tuple(sorted(ttft.items())))


def scrape(url: str, timeout: float = 3.0) -> str:
    with DIRECT.open(f"{url}/metrics", timeout=timeout) as response:
        return str(response.read().decode("utf-8", "replace"))


@dataclass
class Watch:
    """One recipe's head as top follows it: its last read, the one before, since when no token came."""

    target: EngineTarget
    url: str
    last: Sample | None = None
    previous: Sample | None = None
    error: str | None = None
    flat_since: float | None = None
    restarts: str = "-"
    context: str = ""  # the head node's Docker context (its container's restarts)

    def read(self) -> None:
        now = time.monotonic()
        try:
            text = scrape(self.url)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self.error, self.previous, self.last, self.flat_since = _why(exc), None, None, None
            return
        self.error = None
        self.previous, self.last = self.last, sample(text, now)
        moved = self.previous is None or (self.last.generation + self.last.prompt
                                          > self.previous.generation + self.previous.prompt)
        if moved or self.last.running == 0:
            self.flat_since = None
        elif self.flat_since is None:
            self.flat_since = self.previous.at if self.previous else now


def _why(exc: BaseException) -> str:
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, ConnectionRefusedError):
        return "down"
    if isinstance(reason, TimeoutError) or "timed out" in str(reason):
        return "no answer"
    return "unreachable"


@dataclass(frozen=True)
class Row:
    recipe: str
    nodes: str
    state: str  # serving, idle, stalled, down, no answer, unreachable, other (another recipe's engine there)
    tokens_per_s: float | None
    running: float | None
    waiting: float | None
    kv: float | None
    ttft_p50: float | None  # seconds, since the engine started
    restarts: str


def row(watch: Watch, now: float) -> Row:
    t = watch.target
    last, previous = watch.last, watch.previous
    if last is None:
        return Row(t.recipe_id, ",".join(t.nodes), watch.error or "-", None, None, None, None, None, watch.restarts)
    if last.models and not last.models & set(t.names):
        return Row(t.recipe_id, ",".join(t.nodes), "other", None, None, None, None, None, watch.restarts)
    rate = None
    if previous is not None and last.at > previous.at:
        rate = max(0.0, last.generation - previous.generation) / (last.at - previous.at)
    stalled = watch.flat_since is not None and now - watch.flat_since >= STALL_AFTER
    state = "stalled" if stalled else "serving" if last.running or last.waiting else "idle"
    return Row(t.recipe_id, ",".join(t.nodes), state, rate, last.running, last.waiting, last.kv,
               quantile(0.5, list(last.ttft)), watch.restarts)
