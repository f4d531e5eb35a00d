"""The official openai and anthropic SDKs over the httpx2 failover transport, against fake
domains on real sockets: what fails over, what is never sent twice, and how many attempts
a call makes with the SDK's retries as docs/llm-sdks.md sets them.

Every test runs for the four kinds (openai and anthropic, sync and async); the ones about a
call's shape run for a whole answer and a stream alike.
"""

from __future__ import annotations

import time

import anthropic
import openai
import pytest

from pytest_failover import Policy, faults
from pytest_failover.httpx2 import AllDomainsFailed
from pytest_failover.plugin import FakeDomainsFixture
from pytest_failover.simulator import LLMServer
from pytest_failover.telemetry_capture import FailoverTelemetry

from .chat import BACKUP, DOMAINS, PRIMARY, Chat
from .conftest import MakeChat

STREAMED = pytest.mark.parametrize("streamed", [False, True], ids=["whole", "stream"])
KEY = {"Idempotency-Key": "call-1"}
#: A 503 as a gateway sends it; ``retry-after-ms`` only shortens the SDKs' own waits
#: (the transport reads ``Retry-After``), so a test with the SDK's retries on stays short.
OVERLOADED = faults.status(
    503,
    body=b'{"error": {"message": "overloaded", "type": "server_error"}}',
    headers={"content-type": "application/json", "retry-after-ms": "10"},
)


def attempts(telemetry: FailoverTelemetry) -> list[tuple[str, str | None]]:
    """``(domain, error type)`` of every attempt of the one logical request made."""
    [request] = telemetry.requests()
    return [(attempt.domain, attempt.error_type) for attempt in request.attempts]


def hosts(llm: FakeDomainsFixture) -> list[str]:
    """Which fake domain each request reached, in order."""
    return [request.host for request in llm.requests()]


@STREAMED
@pytest.mark.parametrize(
    ("fault", "error_type"), [("dns_nxdomain", "dns_error"), ("refused", "connection_refused")]
)
def test_a_primary_that_cannot_be_reached_moves_the_call_to_the_backup(
    chat: Chat,
    llm: FakeDomainsFixture,
    failover_telemetry: FailoverTelemetry,
    streamed: bool,
    fault: str,
    error_type: str,
) -> None:
    """Nothing was sent to the primary, so the POST moves: one attempt on each domain."""
    llm.fail(PRIMARY, fault)
    assert chat.call(streamed) == f"Hello from {BACKUP}."
    assert attempts(failover_telemetry) == [(DOMAINS[0], error_type), (DOMAINS[1], None)]
    assert hosts(llm) == [BACKUP]


@STREAMED
def test_a_503_to_a_post_without_an_idempotency_key_is_not_sent_again(
    chat: Chat, llm: FakeDomainsFixture, failover_telemetry: FailoverTelemetry, streamed: bool
) -> None:
    """The SDKs send no ``Idempotency-Key``: the 503 reaches the SDK, which raises, and only
    the primary saw the request."""
    llm.fail(PRIMARY, OVERLOADED)
    with pytest.raises(chat.status_error) as raised:
        chat.call(streamed)
    error = raised.value
    assert isinstance(error, openai.APIStatusError | anthropic.APIStatusError)
    assert error.status_code == 503
    assert hosts(llm) == [PRIMARY]
    assert "idempotency-key" not in llm.requests(PRIMARY)[0].headers
    assert attempts(failover_telemetry) == [(DOMAINS[0], "503")]


@STREAMED
def test_an_idempotency_key_in_extra_headers_lets_the_503_move_to_the_backup(
    chat: Chat, llm: FakeDomainsFixture, failover_telemetry: FailoverTelemetry, streamed: bool
) -> None:
    """The opt-in of docs/llm-sdks.md: the same call, the same key on both domains."""
    llm.fail(PRIMARY, OVERLOADED)
    assert chat.call(streamed, KEY) == f"Hello from {BACKUP}."
    assert hosts(llm) == [PRIMARY, BACKUP]
    assert {r.headers["idempotency-key"] for r in llm.requests()} == {"call-1"}
    assert attempts(failover_telemetry) == [(DOMAINS[0], "503"), (DOMAINS[1], None)]


@pytest.mark.parametrize("headers", [{}, KEY], ids=["no key", "key"])
def test_a_stream_cut_mid_body_raises_the_sdks_error_and_is_never_sent_again(
    chat: Chat, llm: FakeDomainsFixture, headers: dict[str, str]
) -> None:
    """Events already reached the caller, so a reset mid-stream is not replayed, even for a
    call marked safe to repeat: the SDK raises its connection error."""
    llm.fail(PRIMARY, faults.reset())
    with pytest.raises(chat.connection_error):
        chat.call(True, headers)
    assert hosts(llm) == [PRIMARY]


def test_a_whole_answer_cut_mid_body_moves_only_when_the_call_may_be_repeated(
    chat: Chat, llm: FakeDomainsFixture
) -> None:
    """A JSON answer of declared length is read inside the transport, whatever the call, so a
    reset mid-body is a failed attempt: a call with a key moves to the backup."""
    llm.fail(PRIMARY, faults.reset())
    assert chat.call(False, KEY) == f"Hello from {BACKUP}."
    assert hosts(llm) == [PRIMARY, BACKUP]


