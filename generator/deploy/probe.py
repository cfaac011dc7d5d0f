"""One real request: a streamed chat completion to the name the engine serves, timed. The end of `up` (a head that
answers /health and lists its model can still fail its first request: a wrong chat template or reasoning parser,
the first KV-cache allocation out of unified memory, a tokenizer mismatch) and the whole of `recipegen smoke`.

The first call may compile CUDA graphs for minutes, so its limit is its own (`--probe-timeout`), not `up`'s.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

# The head is asked as the readiness wait asks it: directly (no http_proxy), its certificate not verified.
from generator.deploy.readiness import DIRECT, DeployFailed

if TYPE_CHECKING:
    from generator.deploy.targets import CompiledDeployment

PROMPT_ANSWER = "The quick brown fox jumps over the lazy dog while the old cat sleeps in the warm afternoon sun"
PROMPT = f"Reply with exactly: {PROMPT_ANSWER}"
MAX_TOKENS = 48  # room for the answer (about 20 tokens in common tokenizers) and a reasoning model's preamble
PROBE_TIMEOUT = 600.0  # seconds, default of --probe-timeout: a first call that compiles CUDA graphs takes minutes
ERROR_BODY = 600  # characters of an engine's error body shown


@dataclass(frozen=True)
class ProbeResult:
    url: str  # the endpoint asked
    model: str  # the model name sent
    ttft_ms: float | None = None  # time to the first token of the answer
    tokens: int = 0  # generated tokens: the stream's usage, else its content chunks
    counted: str = "usage"  # "usage" or "chunks": where `tokens` comes from
    decode_tps: float | None = None  # tokens after the first / the time they took
    text: str = ""  # the answer
    error: str | None = None  # why the request failed (the engine's error body when it sent one)

    @property
    def ok(self) -> bool:
        return self.error is None


def probe(base_url: str, model: str, timeout: float = PROBE_TIMEOUT, api_key: str | None = None) -> ProbeResult:
    """POST one streamed chat completion to base_url/v1/chat/completions and time its answer (with the bearer
    `api_key` when given: a router that asks for one)."""
    url = f"{base_url}/v1/chat/completions"
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": MAX_TOKENS,
                       "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}).encode()
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, body, headers)
    result = ProbeResult(url, model)
    start = time.monotonic()
    try:
        with DIRECT.open(request, timeout=timeout) as response:
            return _read_stream(result, response, start, start + timeout)
    except urllib.error.HTTPError as err:
        return _failed(result, f"HTTP {err.code}: {_error_text(err.read())}")
    except TimeoutError:
        return _failed(result, f"no answer within {timeout:.0f}s (--probe-timeout)")
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        if isinstance(reason, TimeoutError):
            return _failed(result, f"no answer within {timeout:.0f}s (--probe-timeout)")
        return _failed(result, f"cannot reach {url}: {reason}")


def _read_stream(result: ProbeResult, response: object, start: float, deadline: float) -> ProbeResult:
    first: float | None = None
    last = start
    chunks = 0
    usage: int | None = None
    parts: list[str] = []
    for raw in response:  # type: ignore[attr-defined]  # a file of lines, as http.client gives it
        line = raw.decode("utf-8", "replace").strip()
        if time.monotonic() > deadline:
            return _failed(result, f"the answer did not finish within {deadline - start:.0f}s (--probe-timeout)")
        if not line.startswith("data:") or line[5:].strip() == "[DONE]":
            continue
        try:
            event = json.loads(line[5:])
        except ValueError:
            continue
        if "error" in event:  # vLLM reports a failure met mid-stream as an event
            return _failed(result, f"error in the stream: {_error_text(json.dumps(event).encode())}")
        if isinstance(event.get("usage"), dict) and isinstance(event["usage"].get("completion_tokens"), int):
            usage = event["usage"]["completion_tokens"]
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or ""
            if text:
                now = time.monotonic()
                first = now if first is None else first
                last = now
                chunks += 1
                parts.append(str(text))
    text = "".join(parts).strip()
    if first is None or not text:
        return _failed(result, "the engine answered with no text (an empty stream)")
    tokens, counted = (usage, "usage") if usage else (chunks, "chunks")
    rate = (tokens - 1) / (last - first) if tokens > 1 and last > first else None
    return ProbeResult(result.url, result.model, ttft_ms=(first - start) * 1000, tokens=tokens, counted=counted,
                       decode_tps=rate, text=text)


def _failed(result: ProbeResult, error: str) -> ProbeResult:
    return ProbeResult(result.url, result.model, error=error)


def _error_text(body: bytes) -> str:
    """The engine's own message when its body is OpenAI's error shape, else the body (cut)."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
        error = data.get("error", data)
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            text = str(message)
        elif isinstance(data.get("detail"), str):
            text = data["detail"]
    except (ValueError, AttributeError):
        pass
    return (text[:ERROR_BODY] + "...") if len(text) > ERROR_BODY else (text or "(empty body)")


def first_request(dep: CompiledDeployment, timeout: float, on_change: Callable[[str, str], None]) -> ProbeResult:
    """`up`'s last step, once the head serves: the probe, raising DeployFailed (a failed `up`, as a dying rank
    is) when the answer is an error, empty or late."""
    on_change(dep.head.name, f"first request to {dep.plan.served_model_name}")
    result = probe(dep.url, dep.plan.served_model_name, timeout)
    if not result.ok:
        raise DeployFailed(f"the first request to {dep.plan.served_model_name} at {result.url} failed: "
                           f"{result.error}")
    on_change(dep.head.name, "answered its first request")
    return result


def served_models(base_url: str) -> set[str] | None:
    """The model names /v1/models lists, or None when the head does not answer (bench's check before it runs)."""
    try:
        with DIRECT.open(f"{base_url}/v1/models", timeout=5) as response:
            data = json.loads(response.read())
        return {str(m.get("id")) for m in data.get("data", [])}
    except (urllib.error.URLError, OSError, ValueError, AttributeError, TypeError):
        return None
