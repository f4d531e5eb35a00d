"""The retry budget: a gRPC-style token bucket, one per pool.

Tokens start full. Every failed attempt costs one token, every successful one
refunds ``token_ratio``. Retries (and so switches to another domain) are allowed
only while the tokens are above half of the maximum. Pure arithmetic; the pool's
lock serialises access.
"""

from __future__ import annotations

from ._policy import RetryBudget

__all__ = ["TokenBucket"]


class TokenBucket:
    __slots__ = ("max_tokens", "ratio", "tokens")

    def __init__(self, config: RetryBudget) -> None:
        self.max_tokens = float(config.max_tokens)
        self.ratio = float(config.token_ratio)
        self.tokens = self.max_tokens

    def allows_retry(self) -> bool:
        return self.tokens > self.max_tokens / 2

    def failure(self) -> None:
        self.tokens = max(0.0, self.tokens - 1.0)

    def success(self) -> None:
        if self.tokens < self.max_tokens:  # full, as it mostly is: nothing to refund
            self.tokens = min(self.max_tokens, self.tokens + self.ratio)
