"""Just enough of the OpenAI and Anthropic HTTP APIs for a fake domain to stand in for either.

    fd.add("llm.example.com", LLMServer())
    fd.add("llm2.example.com", LLMServer(reply="from the backup"))

``LLMServer`` is an ordinary handler (``handler(request) -> Response``), so every fault of
the simulator applies to it as to any fake domain: DNS failures, refused connections, TLS
faults, ``status(503)``, ``reset`` (the answer, a JSON body or a stream, cut halfway),
``trickle`` (a stream that arrives a byte at a time). It answers two routes, whatever
prefix the client's base URL adds before them:

``POST .../v1/chat/completions``  (OpenAI chat completions)
    a ``chat.completion`` object; with ``"stream": true``, server-sent events: one
    ``chat.completion.chunk`` per word of the reply, a last chunk with
    ``finish_reason: "stop"``, then ``data: [DONE]``.
``POST .../v1/messages``  (Anthropic messages)
    a ``message`` object; with ``"stream": true``, the named events ``message_start``,
    ``content_block_start``, one ``content_block_delta`` per word, ``content_block_stop``,
    ``message_delta`` and ``message_stop``.

The reply is ``reply`` if given, else ``"Hello from <host>."``, so a test sees which domain
answered; ``model`` is echoed from the request. A body that is not a JSON object with a
string ``model`` and a list of ``messages`` gets 400, another method 405 and another path
404, each with an error body in the API's own shape, so the SDKs raise their usual errors.
The whole answer is written at once (``Content-Length``); only the fault decides how it
arrives.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from ._handlers import Response
from ._record import RecordedRequest

__all__ = ["LLMServer"]

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
JSON_CONTENT_TYPE = "application/json"

Api = Literal["openai", "anthropic"]


class LLMServer:
    """A fake domain's handler that answers OpenAI chat completions and Anthropic messages."""

    def __init__(self, reply: str | None = None) -> None:
        if reply is not None and (not isinstance(reply, str) or not reply.strip()):
            raise ValueError(f"LLMServer(reply=) must be a non-empty str or None, got {reply!r}")
        self.reply = reply
        self._ids = itertools.count(1)

    def __call__(self, request: RecordedRequest) -> Response:
        path = request.path.partition("?")[0]
        api: Api
        if path.endswith(OPENAI_PATH):
            api = "openai"
        elif path.endswith(ANTHROPIC_PATH):
            api = "anthropic"
        else:
            return _error(
                "openai",
                404,
                "not_found_error",
                f"no route {path!r}: this fake LLM API answers POST .../{OPENAI_PATH[1:]} "
                f"and POST .../{ANTHROPIC_PATH[1:]}",
            )
        if request.method != "POST":
            return _error(
                api, 405, "invalid_request_error", f"{path} takes POST, not {request.method}"
            )
        try:
            body = request.json()
        except ValueError as exc:
            return _error(api, 400, "invalid_request_error", f"the body is not JSON: {exc}")
        problem = _check_body(body)
        if problem is not None:
            return _error(api, 400, "invalid_request_error", problem)
        text = self.reply if self.reply is not None else f"Hello from {request.host}."
        words = _words(text)
        ident = f"{request.host}-{next(self._ids)}"
        model = str(body["model"])
        prompt_tokens = sum(
            len(str(m.get("content", "")).split())
            for m in body["messages"]
            if isinstance(m, Mapping)
        )
        stream = body.get("stream") is True
        if api == "openai":
            if stream:
                return _sse(_openai_chunks(ident, model, words))
            return _json(_openai_completion(ident, model, text, prompt_tokens, len(words)))
        if stream:
            return _sse(_anthropic_events(ident, model, words, prompt_tokens))
        return _json(_anthropic_message(ident, model, text, prompt_tokens, len(words)))


def _check_body(body: object) -> str | None:
    if not isinstance(body, dict):
        return f"the body must be a JSON object, got {type(body).__name__}"
    if not isinstance(body.get("model"), str):
        return "the body needs a string 'model'"
    if not isinstance(body.get("messages"), list):
        return "the body needs a list of 'messages'"
    return None


def _words(text: str) -> list[str]:
    """The reply in pieces, one per stream event: each word with the space before it."""
    parts = text.split(" ")
    return [parts[0], *(" " + part for part in parts[1:])]


def _json(obj: Mapping[str, Any], status: int = 200) -> Response:
    return Response(status, json.dumps(obj), {"content-type": JSON_CONTENT_TYPE})


def _sse(events: Iterator[tuple[str | None, str]]) -> Response:
    lines = []
    for name, data in events:
        if name is not None:
            lines.append(f"event: {name}\n")
        lines.append(f"data: {data}\n\n")
    return Response(
        200, "".join(lines), {"content-type": SSE_CONTENT_TYPE, "cache-control": "no-cache"}
    )


def _error(api: Api, status: int, kind: str, message: str) -> Response:
    if api == "anthropic":
        return _json({"type": "error", "error": {"type": kind, "message": message}}, status)
    return _json({"error": {"message": message, "type": kind, "param": None, "code": None}}, status)


# -- OpenAI chat completions


def _openai_completion(
    ident: str, model: str, text: str, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{ident}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _openai_chunks(ident: str, model: str, words: list[str]) -> Iterator[tuple[str | None, str]]:
    created = int(time.time())

    def chunk(delta: Mapping[str, str], finish_reason: str | None) -> tuple[None, str]:
        return None, json.dumps(
            {
                "id": f"chatcmpl-{ident}",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
        )

    yield chunk({"role": "assistant", "content": ""}, None)
    for word in words:
        yield chunk({"content": word}, None)
    yield chunk({}, "stop")
    yield None, "[DONE]"


# -- Anthropic messages


def _anthropic_message(
    ident: str, model: str, text: str, input_tokens: int, output_tokens: int
) -> dict[str, Any]:
    return {
        "id": f"msg_{ident}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def _anthropic_events(
    ident: str, model: str, words: list[str], input_tokens: int
) -> Iterator[tuple[str | None, str]]:
    def event(name: str, data: Mapping[str, Any]) -> tuple[str, str]:
        return name, json.dumps({"type": name, **data})

    start = _anthropic_message(ident, model, "", input_tokens, 0)
    start.update(content=[], stop_reason=None)
    yield event("message_start", {"message": start})
    yield event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    for word in words:
        yield event(
            "content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": word}}
        )
    yield event("content_block_stop", {"index": 0})
    yield event(
        "message_delta",
        {
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": len(words)},
        },
    )
    yield event("message_stop", {})
