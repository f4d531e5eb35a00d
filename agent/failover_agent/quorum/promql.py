"""The PromQL of the quorum: which locations have seen a domain fail for ``for_seconds``.

A location *votes* a domain down when, in Prometheus, its agent's
``failover_probe_success`` for that domain (grouped by pool, ``url_scheme``,
``server_address``, ``server_port`` and ``probe_location``: extra labels such as ``job``,
``instance`` or two agents in one location collapse, and any one of them seeing the domain
up withdraws the location's vote) meets all three conditions::

    max_over_time(...[Fs]) == 0     every sample of the last F seconds failed (gaps inside
                                    the window do not matter: a range holds samples only)
    ... offset Fs == 0              and the sample before the window failed too, so a
                                    location that just started, or a fault younger than F
                                    seconds, does not vote yet
    ... == 0 (instant)              and the series is current: an agent that stops
                                    reporting is marked stale by Prometheus at its first
                                    failed scrape and stops voting at once, instead of
                                    voting for F more seconds from its last samples

:func:`location_votes` is the query the publisher runs (one series per vote);
:func:`quorum_decision` is the same rule as Grafana can draw it (1 when at least
``min_locations`` locations vote, 0 otherwise, for every domain still reported).
"""

from __future__ import annotations

from pytest_failover import semconv
from pytest_failover.semconv import prometheus_label

__all__ = [
    "DOMAIN_LABELS",
    "LOCATION_LABEL",
    "PROBE_SUCCESS",
    "VOTE_LABELS",
    "location_votes",
    "quorum_decision",
]

PROBE_SUCCESS = semconv.METRICS[semconv.FAILOVER_PROBE_SUCCESS].prometheus
"""``failover_probe_success``: 1 if a location's last pinned probe of the domain succeeded."""
DOMAIN_LABELS: tuple[str, ...] = tuple(
    prometheus_label(key)
    for key in (semconv.FAILOVER_POOL, semconv.URL_SCHEME, semconv.SERVER_ADDRESS, semconv.SERVER_PORT)
)
"""What names a domain of a pool in the agent's series: the pool and the origin."""
LOCATION_LABEL = prometheus_label(semconv.PROBE_LOCATION)
VOTE_LABELS: tuple[str, ...] = (*DOMAIN_LABELS, LOCATION_LABEL)


def _whole(for_seconds: int | str) -> str:
    if isinstance(for_seconds, int) and not isinstance(for_seconds, bool):
        if for_seconds < 1:
            raise ValueError(f"expected at least 1, got {for_seconds}")
        return str(for_seconds)
    if isinstance(for_seconds, str) and for_seconds.startswith("$"):  # a Grafana variable
        return "${" + for_seconds[1:].strip("{}") + "}"
    raise TypeError(f"expected a whole number or a Grafana variable, got {for_seconds!r}")


def _conditions(for_seconds: int | str, matchers: str) -> tuple[str, str, str]:
    f = _whole(for_seconds)
    by = ", ".join(VOTE_LABELS)
    series = f"{PROBE_SUCCESS}{{{matchers}}}" if matchers else PROBE_SUCCESS
    return (
        f"max by ({by}) (max_over_time({series}[{f}s]))",
        f"max by ({by}) ({series} offset {f}s)",
        f"max by ({by}) ({series})",
    )


def location_votes(for_seconds: int | str, matchers: str = "", *, as_bool: bool = False) -> str:
    """One series per (domain, location) that has seen the domain fail for ``for_seconds``.

    ``matchers`` are extra label matchers (``failover_pool=~"$pool"``). With ``as_bool``
    every (domain, location) still reported has a series: 1 for a vote, 0 otherwise (a
    series without a sample ``for_seconds`` ago, or none within the lookback, is a 0).
    """
    window, before, now = _conditions(for_seconds, matchers)
    if as_bool:
        return f"({window} == bool 0) * (({before} == bool 0) or ({now} * 0)) * ({now} == bool 0)"
    return "\n  and ".join(f"{part} == 0" for part in (window, before, now))


def quorum_decision(for_seconds: int | str, min_locations: int | str, matchers: str = "") -> str:
    """1 for every domain at least ``min_locations`` locations vote down, 0 for the others."""
    least = min_locations if isinstance(min_locations, int) else _whole(min_locations)
    by = ", ".join(DOMAIN_LABELS)
    return f"sum by ({by}) ({location_votes(for_seconds, matchers, as_bool=True)}) >= bool {least}"
