"""The retry budget: a token bucket per pool that charges failed retries.

Rules and theory of operation
-----------------------------
Tokens start full (``max_tokens``). A *retry that failed after sending bytes*
costs one token; every success refunds ``token_ratio``. A retry after a failure
that sent bytes is allowed only while the tokens are above half of the maximum.

What is free, and why that is safe:

- A first attempt never costs anything. It is the load the application asked
  for; failing it adds nothing. (gRPC A6 charges every failure, so a burst of
  first attempts against a dead primary drains the bucket before a single retry
  has reached the healthy backup: 96 of 100 concurrent requests failed that way.)
- A failure that sent nothing (DNS, refused, TLS handshake, connect timeout) is
  never charged and never refused: nothing reached a server, so moving on adds
  no load anywhere (gRPC's transparent retries).
- A retry that succeeded is the point of failover; it refunds like any success.

What the budget still bounds is amplification when every domain fails: each
failed retry drains the bucket, nothing refills it while nothing succeeds, so
once drained every logical request makes one attempt (1.0 attempts per request)
until successes come back. The same rule is the first seed's switch limiter:
when switching keeps failing (the backup is unstable too) the client stops
switching, and the fallback answers.

Pure arithmetic; the pool's lock serialises access.
"""

from __future__ import annotations

from ._policy import RetryBudget

__all__ = ["TokenBucket"]


class TokenBucket:
    __slots__ = ("full", "max_tokens", "ratio", "tokens")

    def __init__(self, config: RetryBudget) -> None:
        self.max_tokens = float(config.max_tokens)
        self.ratio = float(config.token_ratio)
        self._hold(self.max_tokens)

    def _hold(self, tokens: float) -> None:
        """Hold ``tokens``; ``full`` (would a refund change nothing?) is kept with them, so
        every success reads an attribute where it made a call (``RequestPlan.answered_alone``:
        see ``Breaker.quiet``)."""
        self.tokens = tokens
        self.full = tokens >= self.max_tokens

    def allows_retry(self) -> bool:
        return self.tokens > self.max_tokens / 2

    def charge(self) -> None:
        """A retry failed after sending bytes."""
        self._hold(max(0.0, self.tokens - 1.0))

    def refund(self) -> None:
        """An attempt succeeded."""
        if self.tokens < self.max_tokens:  # full, as it mostly is: nothing to do
            self._hold(min(self.max_tokens, self.tokens + self.ratio))
