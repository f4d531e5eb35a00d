"""Benchmark 1: cost per request on the happy path (a healthy primary, keep-alive).

Variants, all against the same fast loopback server in another process, each with
its own ``httpx.Client`` (built once, outside the timing):

- bare ``httpx.Client``
- ``httpx_retries.RetryTransport`` (default ``Retry()``)
- ``FailoverTransport`` with no OpenTelemetry SDK installed (the API's no-op providers)
- the same with ``Policy(hedging=Hedging(delay=1.0))``: hedging configured, never triggered
- the same with the request's URL on another domain of the pool (``127.0.0.2``, never
  connected to): every request is moved to the serving one, as once a pool has failed over
- bare httpx and ``FailoverTransport`` on the same answer sent chunked (no
  ``Content-Length``: the transport reads it chunk by chunk, up to its limit)
- ``opentelemetry-instrumentation-httpx`` (``instrument_client``) with the SDK:
  ``TracerProvider`` + ``BatchSpanProcessor`` and ``MeterProvider`` +
  ``PeriodicExportingMetricReader``, exporting to counting exporters
- ``FailoverTransport`` with the same SDK set-up (its own providers)

The SDK variants' timed region includes flushing their span and metric pipelines at
the end of each round, so the export work is charged to whoever produced it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

import httpx

from benchmarks import _harness as h
from benchmarks._options import Options

NAME = "happy_path"
BASELINE = "bare httpx.Client"
HEDGING = "FailoverTransport, Hedging(delay=1.0), no SDK"
MOVED = "FailoverTransport, URL on another domain (moved), no SDK"
CHUNKED_BARE = "bare httpx.Client, chunked answer"
CHUNKED = "FailoverTransport, chunked answer, no SDK"


def _failover() -> Any:
    try:
        import pytest_failover as pf

        return pf if hasattr(pf, "FailoverTransport") else None
    except ImportError:
        return None


def run(opts: Options) -> h.Report:
    # The official instrumentation emits the stable HTTP conventions, like ours.
    os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "http")
    from httpx_retries import RetryTransport
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    from benchmarks._otel import make_sdk

    report = h.Report(NAME)
    started = time.monotonic()
    pf = _failover()
    per_round = opts.pick(20, 20)
    rounds = opts.rounds_or(3000, 30000)
    max_seconds = opts.seconds_or(35, 300)

    with h.server() as srv:
        url = srv.url() + "/v1/ping"
        backup = f"http://127.0.0.1:{h.closed_port()}"
        clients: dict[str, httpx.Client] = {}
        urls: dict[str, str] = {}  # a variant's own URL, if not ``url``
        sdks: dict[str, Any] = {}
        spans_expected: dict[str, int] = {}

        clients[BASELINE] = httpx.Client()
        clients["httpx-retries RetryTransport"] = httpx.Client(transport=RetryTransport())
        if pf is not None:
            pool = pf.Pool("bench", [srv.url(), backup])
            clients["FailoverTransport, no SDK"] = httpx.Client(
                transport=pf.FailoverTransport([pool])
            )
            # issue #11: hedging configured, never triggered (a 1 s delay on 1 ms answers)
            clients[HEDGING] = httpx.Client(
                transport=pf.FailoverTransport([pool], pf.Policy(hedging=pf.Hedging(delay=1.0)))
            )
            # served by the first domain, asked of the second: what a failed-over pool pays
            other = srv.url().replace("127.0.0.1", "127.0.0.2")
            clients[MOVED] = httpx.Client(
                transport=pf.FailoverTransport([pf.Pool("bench", [srv.url(), other])])
            )
            urls[MOVED] = other + "/v1/ping"
            # the same answer without a Content-Length, as servers that stream send it
            clients[CHUNKED_BARE] = httpx.Client()
            clients[CHUNKED] = httpx.Client(transport=pf.FailoverTransport([pool]))
            urls[CHUNKED_BARE] = urls[CHUNKED] = srv.url() + "/v1/chunked"
        otel_name = "opentelemetry-instrumentation-httpx + SDK"
        sdks[otel_name] = make_sdk()
        otel_client = httpx.Client()
        HTTPXClientInstrumentor.instrument_client(
            otel_client,
            tracer_provider=sdks[otel_name].tracer_provider,
            meter_provider=sdks[otel_name].meter_provider,
        )
        clients[otel_name] = otel_client
        if pf is not None:
            ours = "FailoverTransport + SDK"
            sdks[ours] = make_sdk()
            pool = pf.Pool("bench", [srv.url(), backup])
            clients[ours] = httpx.Client(
                transport=pf.FailoverTransport(
                    [pool],
                    tracer_provider=sdks[ours].tracer_provider,
                    meter_provider=sdks[ours].meter_provider,
                )
            )

        requests_made: dict[str, int] = dict.fromkeys(clients, 0)

        def runner(name: str) -> Callable[[int], None]:
            client = clients[name]
            sdk = sdks.get(name)
            target = urls.get(name, url)

            def go(n: int) -> None:
                get = client.get
                for _ in range(n):
                    response = get(target)
                    if response.status_code != 200:
                        raise RuntimeError(f"{name}: status {response.status_code}")
                requests_made[name] += n
                if sdk is not None:
                    sdk.flush()

            return go

        timings = h.interleave(
            {name: runner(name) for name in clients},
            rounds=rounds, per_round=per_round, max_seconds=max_seconds,
        )
        for name, sdk in sdks.items():
            sdk.flush()
            spans_expected[name] = sdk.spans.count
        timed_requests = dict(requests_made)

        profile_text = ""
        if opts.profile and pf is not None:
            from benchmarks._profile import top

            for name in ("FailoverTransport, no SDK", "FailoverTransport + SDK"):
                go = runner(name)

                def thousands(go: Callable[[int], None] = go) -> None:
                    go(2000)

                profile_text += f"\n#### cProfile: {name}, 2000 requests\n```\n"
                profile_text += top(thousands) + "```\n"

        for client in clients.values():
            client.close()
        for sdk in sdks.values():
            sdk.shutdown()

    inproc, inproc_data = _in_process(pf, opts, make_sdk, RetryTransport, HTTPXClientInstrumentor)

    wall, cpu = timings.wall, timings.cpu
    base, base_cpu = wall[BASELINE], cpu[BASELINE]
    table = h.Table(
        "Happy path: cost per request (keep-alive GET, loopback server in another process)",
        ["variant", "wall per request (median)", "**wall ratio vs bare** (paired: median, p25 - p75)",
         "ratio of medians", "client CPU per request (median)", "CPU ratio vs bare (paired)", "spans per request"],
    )
    data: dict[str, Any] = {"per_round": per_round, "rounds": len(base)}
    base_median = h.Stats.of(base).median
    base_cpu_median = h.Stats.of(base_cpu).median
    for name in wall:
        st, cst = h.Stats.of(wall[name]), h.Stats.of(cpu[name])
        pr = h.paired_ratios(wall[name], base)
        cpr = h.paired_ratios(cpu[name], base_cpu)
        ratio = st.median / base_median
        spans = spans_expected.get(name)
        per_req = f"{spans / timed_requests[name]:.2f}" if spans is not None and timed_requests[name] else "0 (no SDK)"
        table.rows.append([
            name, h.us(st.median), f"**{pr.median:.3f}x** ({pr.p25:.2f} - {pr.p75:.2f})", f"{ratio:.3f}x",
            h.us(cst.median), f"{cpr.median:.3f}x", per_req,
        ])
        data[name] = {"wall_median_s": st.median, "wall_ratio_of_medians": ratio,
                      "wall_paired_ratio": pr.median, "wall_paired_p25": pr.p25, "wall_paired_p75": pr.p75,
                      "cpu_median_s": cst.median, "cpu_paired_ratio": cpr.median, "cpu_ratio_of_medians": cst.median / base_cpu_median,
                      "wall_samples_s": wall[name], "cpu_samples_s": cpu[name]}
    if CHUNKED in wall:
        chunked = h.paired_ratios(wall[CHUNKED], wall[CHUNKED_BARE])
        table.notes.append(
            f"Chunked answers (no Content-Length), FailoverTransport against bare httpx on the same answer: "
            f"**{chunked.median:.3f}x** paired ({chunked.p25:.2f} - {chunked.p75:.2f})."
        )
        data["chunked_paired_ratio"] = chunked.median
    if pf is None:
        table.notes.append("FailoverTransport rows missing: `pytest_failover.FailoverTransport` is not importable yet.")
    table.notes.append(
        f"{len(base)} interleaved rounds of {per_round} GETs per variant (rotated order); a round's figure is its mean, "
        "the table gives the median over rounds; the paired ratio is the median over rounds of (variant / bare in the "
        "same round), the figure least disturbed by other load. "
        "Client CPU is this process's CPU time (all threads, so the span export thread counts); "
        "it is far less disturbed by other load than wall time, and its ratio is larger because the "
        "server's time is not in it."
    )
    table.notes.append(
        "Targets: FailoverTransport without SDK <= 1.05x bare, with hedging configured too (issue #11); "
        "with SDK <= the official instrumentation's cost."
    )
    table.notes.append(
        "The SDK rows include flushing their BatchSpanProcessor and metric reader at the end of each round; "
        "the official instrumentation runs with OTEL_SEMCONV_STABILITY_OPT_IN=http (stable conventions, as ours)."
    )
    report.tables.append(table)
    report.tables.append(inproc)
    if profile_text:
        report.extra.append(profile_text)
    data["in_process"] = inproc_data
    if "against" in inproc_data:  # (where ``--processes`` looks for it, in any benchmark)
        data["against"] = inproc_data["against"]
    report.data = data
    report.seconds = time.monotonic() - started
    return report


class InProcess(httpx.BaseTransport):
    """An inner transport that answers at once, without a socket: what is left is the
    wrapper's own cost."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"{}", request=request)