def test_a_whole_answer_cut_mid_body_of_a_call_not_repeatable_raises_the_sdks_error(
    chat: Chat, llm: FakeDomainsFixture, failover_telemetry: FailoverTelemetry
) -> None:
    """Without a key the call is not sent again, and the SDK raises its connection error; the
    cut counts against the primary (its attempt is recorded), so the next call goes to the
    backup first."""
    llm.fail(PRIMARY, faults.reset())
    with pytest.raises(chat.connection_error):
        chat.call(False)
    assert hosts(llm) == [PRIMARY]
    [(domain, error_type)] = attempts(failover_telemetry)
    assert domain == DOMAINS[0] and error_type in ("remote_protocol_error", "read_error", "connection_reset")
    assert chat.call(False) == f"Hello from {BACKUP}."
    assert hosts(llm) == [PRIMARY, BACKUP]


def test_the_documented_max_retries_0_makes_a_call_at_most_the_policys_attempts(
    chat: Chat, llm: FakeDomainsFixture, failover_telemetry: FailoverTelemetry
) -> None:
    """With ``max_retries=0`` the transport owns retries: when every domain answers 503, a
    call repeatable by its key is ``Policy().max_attempts`` (3) attempts, and no more."""
    llm.fail(PRIMARY, OVERLOADED)
    llm.fail(BACKUP, OVERLOADED)
    with pytest.raises(chat.status_error):
        chat.call(False, KEY)
    assert len(llm.requests()) == 3
    assert len(attempts(failover_telemetry)) == 3


def test_the_sdks_own_retries_repeat_a_post_without_a_key_once_per_retry(
    make_chat: MakeChat, llm: FakeDomainsFixture
) -> None:
    """Why the recipe sets ``max_retries=0``: the SDK's default (2) re-sends a POST that has no
    ``Idempotency-Key`` after a 503, which the transport never does; each re-send is a new
    call of the transport (here one attempt each, on the domain the pool moved to)."""
    chat = make_chat(max_retries=2)
    llm.fail(PRIMARY, OVERLOADED)
    llm.fail(BACKUP, OVERLOADED)
    with pytest.raises(chat.status_error):
        chat.call(False)
    assert hosts(llm) == [PRIMARY, BACKUP, PRIMARY]
    assert [r.headers["x-stainless-retry-count"] for r in llm.requests()] == ["0", "1", "2"]


def test_a_stream_runs_past_the_policys_deadline(
    make_chat: MakeChat, llm: FakeDomainsFixture
) -> None:
    """The deadline bounds the call until its answer starts; the events of a stream then come
    as long as the server sends them."""
    # (0.5 s: the answer's head comes in time on a loaded machine too; 0.2 s did not always)
    chat = make_chat(policy=Policy(attempt_timeout=0.5, deadline=0.5))
    llm.add(PRIMARY, LLMServer(reply="slow stream"))
    llm.fail(PRIMARY, faults.trickle(0.0015))  # about 1.2 s for the stream's 800 bytes
    started = time.monotonic()
    assert chat.call(True) == "slow stream"
    assert time.monotonic() - started > 0.5
    assert hosts(llm) == [PRIMARY]


def test_a_stream_quiet_for_longer_than_the_attempt_timeout_is_cut_and_not_sent_again(
    make_chat: MakeChat, llm: FakeDomainsFixture
) -> None:
    """Each read of a stream waits at most the attempt timeout (the SDK's read timeout, capped
    by it): a longer silence is the SDK's timeout error, and nothing is re-sent."""
    chat = make_chat(policy=Policy(attempt_timeout=0.2, deadline=0.2))
    llm.fail(PRIMARY, faults.trickle(0.35))  # a byte every 0.35 s
    with pytest.raises(chat.timeout_error):
        chat.call(True, KEY)
    assert hosts(llm) == [PRIMARY]


def test_a_whole_answer_slower_than_the_attempt_timeout_is_cut_and_not_sent_again(
    make_chat: MakeChat, llm: FakeDomainsFixture
) -> None:
    """Why the recipe's ``attempt_timeout`` is long: a whole answer that has not started in
    time is a read timeout, after the request was sent, so a POST without a key is not
    re-sent and the SDK raises."""
    chat = make_chat(policy=Policy(attempt_timeout=0.2, deadline=5.0))
    llm.fail(PRIMARY, faults.latency(1.0))
    with pytest.raises(chat.connection_error) as raised:
        chat.call(False)
    assert hosts(llm) == [PRIMARY]
    cause = raised.value.__cause__
    assert isinstance(cause, AllDomainsFailed) and cause.reason == "not_retryable"
    assert [a.error_type for a in cause.attempts] == ["read_timeout"]


@STREAMED
def test_when_every_domain_is_down_the_sdk_raises_with_the_transports_error_as_cause(
    chat: Chat, llm: FakeDomainsFixture, streamed: bool
) -> None:
    """Nothing was sent anywhere: the SDK's connection error carries ``AllDomainsFailed``,
    whose attempts say what each domain did."""
    llm.fail(PRIMARY, faults.refused())
    llm.fail(BACKUP, faults.dns_nxdomain())
    with pytest.raises(chat.connection_error) as raised:
        chat.call(streamed)
    cause = raised.value.__cause__
    assert isinstance(cause, AllDomainsFailed)
    assert {(a.domain, a.error_type) for a in cause.attempts} == {
        (DOMAINS[0], "connection_refused"),
        (DOMAINS[1], "dns_error"),
    }
    assert hosts(llm) == []
