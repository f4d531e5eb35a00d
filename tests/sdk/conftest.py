"""Real-SDK tests: the official openai and anthropic clients over the httpx2 failover transport.

In CI a missing SDK or httpx2 fails the run (tests/conftest.py turns the module skip of
``pytest.importorskip`` into a failure there).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

for _name in ("httpx2", "openai", "anthropic", "pytest_failover.httpx2"):
    pytest.importorskip(_name, reason=f"the real-SDK tests need {_name}: pip install -e '.[dev]'")

from pytest_failover import Policy  # noqa: E402 - after the skips above
from pytest_failover.plugin import FakeDomainsFixture  # noqa: E402 - after the skips above
from pytest_failover.simulator import LLMServer  # noqa: E402 - after the skips above

from .chat import BACKUP, DOMAINS, KINDS, PRIMARY, Chat  # noqa: E402 - after the skips above
from .typed_clients import MAX_RETRIES, POLICY  # noqa: E402 - after the skips above


@pytest.fixture
def llm(fake_domains: FakeDomainsFixture) -> FakeDomainsFixture:
    """Two fake domains that answer the OpenAI and Anthropic APIs, each naming itself."""
    fake_domains.add(PRIMARY, LLMServer())
    fake_domains.add(BACKUP, LLMServer())
    return fake_domains


#: ``make_chat(max_retries=..., policy=...)``: an SDK client of the test's kind across the two domains.
MakeChat = Callable[..., Chat]


@pytest.fixture(params=KINDS)
def make_chat(request: pytest.FixtureRequest, llm: FakeDomainsFixture) -> Iterator[MakeChat]:
    """Build SDK clients of the parametrised kind (one test body for all four); closed afterwards."""
    made: list[Chat] = []

    def make(*, max_retries: int = MAX_RETRIES, policy: Policy = POLICY) -> Chat:
        chat = Chat(request.param, DOMAINS, max_retries=max_retries, policy=policy)
        made.append(chat)
        return chat

    yield make
    for chat in made:
        chat.close()


@pytest.fixture
def chat(make_chat: MakeChat) -> Chat:
    """An SDK client of the parametrised kind, as docs/llm-sdks.md builds it (``max_retries=0``)."""
    return make_chat()
