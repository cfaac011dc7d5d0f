"""What llama-benchy is doing, test by test, from its progress events (`--emit-progress`, one JSON object a line:
request_start, request_first_token, request_end ...): the figures of each test as its requests finish, for the
live table. Warm-up requests emit nothing, so only measured requests count."""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

Key = tuple[int, int, int, int]  # pp, tg, depth, concurrency


@dataclass
class TestProgress:
    started: int = 0
    done: int = 0
    errors: int = 0
    ttft_s: list[float] = field(default_factory=list)
    decode_tps: list[float] = field(default_factory=list)  # per request: tokens after the first / decode time

    @property
    def ttft_ms(self) -> float | None:
        return fmean(self.ttft_s) * 1000 if self.ttft_s else None

    @property
    def tps(self) -> float | None:
        return fmean(self.decode_tps) if self.decode_tps else None


@dataclass
class LiveTests:
    tests: dict[Key, TestProgress] = field(default_factory=dict)  # in the order they started
    requests: dict[int, Key] = field(default_factory=dict)

    def event(self, e: dict[str, Any]) -> Key | None:
        """Take one event; the test whose figures it changed (None when it changed none: a streamed chunk's
        `tokens` event, one per token, would otherwise redraw the table thousands of times a run)."""
        kind = e.get("type")
        try:
            if kind == "request_start":
                key = (int(e["prompt_size"]), int(e["response_size"]), int(e["context_size"]), int(e["concurrency"]))
                self.requests[int(e["request_id"])] = key
                self.tests.setdefault(key, TestProgress()).started += 1
                return key
            key_of = self.requests.get(int(e.get("request_id", -1)))
            if key_of is None:
                return None
            test = self.tests[key_of]
            if kind == "request_first_token":
                test.ttft_s.append(float(e["ttft_s"]))
            elif kind == "request_end":
                test.done += 1
                tokens, seconds = int(e.get("total_tokens") or 0), float(e.get("decode_seconds") or 0)
                if e.get("error"):
                    test.errors += 1
                elif tokens > 1 and seconds > 0:
                    test.decode_tps.append((tokens - 1) / seconds)
            else:
                return None
            return key_of
        except (KeyError, TypeError, ValueError):
            return None  # an event of another schema version: the live table is a courtesy
