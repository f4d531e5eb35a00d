"""From samples, counted calls, server records and the timeline to the figures of one run.

Definitions (the issue's, made precise):

- *failure*: the logical request raised, or its final answer was 500/502/503/504;
- *availability gap*: failures during whose lifetime ``[start, min(end, start + deadline)]``
  some domain of the pool was surely healthy (see ``_timeline``), as a share of all
  logical requests;
- *attempts per request*: reported by the client (``FailoverResult.attempts`` or
  ``FailoverError.attempts``); counted at the network layer under the client (every
  client); and what the servers saw (requests received plus lookups, connects and
  handshakes a fault struck), divided by the number of logical requests;
- *attempts on a dead domain*: server side (exact), the requests and connection stages that
  met a fault; network side, the attempts handed to the transport while their host's
  timeline state was not ``up`` (an attempt that waits for a connection or a lookup may
  meet a fault set after it was handed over, so this side counts fewer);
- *counts match*: per host, the client's reported attempts equal the network layer's,
  and the servers saw no more than the network layer sent and no fewer than that minus
  the attempts that died with the connection (dropped by a fault change before the
  server could read them).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_failover import faults
from pytest_failover.simulator import FaultEvent, RecordedRequest

from ._load import Drive, Sample
from ._sides import RID, Call
from ._timeline import Record

__all__ = ["Outcome", "Seen", "max_in_window", "percentile", "summarize"]

# Attempts the server may never have read: the connection went away under them, as each
# counting layer names it (httpx's exceptions; urllib3's reason under requests; aiohttp's),
# or the client cut them in flight (a hedge's loser, cancelled in its task).
LOST_WITH_CONNECTION = frozenset({
    "RemoteProtocolError", "ReadError", "WriteError", "CloseError",  # httpx
    "ProtocolError",  # urllib3: "Connection aborted."
    "ServerDisconnectedError", "ClientOSError",  # aiohttp
    "CancelledError",  # asyncio
})  # fmt: skip


@dataclass
class Seen:
    """What one fake domain saw during one run."""

    requests: list[RecordedRequest]
    early: list[FaultEvent]  # faults that struck at resolve, connect or handshake

    @property
    def attempts(self) -> int:
        return len(self.requests) + len(self.early)

    @property
    def dead(self) -> int:
        """Attempts that met a fault (a request answered by a fault, or an earlier stage)."""
        return len(self.early) + sum(not isinstance(r.fault, faults.Healthy) for r in self.requests)

    def rids(self) -> Counter[str]:
        return Counter(r.headers.get(RID, "") for r in self.requests)


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def max_in_window(times: Iterable[float], width: float) -> int:
    """The most events inside any window ``[t, t + width)``."""
    ordered = sorted(times)
    best = lo = 0
    for hi, t in enumerate(ordered):
        while ordered[lo] <= t - width:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


@dataclass
class Outcome:
    """The figures of one client in one scenario variant."""

    client: str
    requests: int
    ok: int
    failed: int
    gap: int
    gap_share: float
    attempts_reported: float | None
    attempts_network: float
    attempts_server: float
    dead_server: int
    dead_network: int
    p50: float
    p99: float
    statuses: dict[str, int]
    errors: dict[str, int]
    foreign: int  # exceptions that are not the client library's own
    foreign_examples: list[str]
    counts_match: bool
    per_host: dict[str, dict[str, int | None]]
    hung: int
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _error_key(sample: Sample) -> str:
    assert sample.error is not None
    return f"{sample.error}({sample.reason})" if sample.reason else sample.error


def summarize(
    client: str,
    run: Drive,
    calls: Sequence[Call],
    seen: dict[str, Seen],
    record: Record,
    *,
    deadline: float,
    reports_attempts: bool,
) -> Outcome:
    """The figures of one run (see the module doc)."""
    samples = run.samples
    n = len(samples)
    failed = [s for s in samples if s.failed]
    gap = sum(record.any_healthy(s.start, min(s.end, s.start + deadline)) for s in failed)
    reported = Counter(h for s in samples for h in (s.attempts or ()))
    network = Counter(c.host for c in calls)
    lost = Counter(c.host for c in calls if c.error in LOST_WITH_CONNECTION)
    per_host: dict[str, dict[str, int | None]] = {}
    match = True
    for host in sorted(set(seen) | set(network)):
        server = seen[host].attempts if host in seen else 0
        sent = network[host]
        ok = server <= sent <= server + lost[host]
        if reports_attempts:
            ok = ok and reported[host] == sent
        match = match and ok
        per_host[host] = {
            "reported": reported[host] if reports_attempts else None,
            "network": sent,
            "server": server,
            "lost_with_connection": lost[host],
            "dead_server": seen[host].dead if host in seen else 0,
        }
    dead_network = 0
    for call in calls:
        state = record.state_at(call.host, call.at)
        dead_network += state is not None and not state.healthy
    latencies = [s.latency for s in samples]
    odd = [s for s in samples if not s.own_error]
    return Outcome(
        client=client,
        requests=n,
        ok=n - len(failed),
        failed=len(failed),
        gap=gap,
        gap_share=gap / n if n else float("nan"),
        attempts_reported=sum(reported.values()) / n if reports_attempts and n else None,
        attempts_network=len(calls) / n if n else float("nan"),
        attempts_server=sum(s.attempts for s in seen.values()) / n if n else float("nan"),
        dead_server=sum(s.dead for s in seen.values()),
        dead_network=dead_network,
        p50=percentile(latencies, 50),
        p99=percentile(latencies, 99),
        statuses=dict(Counter(str(s.status) for s in samples if s.status is not None).most_common()),
        errors=dict(Counter(_error_key(s) for s in samples if s.error is not None).most_common()),
        foreign=len(odd),
        foreign_examples=[f"{s.rid}: {s.detail}" for s in odd[:5]],
        counts_match=match,
        per_host=per_host,
        hung=run.hung,
        seconds=run.ended - run.started,
    )