class Canned(httpx.BaseTransport):
    """An inner transport that returns one response, built once: called back to back, a
    transport over it runs nothing but its own work (``_back_to_back``)."""

    def __init__(self) -> None:
        self.response = httpx.Response(200, content=b"{}")

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self.response


def _back_to_back(pf: Any, old: Any, opts: Options) -> dict[str, float]:
    """The CPU a FailoverTransport adds to ``handle_request`` called back to back over
    :class:`Canned` (and ``old``'s, the package at ``--against``), against the inner
    transport's own call: the median of per-round differences, in seconds. Nothing else
    runs between two requests, so the library's code and objects stay in the processor's
    caches, where between httpx.Client's own work (the table's figures) they do not."""
    with httpx.Client() as client:  # (a request as a client builds it: its timeouts set)
        request = client.build_request("GET", "http://127.0.0.1:9/v1/ping")
    transports: dict[str, Any] = {"bare": Canned()}
    for name, package in (("ours", pf), ("theirs", old)):
        if package is not None:
            pool = package.Pool("bench", ["http://127.0.0.1:9", "http://127.0.0.1:10"])
            transports[name] = package.FailoverTransport([pool], transport=Canned())

    def runner(transport: Any) -> Callable[[int], None]:
        def go(n: int) -> None:
            handle = transport.handle_request
            for _ in range(n):
                handle(request)
        return go

    samples = h.interleave({k: runner(t) for k, t in transports.items()}, rounds=opts.rounds_or(100, 1000),
                           per_round=500, max_seconds=opts.seconds_or(4, 40))
    for transport in transports.values():
        transport.close()
    bare = samples.cpu["bare"]
    return {k: h.Stats.of([a - b for a, b in zip(samples.cpu[k], bare, strict=False)]).median
            for k in transports if k != "bare"}


