"""``LLMServer``: the OpenAI and Anthropic shapes on the wire, its errors, and faults on it.

The official SDKs reading these answers are tested in ``tests/sdk``; here a plain httpx
client reads the bytes, so the wire format itself is pinned.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from pytest_failover import faults
from pytest_failover.simulator import FakeDomains, LLMServer

HOST = "llm.example.com"
OPENAI = f"https://{HOST}/v1/chat/completions"
ANTHROPIC = f"https://{HOST}/v1/messages"
BODY = {"model": "m-1", "messages": [{"role": "user", "content": "two words"}]}


def sse(text: str) -> list[tuple[str | None, str]]:
    """``(event name, data)`` per server-sent event of ``text``."""
    events = []
    for block in text.split("\n\n"):
        if not block:
            continue
        fields = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((fields.get("event"), fields["data"]))
    return events


def post(url: str, body: Any) -> httpx.Response:
    return httpx.post(url, json=body, timeout=5)


def test_an_openai_completion_names_the_domain_and_echoes_the_model(fd: FakeDomains) -> None:
    """A chat completion carries the default reply, the request's model and token counts."""
    fd.add(HOST, LLMServer())
    answer = post(OPENAI, BODY).json()
    assert answer["object"] == "chat.completion"
    assert answer["model"] == "m-1"
    assert answer["choices"][0]["message"] == {
        "role": "assistant",
        "content": f"Hello from {HOST}.",
        "refusal": None,
    }
    assert answer["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}


def test_an_openai_stream_is_one_chunk_per_word_and_done(fd: FakeDomains) -> None:
    """``stream: true`` answers SSE chunks: the role, a word each, ``stop``, then ``[DONE]``."""
    fd.add(HOST, LLMServer(reply="a b c"))
    response = post(OPENAI, {**BODY, "stream": True})
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse(response.text)
    assert events[-1] == (None, "[DONE]")
    chunks = [json.loads(data) for _, data in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert [c["choices"][0]["delta"].get("content") for c in chunks] == ["", "a", " b", " c", None]
    assert [c["choices"][0]["finish_reason"] for c in chunks][-2:] == [None, "stop"]


def test_an_anthropic_message_and_its_named_events(fd: FakeDomains) -> None:
    """Messages answer a ``message``; streamed, the named events in the API's order."""
    fd.add(HOST, LLMServer(reply="x y"))
    message = post(ANTHROPIC, BODY).json()
    assert message["type"] == "message"
    assert message["content"] == [{"type": "text", "text": "x y"}]
    assert message["usage"] == {"input_tokens": 2, "output_tokens": 2}
    events = sse(post(ANTHROPIC, {**BODY, "stream": True}).text)
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(json.loads(data)["type"] == name for name, data in events)
    deltas = [
        json.loads(data)["delta"]["text"] for name, data in events if name == "content_block_delta"
    ]
    assert deltas == ["x", " y"]


def test_a_prefix_before_the_routes_is_allowed(fd: FakeDomains) -> None:
    """A gateway's base URL (``https://host/openai/v1``) reaches the same route."""
    fd.add(HOST, LLMServer())
    assert post(f"https://{HOST}/openai/v1/chat/completions", BODY).status_code == 200


@pytest.mark.parametrize(
    ("method", "url", "body", "status", "says"),
    [
        ("POST", f"https://{HOST}/v1/embeddings", BODY, 404, "no route '/v1/embeddings'"),
        ("GET", OPENAI, None, 405, "takes POST, not GET"),
        ("POST", OPENAI, [1], 400, "must be a JSON object, got list"),
        ("POST", ANTHROPIC, {"messages": []}, 400, "needs a string 'model'"),
        ("POST", ANTHROPIC, {"model": "m"}, 400, "needs a list of 'messages'"),
    ],
)
def test_bad_requests_get_the_apis_error_shape(
    fd: FakeDomains, method: str, url: str, body: Any, status: int, says: str
) -> None:
    """Wrong routes, methods and bodies get 404 / 405 / 400 with an error body the SDKs read."""
    fd.add(HOST, LLMServer())
    response = httpx.request(method, url, json=body, timeout=5)
    assert response.status_code == status
    error = response.json()["error"]
    assert says in error["message"]
    if url == ANTHROPIC:
        assert response.json()["type"] == "error"


def test_a_body_that_is_not_json_is_a_400(fd: FakeDomains) -> None:
    """A body that does not parse is refused with the parser's reason."""
    fd.add(HOST, LLMServer())
    response = httpx.post(OPENAI, content=b"{", timeout=5)
    assert response.status_code == 400
    assert "the body is not JSON" in response.json()["error"]["message"]


@pytest.mark.parametrize("reply", ["", "   ", 3])
def test_a_reply_must_be_a_non_empty_string(reply: Any) -> None:
    """A bad ``reply`` is refused when the server is built."""
    with pytest.raises(ValueError, match=r"LLMServer\(reply=\) must be a non-empty str"):
        LLMServer(reply=reply)


def test_faults_apply_to_it_like_to_any_handler(fd: FakeDomains) -> None:
    """503 replaces the answer, and ``reset`` cuts a stream halfway through its body."""
    fd.add(HOST, LLMServer())
    fd.fail(HOST, faults.status(503))
    assert post(OPENAI, BODY).status_code == 503
    fd.fail(HOST, faults.reset())
    with httpx.stream("POST", OPENAI, json={**BODY, "stream": True}, timeout=5) as response:
        assert response.status_code == 200
        with pytest.raises(httpx.HTTPError):
            response.read()
    assert [r.fault for r in fd.requests(HOST)] == [faults.Status(503), faults.Reset()]
