"""Every scenario, every variant, every client side by side: one ``_harness.Report``."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace

from benchmarks import _harness as h
from benchmarks._options import Options

from . import _scenarios as sc
from ._clients import Client, clients
from ._report import Row, scenario_table, targets_table
from ._run import Env, Run, servers

__all__ = ["SCENARIOS", "run_all"]

Variant = tuple[str, Callable[[Env, Client], Run]]


def _cold(state: sc.State, side: str, sizes: sc.Sizes) -> Callable[[Env, Client], Run]:
    def make(env: Env, client: Client) -> Run:
        return sc.cold_burst(env, client, state, sizes=sizes, side=side)

    return make


def _variants(name: str, sizes: sc.Sizes) -> list[Variant]:
    if name == "cold burst":
        return [
            (f"{label} primary, {side} x{sizes.burst_tasks if side == 'async' else sizes.burst_threads}",
             _cold(state, side, sizes))
            for label, state in sc.COLD_STATES.items()
            for side in ("async", "thread")
        ]  # fmt: skip
    if name == "flapping":
        return [(f"{sizes.flap_tasks} tasks + {sizes.flap_threads} threads, {sizes.flap_seconds:g} s",
                 lambda env, c: sc.flapping(env, c, sizes=sizes))]  # fmt: skip
    if name == "failback":
        return [(f"{sizes.failback_tasks} tasks + {sizes.failback_threads} threads",
                 lambda env, c: sc.failback(env, c, sizes=sizes))]  # fmt: skip
    if name == "rolling":
        return [(f"{sizes.rolling_tasks} tasks + {sizes.rolling_threads} threads",
                 lambda env, c: sc.rolling(env, c, sizes=sizes))]  # fmt: skip
    if name == "trickle":
        return [
            (f"async x{sizes.trickle_tasks}", lambda env, c: sc.trickle(env, c, sizes=sizes, side="async")),
            (f"threads x{sizes.trickle_threads}", lambda env, c: sc.trickle(env, c, sizes=sizes, side="thread")),
        ]
    if name == "total outage":
        return [(f"{sizes.outage_tasks} tasks + {sizes.outage_threads} threads, {sizes.outage_seconds:g} s",
                 lambda env, c: sc.total_outage(env, c, sizes=sizes))]  # fmt: skip
    raise KeyError(name)


def _notes(name: str, sizes: sc.Sizes) -> list[str]:
    cd = f"breaker_cooldown={sizes.cooldown:g} s"
    return {
        "cold burst": [
            "A fresh transport per row; the primary refuses connections, fails to resolve (NXDOMAIN) or "
            "answers 503, the backup is healthy; every request fired at once.",
            "Target: 0 user-visible failures.",
        ],
        "flapping": [
            f"Two domains take turns every {sizes.flap_period:g} s: one answers 200 while the other answers "
            "503 or refuses (drawn with a fixed seed); one is healthy at every instant. "
            f"Each worker pauses U(0, {2 * sizes.flap_think:g} s) between requests. Target: gap <= 0.5 %.",
        ],
        "failback": [
            f"Primary refuses for {sizes.failback_dead:g} s, answers 503 while recovering for "
            f"{sizes.failback_recovering:g} s, then is healthy for {sizes.failback_up:g} s; the backup stays "
            f"healthy; {cd}. Requests reaching the recovering primary are counted by the server, per transport "
            "(async tasks share one, threads another), in any window of one cooldown. "
            "Target: at most 1 per cooldown per transport.",
        ],
        "rolling": [
            f"Phases of {sizes.rolling_phase:g} s: A refused; A recovering (503) + B NXDOMAIN; "
            "B recovering + C 503; C recovering; all up. Some domain is up at every instant.",
        ],
        "trickle": [
            f"The primary sends its headers at once, then {sizes.trickle_bytes} body bytes, one every "
            f"{sizes.trickle_interval:g} s (the simulator's `trickle` fault); the backup is healthy. "
            f"Policies have deadline={sizes.trickle_deadline:g} s; httpx-retries has none (httpx's "
            "per-read timeout never fires). Target: at most 100 ms over the deadline.",
        ],
        "total outage": [
            f"Three domains: refused, 503, NXDOMAIN, for {sizes.outage_seconds:g} s. 'Once drained' = "
            f"requests started {sizes.outage_drain:g} s or more into the outage. Target: <= 1.1 attempts "
            "per request once drained.",
        ],
    }[name] + [
        "Attempts per request: as the client reports them (FailoverResult / FailoverError), as counted "
        "at the network layer under the client (an httpx transport under the httpx clients, an HTTPAdapter "
        "under FailoverAdapter, a middleware after FailoverMiddleware), and as the servers saw them (requests + lookups/connects "
        "a fault struck). Attempts on dead domains: what the servers saw meet a fault (exact), and "
        "the attempts handed to the network layer while the timeline had their host down. "
        "Gap: failures while some domain was healthy during the request's lifetime.",
    ]


SCENARIOS = ("cold burst", "flapping", "failback", "rolling", "trickle", "total outage")


def run_all(
    opts: Options,
    *,
    small: bool = False,
    only: Sequence[str] = (),
    client_keys: Sequence[str] = (),
) -> h.Report:
    """Run the chosen scenarios (default: all) for the chosen clients (default: all)."""
    sizes = sc.SMALL if small else sc.FULL
    if opts.long:
        sizes = sizes.longer(2.0)
    if opts.seconds is not None:
        sizes = replace(sizes, flap_seconds=opts.seconds)
    report = h.Report("scenarios-small" if small else "scenarios")
    started = time.monotonic()
    rows: list[Row] = []
    names = [n for n in SCENARIOS if not only or n in only]
    with servers() as fd:
        env = Env(fd)
        for name in names:
            deadline = sizes.trickle_deadline if name == "trickle" else None
            chosen = [c for c in clients(cooldown=sizes.cooldown, deadline=deadline)
                      if not client_keys or c.key in client_keys]  # fmt: skip
            mine: list[Row] = []
            for variant, make in _variants(name, sizes):
                for client in chosen:
                    t0 = time.monotonic()
                    outcome = make(env, client).outcome
                    print(f"... {name} / {variant} / {client.key}: {outcome.requests} requests, "
                          f"{outcome.failed} failed, gap {outcome.gap} ({time.monotonic() - t0:.1f} s)",
                          file=sys.stderr, flush=True)  # fmt: skip
                    mine.append(Row(name, variant, client.key, outcome))
            rows.extend(mine)
            report.tables.append(scenario_table(f"Scenario: {name}", mine, _notes(name, sizes)))
    report.tables.insert(0, targets_table(rows))
    labels = {c.key: c.label for c in clients(cooldown=sizes.cooldown)}
    report.tables[0].notes.append(
        "Clients: " + "; ".join(f"`{k}` = {v}" for k, v in labels.items()) + "."
    )
    report.data = {
        "sizes": asdict(sizes),
        "clients": labels,
        "rows": [
            {"scenario": r.scenario, "variant": r.variant, "client": r.client, **r.outcome.as_dict()}
            for r in rows
        ],
    }
    report.seconds = time.monotonic() - started
    return report
