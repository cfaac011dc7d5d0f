"""The stand-in's HTTP side: the OpenAI API as vLLM and SGLang serve it, for real, so `up`'s probe and llama-benchy
measure something true: GET /health, /v1/models; POST /v1/chat/completions and /v1/completions, streamed (SSE,
`stream_options.include_usage`) and not, each with `usage`.

Timing is set from the container's environment, so a test knows what it should measure:
- LAB_PREFILL_TPS (2000): prompt tokens per second; the first token comes after prompt_tokens / rate seconds
  (plus LAB_TTFT_BASE_MS, 20), so the time to first token grows with the prompt;
- LAB_DECODE_TPS (50): generated tokens per second, per request (an engine batches concurrent requests);
- LAB_FAIL_COMPLETIONS: when set, every completion fails with HTTP 500 and this text while /health answers
  (a wrong chat template, a KV cache that does not fit: what a real first request can hit).

Tokens are words and punctuation (`\\w+|[^\\w\\s]+`, what a word-level tokenizer with a whitespace
pre-tokenizer counts). The answer follows "Reply with exactly: TEXT" (TEXT), knows the capital of France
(llama-benchy's coherence test), else is `max_tokens` filler words. An unknown model name gets vLLM's 404.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from http.server import BaseHTTPRequestHandler
from typing import Any, Iterator

TOKEN = re.compile(r"\w+|[^\w\s]+")
FILLER = ("the quick brown fox jumps over the lazy dog and runs far away into the green hills where "
          "nobody can see it").split()


def rate(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


def _text_of(content: Any) -> str:
    """A message's content: a string, or OpenAI's list of parts."""
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def answer(prompt: str, max_tokens: int, ignore_eos: bool) -> tuple[list[str], str]:
    """The words to generate and the finish reason."""
    exact = re.search(r"Reply with exactly:\s*(.+)", prompt)
    if "capital of France" in prompt:
        words = ["Paris"]
    elif exact:
        words = exact.group(1).strip().split()
    else:
        words = []
    if ignore_eos or not words:
        words = (words + [FILLER[i % len(FILLER)] for i in range(max_tokens)])[:max_tokens]
        return words, "length"
    return words[:max_tokens], "stop" if len(words) <= max_tokens else "length"


class OpenAIHandler(BaseHTTPRequestHandler):
    """Set `served` (the model name) and `owner` on a subclass."""

    served = ""
    owner = ""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?")[0]
        if path == "/health":
            self._send(200, b"")
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [
                {"id": self.served, "object": "model", "owned_by": self.owner}]})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?")[0]
        chat = path == "/v1/chat/completions"
        if not chat and path != "/v1/completions":
            return self._json(404, {"detail": "Not Found"})
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        except ValueError as err:
            return self._error(400, f"invalid JSON body: {err}", "BadRequestError")
        if body.get("model") != self.served:
            return self._error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
        failure = os.environ.get("LAB_FAIL_COMPLETIONS")
        if failure:
            return self._error(500, failure, "InternalServerError")
        if chat:
            prompt = "\n".join(_text_of(m.get("content")) for m in body.get("messages", []))
        else:
            prompt = _text_of(body.get("prompt"))
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        words, finish = answer(prompt, max_tokens, bool(body.get("ignore_eos")))
        usage = {"prompt_tokens": len(tokens(prompt)), "completion_tokens": len(words),
                 "total_tokens": len(tokens(prompt)) + len(words)}
        first = rate("LAB_TTFT_BASE_MS", 20) / 1000 + usage["prompt_tokens"] / rate("LAB_PREFILL_TPS", 2000)
        step = 1 / rate("LAB_DECODE_TPS", 50)
        reply = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}", "created": int(time.time()),
                 "model": self.served}
        if body.get("stream"):
            return self._stream(reply, chat, words, finish, usage, first, step,
                                bool((body.get("stream_options") or {}).get("include_usage")))
        time.sleep(first + step * max(0, len(words) - 1))
        text = " ".join(words)
        choice = {"index": 0, "finish_reason": finish,
                  **({"message": {"role": "assistant", "content": text}} if chat else {"text": text})}
        self._json(200, {**reply, "object": "chat.completion" if chat else "text_completion",
                         "choices": [choice], "usage": usage})

    def _stream(self, reply: dict[str, Any], chat: bool, words: list[str], finish: str, usage: dict[str, int],
                first: float, step: float, include_usage: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        kind = "chat.completion.chunk" if chat else "text_completion"

        def chunk(text: str | None, done: str | None, role: bool = False) -> dict[str, Any]:
            if chat:
                delta: dict[str, Any] = {"role": "assistant"} if role else {}
                if text is not None:
                    delta["content"] = text
                choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": done}
            else:
                choice = {"index": 0, "text": text or "", "finish_reason": done}
            return {**reply, "object": kind, "choices": [choice]}

        def events() -> Iterator[dict[str, Any]]:
            # Each token at its own time from the request's start, so a late wake-up (a loaded machine) delays
            # one token and not every one after it: the rate stays the one set, as a real engine's does.
            start = time.monotonic()
            for i, word in enumerate(words):
                time.sleep(max(0.0, start + first + i * step - time.monotonic()))
                yield chunk(word if i == 0 else " " + word, None, role=i == 0)
            yield chunk("" if chat else None, finish)
            if include_usage:
                yield {**reply, "object": kind, "choices": [], "usage": usage}

        try:
            for event in events():
                self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except OSError:
            pass  # the client went away

    def _error(self, status: int, message: str, kind: str) -> None:
        self._json(status, {"error": {"message": message, "type": kind, "param": None, "code": status}})

    def _json(self, status: int, body: dict[str, Any]) -> None:
        self._send(status, json.dumps(body).encode())

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # a probe every half second would drown the lines tests read
