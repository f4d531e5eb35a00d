"""Shared domain health across processes, through Redis (extra ``pytest-failover[redis]``).

::

    transport = FailoverTransport(pools, shared=RedisHealth("redis://127.0.0.1:6379/0"))

Rules and theory of operation
-----------------------------
Local-first. Every process keeps its own breakers and decides alone; Redis only
carries *news*, and the healthy path never waits on it:

- What a process tells the fleet, from the events its core already returns: a
  breaker opened (with its deadline), closed, or a failback probe's outcome; the
  pool moved off a domain (its serving domain); a control document version it
  applied. A background publisher sends them; the request only queues them.
- What it hears: the same, by pub/sub, applied to its local breakers under the
  pool's lock by the breaker's own rules (``Breaker.apply_remote_open`` ...; a
  probe of this process in flight is never overruled). On connecting it reads the
  keys of its own domains once, so a worker that starts during an outage starts
  on the backup.
- One probe per fleet: the request that takes a domain's probe lease also takes
  the fleet's (``SET NX PX``, bounded by ``timeout``, 50 ms). If another process
  holds it, the domain is PROBING here until that process reports or its lease
  expires, and the request goes to the domain that works.
- Redis down, slow (an operation over ``timeout``) or lost: local-only, exactly
  as without ``shared=``, and other processes' leases are forgotten at once. The
  listener reconnects with jittered exponential backoff. The state is in
  ``transport.state().shared``, the ``failover.shared.state`` gauge, and one log
  line per change.
- Nothing read from Redis names anything new: keys are built from local pool and
  domain names only, and a message naming an unknown pool or domain, or malformed,
  is dropped. A remote deadline is trusted for one cooldown at most. Redis must
  still be access-controlled (ACL and password, ``rediss://``): whoever can
  publish there can open your breakers.
"""

from __future__ import annotations

try:
    import redis  # noqa: F401  # the install hint below, at import time
except ImportError as exc:  # pragma: no cover - exercised by the install hint test
    raise ImportError(
        "shared health (RedisHealth, AsyncRedisHealth) needs redis-py: pip install 'pytest-failover[redis]'"
    ) from exc

from ._redis import AsyncRedisHealth, RedisHealth

__all__ = ["AsyncRedisHealth", "RedisHealth"]
