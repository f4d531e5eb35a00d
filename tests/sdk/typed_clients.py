"""The official LLM SDKs over the failover transport, built as docs/llm-sdks.md shows.

``mypy --strict`` checks this file (the project's mypy run covers ``tests/sdk``), so the
recipe type-checks for users too: ``openai.OpenAI`` / ``AsyncOpenAI`` and
``anthropic.Anthropic`` / ``AsyncAnthropic`` accept an ``httpx2`` client whose transport is
``pytest_failover.httpx2.FailoverTransport`` / ``AsyncFailoverTransport``. The real-SDK
tests build their clients here.
"""

from __future__ import annotations

from collections.abc import Sequence

import anthropic
import httpx2
import openai

from pytest_failover import Policy, Pool
from pytest_failover.httpx2 import AsyncFailoverTransport, FailoverTransport

#: The recipe's choice: the transport owns retries, the SDK makes one attempt per call.
MAX_RETRIES = 0
#: An LLM call is slow: an attempt may wait 2 minutes for its answer to start, and a call
#: (every attempt and wait until an answer starts) 5 minutes. A stream runs on afterwards.
POLICY = Policy(attempt_timeout=120.0, deadline=300.0)
API_KEY = "test-key"


def http_client(domains: Sequence[str], policy: Policy = POLICY) -> httpx2.Client:
    """An httpx2 client whose requests fail over across ``domains`` (base URLs, primary first)."""
    return httpx2.Client(transport=FailoverTransport([Pool("llm", list(domains))], policy))


def async_http_client(domains: Sequence[str], policy: Policy = POLICY) -> httpx2.AsyncClient:
    """The same, async."""
    return httpx2.AsyncClient(
        transport=AsyncFailoverTransport([Pool("llm", list(domains))], policy)
    )


def openai_client(
    domains: Sequence[str], *, max_retries: int = MAX_RETRIES, policy: Policy = POLICY
) -> openai.OpenAI:
    return openai.OpenAI(
        api_key=API_KEY,
        base_url=f"{domains[0]}/v1",
        max_retries=max_retries,
        http_client=http_client(domains, policy),
    )


def async_openai_client(
    domains: Sequence[str], *, max_retries: int = MAX_RETRIES, policy: Policy = POLICY
) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key=API_KEY,
        base_url=f"{domains[0]}/v1",
        max_retries=max_retries,
        http_client=async_http_client(domains, policy),
    )


def anthropic_client(
    domains: Sequence[str], *, max_retries: int = MAX_RETRIES, policy: Policy = POLICY
) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key=API_KEY,
        base_url=domains[0],
        max_retries=max_retries,
        http_client=http_client(domains, policy),
    )


def async_anthropic_client(
    domains: Sequence[str], *, max_retries: int = MAX_RETRIES, policy: Policy = POLICY
) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key=API_KEY,
        base_url=domains[0],
        max_retries=max_retries,
        http_client=async_http_client(domains, policy),
    )
