"""One official LLM SDK client, of any kind, behind one blocking call, for shared test bodies.

``Chat(kind, domains)`` builds the SDK client of ``kind`` over the failover transport
(``typed_clients``), and ``chat.call(streamed, headers)`` makes one call the way that SDK's
users do: a chat completion (OpenAI) or a message (Anthropic), whole or streamed, and
returns the reply's text. The async kinds run on an event loop of their own. Errors are
the SDK's own; ``status_error``, ``connection_error`` and ``timeout_error`` name its classes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar

import anthropic
import openai
from anthropic.types import RawMessageStreamEvent
from openai.types.chat import ChatCompletionChunk

from pytest_failover import Policy

from . import typed_clients as build

KINDS = ("openai", "async openai", "anthropic", "async anthropic")
PRIMARY = "llm.example.com"
BACKUP = "llm2.example.com"
DOMAINS = (f"https://{PRIMARY}", f"https://{BACKUP}")
MODEL = "test-model"
PROMPT = "Say hello."

T = TypeVar("T")
Client = openai.OpenAI | openai.AsyncOpenAI | anthropic.Anthropic | anthropic.AsyncAnthropic


class Chat:
    """One SDK client of ``kind`` across ``domains`` (base URLs, primary first)."""

    def __init__(
        self,
        kind: str,
        domains: Sequence[str],
        *,
        max_retries: int = build.MAX_RETRIES,
        policy: Policy = build.POLICY,
    ) -> None:
        self.kind = kind
        self._loop = asyncio.new_event_loop() if kind.startswith("async") else None
        self.status_error: type[openai.APIStatusError | anthropic.APIStatusError]
        self.connection_error: type[openai.APIConnectionError | anthropic.APIConnectionError]
        self.timeout_error: type[openai.APITimeoutError | anthropic.APITimeoutError]
        self.client: Client
        if kind.endswith("openai"):
            self.status_error, self.connection_error = (
                openai.APIStatusError,
                openai.APIConnectionError,
            )
            self.timeout_error = openai.APITimeoutError
        else:
            self.status_error, self.connection_error = (
                anthropic.APIStatusError,
                anthropic.APIConnectionError,
            )
            self.timeout_error = anthropic.APITimeoutError
        if kind == "openai":
            self.client = build.openai_client(domains, max_retries=max_retries, policy=policy)
        elif kind == "async openai":
            self.client = build.async_openai_client(domains, max_retries=max_retries, policy=policy)
        elif kind == "anthropic":
            self.client = build.anthropic_client(domains, max_retries=max_retries, policy=policy)
        elif kind == "async anthropic":
            self.client = build.async_anthropic_client(
                domains, max_retries=max_retries, policy=policy
            )
        else:
            raise ValueError(f"unknown kind {kind!r}; one of {KINDS}")

    def call(self, streamed: bool = False, headers: Mapping[str, str] | None = None) -> str:
        """One call, whole or streamed (``headers`` as the SDK's ``extra_headers``): the reply."""
        extra = dict(headers or {})
        client = self.client
        if isinstance(client, openai.OpenAI):
            return _openai(client, streamed, extra)
        if isinstance(client, openai.AsyncOpenAI):
            return self._run(_async_openai(client, streamed, extra))
        if isinstance(client, anthropic.Anthropic):
            return _anthropic(client, streamed, extra)
        return self._run(_async_anthropic(client, streamed, extra))

    def close(self) -> None:
        client = self.client
        if isinstance(client, openai.AsyncOpenAI | anthropic.AsyncAnthropic):
            self._run(client.close())
        else:
            client.close()
        if self._loop is not None:
            self._loop.close()

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None
        return self._loop.run_until_complete(coroutine)


MESSAGES: list[Any] = [{"role": "user", "content": PROMPT}]


def _chunk_text(chunk: ChatCompletionChunk) -> str:
    return (chunk.choices[0].delta.content or "") if chunk.choices else ""


def _event_text(event: RawMessageStreamEvent) -> str:
    if event.type == "content_block_delta" and event.delta.type == "text_delta":
        return event.delta.text
    return ""


def _openai(client: openai.OpenAI, streamed: bool, headers: dict[str, str]) -> str:
    create = client.chat.completions.create
    if streamed:
        chunks = create(model=MODEL, messages=MESSAGES, stream=True, extra_headers=headers)
        return "".join(_chunk_text(chunk) for chunk in chunks)
    return (
        create(model=MODEL, messages=MESSAGES, extra_headers=headers).choices[0].message.content
        or ""
    )


async def _async_openai(client: openai.AsyncOpenAI, streamed: bool, headers: dict[str, str]) -> str:
    create = client.chat.completions.create
    if streamed:
        chunks = await create(model=MODEL, messages=MESSAGES, stream=True, extra_headers=headers)
        return "".join([_chunk_text(chunk) async for chunk in chunks])
    completion = await create(model=MODEL, messages=MESSAGES, extra_headers=headers)
    return completion.choices[0].message.content or ""


def _anthropic(client: anthropic.Anthropic, streamed: bool, headers: dict[str, str]) -> str:
    create = client.messages.create
    if streamed:
        events = create(
            model=MODEL, max_tokens=64, messages=MESSAGES, stream=True, extra_headers=headers
        )
        return "".join(_event_text(event) for event in events)
    message = create(model=MODEL, max_tokens=64, messages=MESSAGES, extra_headers=headers)
    return "".join(block.text for block in message.content if block.type == "text")


async def _async_anthropic(
    client: anthropic.AsyncAnthropic, streamed: bool, headers: dict[str, str]
) -> str:
    create = client.messages.create
    if streamed:
        events = await create(
            model=MODEL, max_tokens=64, messages=MESSAGES, stream=True, extra_headers=headers
        )
        return "".join([_event_text(event) async for event in events])
    message = await create(model=MODEL, max_tokens=64, messages=MESSAGES, extra_headers=headers)
    return "".join(block.text for block in message.content if block.type == "text")
