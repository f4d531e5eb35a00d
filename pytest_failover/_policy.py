"""The knobs of the failover client, with their defaults, and the retry schedules.

Everything here is an immutable value validated when built, so a bad policy fails
at construction time with a message that names the field, never mid-request.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .resolve import Resolver

__all__ = [
    "DEFAULT_IDEMPOTENT_METHODS",
    "DEFAULT_RETRY_STATUSES",
    "ExponentialBackoff",
    "Hedging",
    "Policy",
    "RetryBudget",
    "Schedule",
    "ScheduleTable",
    "SlowCalls",
    "Step",
]

DEFAULT_RETRY_STATUSES = frozenset({500, 502, 503, 504})
DEFAULT_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})


def _positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero) or math.isinf(value):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ExponentialBackoff:
    """Full-jitter exponential backoff: retry n waits ``U(0, min(cap, base * 2**n))``.

    The first attempt is never delayed; the jitter on the first retry keeps many
    clients that saw the same failure from switching in lockstep.
    """

    base: float = 0.2
    cap: float = 10.0
    max_attempts: int = 3

    def __post_init__(self) -> None:
        _positive("ExponentialBackoff.base", self.base)
        _positive("ExponentialBackoff.cap", self.cap)
        if self.cap < self.base:
            raise ValueError("ExponentialBackoff.cap must be >= base")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError(f"ExponentialBackoff.max_attempts must be an int >= 1, got {self.max_attempts!r}")

    def delay(self, retry: int, random: Callable[[], float]) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        if retry <= 0:
            return 0.0
        ceiling = min(self.cap, self.base * 2.0 ** (retry - 1))
        return random() * ceiling


@dataclass(frozen=True, slots=True)
class Step:
    """One row of an explicit schedule: start at ``at`` seconds after the request
    began, on domain number ``domain`` of the request's domain order (0 = primary).
    """

    at: float
    domain: int

    def __post_init__(self) -> None:
        _positive("Step.at", self.at, allow_zero=True)
        if isinstance(self.domain, bool) or not isinstance(self.domain, int) or self.domain < 0:
            raise ValueError(f"Step.domain must be an int >= 0, got {self.domain!r}")


@dataclass(frozen=True, slots=True)
class ScheduleTable:
    """An explicit schedule, Agora style: ``ScheduleTable([Step(0, 0), Step(1, 0), Step(3, 1)])``.

    Offsets are measured from the start of the logical request; an attempt whose
    offset has already passed starts at once. ``jitter`` (0..1) pulls each retry
    up to that fraction earlier, at random, to break lockstep between clients.
    """

    steps: tuple[Step, ...]
    jitter: float = 0.0

    def __init__(self, steps: list[Step] | tuple[Step, ...], jitter: float = 0.0) -> None:
        steps = tuple(Step(*s) if isinstance(s, tuple) else s for s in steps)
        if not steps:
            raise ValueError("ScheduleTable needs at least one step")
        if steps[0].at != 0:
            raise ValueError("ScheduleTable: the first attempt is never delayed (steps[0].at must be 0)")
        for before, after in itertools.pairwise(steps):
            if after.at < before.at:
                raise ValueError("ScheduleTable: step offsets must not decrease")
        _positive("ScheduleTable.jitter", jitter, allow_zero=True)
        if jitter >= 1:
            raise ValueError("ScheduleTable.jitter must be < 1")
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "jitter", float(jitter))

    @property
    def max_attempts(self) -> int:
        return len(self.steps)

    def offset(self, attempt: int, random: Callable[[], float]) -> float:
        """Offset from the request start of attempt number ``attempt`` (0-based)."""
        at = self.steps[attempt].at
        if attempt == 0 or self.jitter == 0:
            return at
        return at * (1 - self.jitter * random())


Schedule = ExponentialBackoff | ScheduleTable


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryBudget:
    """A retry throttle, one per pool (gRPC-style tokens, charged as ``_budget.py`` says).

    Tokens start at ``max_tokens``; every retry that failed after sending bytes
    costs one, every success refunds ``token_ratio``. While the tokens are at or
    below half of ``max_tokens`` no retry after such a failure is made: first
    attempts, and moves after failures that sent nothing, always go out.
    (gRPC's example is 10 tokens; 100 lets a transport shared by hundreds of
    concurrent requests ride out the burst of failed retries at a domain switch:
    the flapping scenario's gap fell from 16 % to 7.5 % in one side-by-side run.)
    """

    max_tokens: float = 100.0
    token_ratio: float = 0.1

    def __post_init__(self) -> None:
        _positive("RetryBudget.max_tokens", self.max_tokens)
        if self.max_tokens > 1000:
            raise ValueError("RetryBudget.max_tokens must be <= 1000")
        _positive("RetryBudget.token_ratio", self.token_ratio)


@dataclass(frozen=True, slots=True, kw_only=True)
class Hedging:
    """Hedged requests ("The Tail at Scale"; Polly's and gRPC A6's hedging).

    When an idempotent request has no answer after ``delay`` seconds, a second
    attempt goes to the next eligible domain (never an open one, never a probe)
    while the first stays in flight: the first acceptable answer wins, the other
    attempt is cancelled and its connection closed. With ``delay=None`` the wait is
    the current domain's observed latency at ``percentile``, over its last 256
    answers (a fixed 1 s until it has 16). ``max_extra`` bounds the hedges of one
    request; the pool's hedges stay below ``max_ratio`` of its hedgeable requests
    (a token bucket: each request earns ``max_ratio`` of a token, a hedge costs
    one). ``extensions={"failover": {"hedge": False}}`` turns it off per request.

    A sync transport sends a hedgeable request's attempts from a small bounded
    thread pool (``threads``, per transport) so that it can wait for the first
    answer; an async one uses tasks.
    """

    delay: float | None = None
    percentile: float = 0.95
    max_extra: int = 1
    max_ratio: float = 0.05
    threads: int = 8

    def __post_init__(self) -> None:
        if self.delay is not None:
            _positive("Hedging.delay", self.delay)
        _fraction("Hedging.percentile", self.percentile)
        _count("Hedging.max_extra", self.max_extra)
        _fraction("Hedging.max_ratio", self.max_ratio)
        _count("Hedging.threads", self.threads)


@dataclass(frozen=True, slots=True, kw_only=True)
class SlowCalls:
    """Slow-call ejection (resilience4j's ``slowCallRateThreshold``).

    A domain whose share of calls slower than ``threshold`` seconds reaches
    ``rate`` over the last ``window`` seconds, with at least ``minimum_calls``
    calls in it, counts as failing: its breaker opens (``failover.reason =
    "slow_calls"``) and traffic moves on. It comes back through the breaker's
    single probe, like any open domain; the window starts afresh then.
    """

    threshold: float
    rate: float = 0.5
    minimum_calls: int = 10
    window: float = 30.0

    def __post_init__(self) -> None:
        _positive("SlowCalls.threshold", self.threshold)
        _fraction("SlowCalls.rate", self.rate)
        _count("SlowCalls.minimum_calls", self.minimum_calls)
        _positive("SlowCalls.window", self.window)


def _fraction(name: str, value: float) -> None:
    _positive(name, value)
    if value > 1:
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")


def _count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


# Takes a response of the front-end's library (httpx's, httpx2's; the requests and aiohttp
# front-ends hand it an httpx one): one policy may serve front-ends of several.
ResponseCheck = Callable[[Any], bool]


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """How the failover client decides. Defaults are the documented ones.

    - ``schedule``: :class:`ExponentialBackoff` (default) or :class:`ScheduleTable`.
    - ``attempt_timeout``: per-attempt timeout in seconds (caps httpx's own timeouts).
    - ``deadline``: the whole logical request, retries and waits included.
    - ``retry_statuses``: statuses that count as a failure of the domain.
    - ``retry_after_cap``: longest ``Retry-After`` (429/503) that is honoured.
    - ``idempotent_methods``: methods that may be re-sent after bytes left.
    - ``is_app_error``: a predicate on a successful response (its body is read)
      that marks an application-level error: returned as is, never retried,
      never held against the domain, reported as ``error.type=app_error``.
    - ``breaker_threshold`` / ``breaker_cooldown``: consecutive failures that open
      a domain's breaker, and how long it stays open before one probe.
    - ``probe_wait``: how long a request that finds every domain out, with a
      probe in flight, waits for that probe to report before it gives up
      (``circuit_open``, so a fallback answers).
    - ``retry_budget``: :class:`RetryBudget`, or None to disable throttling.
    - ``sticky``: prefer the last domain that worked; ``sticky_path`` persists it.
    - ``stale_on_failure``: when every domain failed, serve a stored GET response
      as RFC 9111 / RFC 5861 allow (``stale-if-error``, else ``stale_max_age``
      seconds past its freshness); bodies over ``stale_max_bytes`` are not stored.
    - ``read_body``: read a successful response's body inside the transport when
      the request may be retried, so a connection that breaks mid-body fails over
      like any other failure; any other request's only when it can be read whole
      (a declared length, not encoded), so that the client need not read it again
      (a break there is the attempt's failure, not re-sent). At most ``read_body_max_bytes`` are held: a larger
      body streams through to the caller, and a failure past that point reaches
      the caller. Set it to False for streamed downloads. An event stream
      (``text/event-stream``, e.g. an LLM's tokens) is never read: it reaches the
      caller as it comes, and a break mid-stream is never replayed.
    - ``hedging``: :class:`Hedging`, or None (the default) to never hedge.
    - ``slow_calls``: :class:`SlowCalls`, or None (the default): only failures
      open a breaker.
    - ``resolver``: a ``pytest_failover.resolve`` resolver (``DoHResolver``,
      ``ChainResolver``, ...) for the pool's domains, or None (the default: the
      system's, as without this library, at no cost). With one, the default inner
      httpx transport connects to the addresses it answers, in turn, until one
      takes the connection (``docs/resolve.md``); TLS and HTTP stay bound to the
      domain's name. It is a policy field, not a ``Pool`` one: a ``Pool`` is the
      list of interchangeable domains and their steering, and the policy already
      says how each pool's requests are made, per pool when ``policy=`` maps pool
      names to policies, so a resolver per pool needs no second place to look.
    """

    schedule: Schedule = field(default_factory=ExponentialBackoff)
    attempt_timeout: float | None = 10.0
    deadline: float = 20.0
    retry_statuses: frozenset[int] = DEFAULT_RETRY_STATUSES
    retry_after_cap: float = 30.0
    idempotent_methods: frozenset[str] = DEFAULT_IDEMPOTENT_METHODS
    is_app_error: ResponseCheck | None = None
    breaker_threshold: int = 3
    breaker_cooldown: float = 30.0
    probe_wait: float = 1.0
    retry_budget: RetryBudget | None = field(default_factory=RetryBudget)
    sticky: bool = True
    sticky_path: str | None = None
    stale_on_failure: bool = False
    stale_max_age: float = 300.0
    stale_max_bytes: int = 1 << 20
    read_body: bool = True
    read_body_max_bytes: int = 8 << 20
    hedging: Hedging | None = None
    slow_calls: SlowCalls | None = None
    resolver: Resolver | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.schedule, (ExponentialBackoff, ScheduleTable)):
            raise ValueError("Policy.schedule must be an ExponentialBackoff or a ScheduleTable")
        if self.attempt_timeout is not None:
            _positive("Policy.attempt_timeout", self.attempt_timeout)
        _positive("Policy.deadline", self.deadline)
        _positive("Policy.retry_after_cap", self.retry_after_cap, allow_zero=True)
        _positive("Policy.breaker_cooldown", self.breaker_cooldown)
        _positive("Policy.probe_wait", self.probe_wait, allow_zero=True)
        _positive("Policy.stale_max_age", self.stale_max_age)
        for name in ("stale_max_bytes", "read_body_max_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Policy.{name} must be an int >= 0, got {value!r}")
        if isinstance(self.breaker_threshold, bool) or not isinstance(self.breaker_threshold, int) or self.breaker_threshold < 1:
            raise ValueError(f"Policy.breaker_threshold must be an int >= 1, got {self.breaker_threshold!r}")
        if self.hedging is not None and not isinstance(self.hedging, Hedging):
            raise ValueError("Policy.hedging must be a Hedging or None")
        if self.slow_calls is not None and not isinstance(self.slow_calls, SlowCalls):
            raise ValueError("Policy.slow_calls must be a SlowCalls or None")
        if self.resolver is not None and not all(
            callable(getattr(self.resolver, name, None)) for name in ("resolve", "aresolve")
        ):
            raise ValueError(
                "Policy.resolver must be a resolver of pytest_failover.resolve (with resolve() and "
                f"aresolve()), got {self.resolver!r}"
            )
        statuses = frozenset(self.retry_statuses)
        bad = sorted(s for s in statuses if not isinstance(s, int) or not 100 <= s <= 599)
        if bad:
            raise ValueError(f"Policy.retry_statuses: {bad} are not HTTP status codes")
        if any(400 <= s < 500 for s in statuses):
            raise ValueError("Policy.retry_statuses: a 4xx is an answer, not a failure of the domain")
        object.__setattr__(self, "retry_statuses", statuses)
        object.__setattr__(
            self, "idempotent_methods", frozenset(m.upper() for m in self.idempotent_methods)
        )

    @property
    def max_attempts(self) -> int:
        return self.schedule.max_attempts

    @classmethod
    def agora(cls, **overrides: Any) -> Policy:
        """The seed schedule: primary; primary after 1 s; backup after 3 s;
        region 1 after 6 s; region 2 after 10 s; 10 s per attempt, 20 s overall.
        ``overrides``: any other field's value, as ``Policy(...)`` takes it."""
        table = ScheduleTable([Step(0, 0), Step(1, 0), Step(3, 1), Step(6, 2), Step(10, 3)])
        return replace(cls(schedule=table, attempt_timeout=10.0, deadline=20.0), **overrides)