def _in_process(pf: Any, opts: Options, make_sdk: Any, retry_transport: Any, instrumentor: Any) -> tuple[h.Table, dict[str, Any]]:
    """Cost added per request by each wrapper, with an in-process inner transport (low noise)."""
    # One inner transport per client: the official instrumentation patches the
    # ``handle_request`` of the client's transport *instance*, so a shared one would
    # instrument every client.
    url = "http://127.0.0.1:9/v1/ping"
    clients: dict[str, httpx.Client] = {"bare httpx.Client": httpx.Client(transport=InProcess())}
    clients["httpx-retries RetryTransport"] = httpx.Client(transport=retry_transport(transport=InProcess()))
    sdks = []
    if pf is not None:
        pool = pf.Pool("bench", ["http://127.0.0.1:9", "http://127.0.0.1:10"])
        clients["FailoverTransport, no SDK"] = httpx.Client(
            transport=pf.FailoverTransport([pool], transport=InProcess()))
    theirs = commit = old = None
    if pf is not None and opts.against is not None:  # the package at another commit, beside this one
        from benchmarks._against import commit_of, staged

        old, commit = staged(opts.against), commit_of(opts.against)
        theirs = f"FailoverTransport at {commit}, no SDK"
        clients[theirs] = httpx.Client(transport=old.FailoverTransport(
            [old.Pool("bench", ["http://127.0.0.1:9", "http://127.0.0.1:10"])], transport=InProcess()))
    sdk = make_sdk()
    sdks.append(sdk)
    otel = httpx.Client(transport=InProcess())
    instrumentor.instrument_client(otel, tracer_provider=sdk.tracer_provider, meter_provider=sdk.meter_provider)
    clients["opentelemetry-instrumentation-httpx + SDK"] = otel
    if pf is not None:
        sdk2 = make_sdk()
        sdks.append(sdk2)
        pool = pf.Pool("bench", ["http://127.0.0.1:9", "http://127.0.0.1:10"])
        clients["FailoverTransport + SDK"] = httpx.Client(transport=pf.FailoverTransport(
            [pool], transport=InProcess(), tracer_provider=sdk2.tracer_provider,
            meter_provider=sdk2.meter_provider))

    made: dict[int, int] = {}

    own_sdk = {"opentelemetry-instrumentation-httpx + SDK": sdk}
    if pf is not None:
        own_sdk["FailoverTransport + SDK"] = sdk2

    def runner(name: str, client: httpx.Client) -> Callable[[int], None]:
        mine = own_sdk.get(name)

        def go(n: int) -> None:
            get = client.get
            for _ in range(n):
                get(url)
            made[id(client)] = made.get(id(client), 0) + n
            if mine is not None:  # its export work is charged to it
                mine.flush()
        return go

    samples = h.interleave({k: runner(k, c) for k, c in clients.items()},
                           rounds=opts.rounds_or(3000, 30000), per_round=opts.pick(50, 50),
                           max_seconds=opts.seconds_or(12, 120))
    for s in sdks:
        s.flush()
    span_rate = {
        "opentelemetry-instrumentation-httpx + SDK": sdk.spans.count / max(1, made.get(id(otel), 0)),
    }
    if pf is not None:
        span_rate["FailoverTransport + SDK"] = sdk2.spans.count / max(1, made.get(id(clients["FailoverTransport + SDK"]), 0))
    for c in clients.values():
        c.close()
    for s in sdks:
        s.shutdown()
    bare_cpu = samples.cpu["bare httpx.Client"]
    table = h.Table(
        "Wrapper cost alone: the same clients over an in-process inner transport (no socket)",
        ["variant", "CPU per request (median)", "**added vs bare** (paired: median of per-round differences)",
         "wall per request (median)", "spans per request"],
    )
    data: dict[str, Any] = {"rounds": len(bare_cpu)}
    for name, values in samples.cpu.items():
        st = h.Stats.of(values)
        wst = h.Stats.of(samples.wall[name])
        added = h.Stats.of([a - b for a, b in zip(values, bare_cpu, strict=False)])
        table.rows.append([name, f"{st.median * 1e6:.1f} µs", f"**{added.median * 1e6:+.1f} µs**",
                           f"{wst.median * 1e6:.1f} µs",
                           f"{span_rate[name]:.2f}" if name in span_rate else "0 (no SDK)"])
        data[name] = {"cpu_median_s": st.median, "added_s": added.median, "wall_median_s": wst.median}
    if theirs is not None:  # what this tree adds to a request, as a share of what the other adds
        ours_added, theirs_added = data["FailoverTransport, no SDK"]["added_s"], data[theirs]["added_s"]
        share = ours_added / theirs_added if theirs_added > 0 else math.nan  # (nan: that tree added nothing)
        table.notes.append(
            f"Against {commit} (`--against {opts.against}`), in the same rounds: this tree's FailoverTransport adds "
            f"**{share:.2f}** of what that tree's adds to a request ({ours_added * 1e6:+.1f} µs against "
            f"{theirs_added * 1e6:+.1f} µs of CPU, each the median of its per-round differences from bare)."
        )
        data["against"] = {"commit": commit, "added_share": share}
    if pf is not None:
        alone = _back_to_back(pf, old, opts)
        data["back_to_back_added_s"] = alone
        line = (f"Back to back (the transport's `handle_request` alone, over an inner transport that returns one "
                f"prebuilt response, nothing of httpx.Client between two calls): this tree adds "
                f"**{alone['ours'] * 1e6:+.1f} µs** of CPU")
        if "theirs" in alone:
            hot = alone["ours"] / alone["theirs"] if alone["theirs"] > 0 else math.nan
            line += f", {commit}'s {alone['theirs'] * 1e6:+.1f} µs: a share of **{hot:.2f}**"
            data["against"]["back_to_back_share"] = hot
        table.notes.append(line + ". Between httpx's own work, as in the rows above, the library's code and objects "
                           "are out of the processor's caches again at each request: that difference is memory, "
                           "which opcode and instruction counts do not see.")
    table.notes.append(
        f"{len(bare_cpu)} interleaved rounds of 50 GETs per variant. Every client here also pays httpx.Client's own "
        "per-request work; the inner transport builds an httpx.Response and nothing else. The SDK rows end each "
        "round with a flush of their own span and metric pipelines, inside their timing."
    )
    table.notes.append(
        "Read with the table above: the added microseconds here, divided by the bare loopback request time "
        "there, is the ratio the wrapper can reach on a quiet machine."
    )
    return table, data
