"""Benchmark: httpx2 and the official OpenAI SDK on the happy path (a healthy primary, keep-alive).

Two pairs, against the same fast loopback server in another process, interleaved round by
round, each client built once outside the timing:

- bare ``httpx2.Client`` and ``httpx2.Client(transport=pytest_failover.httpx2.FailoverTransport(...))``:
  a keep-alive GET, as the httpx pair of ``happy_path``;
- ``openai.OpenAI(http_client=httpx2.Client(), max_retries=0)`` and the same with the failover
  transport (the recipe of docs/llm-sdks.md): one ``chat.completions.create`` per operation,
  a POST whose short ``chat.completion`` answer the SDK parses.

Each figure is the median over rounds; a ratio is paired (variant / its bare client in the
same round). Targets (issue 28): the httpx2 pair as the httpx one; the SDK call at most
1.02x the bare SDK: the SDK's own work per call (building the request, validating the
answer) dwarfs what the transport adds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from benchmarks import _harness as h
from benchmarks._options import Options

NAME = "sdks"
BARE_HTTPX2 = "bare httpx2.Client"
FAILOVER_HTTPX2 = "httpx2.Client + FailoverTransport"
BARE_OPENAI = "bare openai.OpenAI (httpx2)"
FAILOVER_OPENAI = "openai.OpenAI + FailoverTransport"
#: Each variant and the bare client its paired ratio is taken against.
PAIRS = {FAILOVER_HTTPX2: BARE_HTTPX2, FAILOVER_OPENAI: BARE_OPENAI}
MESSAGES: list[Any] = [{"role": "user", "content": "Say hello."}]


def run(opts: Options) -> h.Report:
    import httpx2
    import openai

    from pytest_failover import Pool
    from pytest_failover.httpx2 import FailoverTransport

    report = h.Report(NAME)
    started = time.monotonic()
    per_round = opts.pick(10, 10)
    rounds = opts.rounds_or(1500, 15000)
    max_seconds = opts.seconds_or(40, 300)

    with h.server() as srv:
        url = srv.url() + "/v1/ping"
        pool = Pool("bench", [srv.url(), f"http://127.0.0.1:{h.closed_port()}"])
        clients = {
            BARE_HTTPX2: httpx2.Client(),
            FAILOVER_HTTPX2: httpx2.Client(transport=FailoverTransport([pool])),
        }
        sdks = {
            name: openai.OpenAI(
                api_key="bench", base_url=srv.url() + "/v1", max_retries=0, http_client=client
            )
            for name, client in (
                (BARE_OPENAI, httpx2.Client()),
                (FAILOVER_OPENAI, httpx2.Client(transport=FailoverTransport([pool]))),
            )
        }

        def get(client: httpx2.Client) -> Callable[[int], None]:
            def go(n: int) -> None:
                send = client.get
                for _ in range(n):
                    if send(url).status_code != 200:
                        raise RuntimeError("not 200")

            return go

        def complete(sdk: openai.OpenAI) -> Callable[[int], None]:
            def go(n: int) -> None:
                create = sdk.chat.completions.create
                for _ in range(n):
                    if create(model="bench", messages=MESSAGES).choices[0].message.content != "Hello.":
                        raise RuntimeError("not the completion")

            return go

        variants: dict[str, Callable[[int], None]] = {k: get(c) for k, c in clients.items()}
        variants.update({k: complete(s) for k, s in sdks.items()})
        timings = h.interleave(variants, rounds=rounds, per_round=per_round, max_seconds=max_seconds)
        for client in clients.values():
            client.close()
        for sdk in sdks.values():
            sdk.close()

    table = h.Table(
        "httpx2 and the OpenAI SDK on the happy path: cost per operation (keep-alive, loopback server in another process)",
        ["variant", "wall per operation (median)", "**wall ratio vs its bare client** (paired: median, p25 - p75)",
         "added per operation (median of paired differences)", "client CPU per operation (median)",
         "CPU ratio vs its bare client (paired)"],
    )  # fmt: skip
    wall, cpu = timings.wall, timings.cpu
    data: dict[str, Any] = {"per_round": per_round, "rounds": len(wall[BARE_HTTPX2])}
    for name in variants:
        st, cst = h.Stats.of(wall[name]), h.Stats.of(cpu[name])
        entry: dict[str, Any] = {"wall_median_s": st.median, "cpu_median_s": cst.median,
                                 "wall_samples_s": wall[name], "cpu_samples_s": cpu[name]}  # fmt: skip
        bare = PAIRS.get(name)
        if bare is None:
            table.rows.append([name, h.us(st.median), "1 (baseline)", "-", h.us(cst.median), "-"])
        else:
            ratio = h.paired_ratios(wall[name], wall[bare])
            cpu_ratio = h.paired_ratios(cpu[name], cpu[bare])
            added = h.Stats.of([a - b for a, b in zip(wall[name], wall[bare], strict=False)])
            table.rows.append([name, h.us(st.median), f"**{ratio.median:.3f}x** ({ratio.p25:.2f} - {ratio.p75:.2f})",
                               h.us(added.median), h.us(cst.median), f"{cpu_ratio.median:.3f}x"])  # fmt: skip
            entry.update(wall_paired_ratio=ratio.median, wall_paired_p25=ratio.p25,
                         wall_paired_p75=ratio.p75, added_median_s=added.median, cpu_paired_ratio=cpu_ratio.median)  # fmt: skip
        data[name] = entry
    table.notes.append(
        f"{data['rounds']} interleaved rounds of {per_round} operations per variant (rotated order); the paired "
        "ratio is the median over rounds of (variant / its bare client in the same round). No OpenTelemetry SDK: "
        "the API's no-op providers. The SDK pair: `max_retries=0`, as docs/llm-sdks.md sets it."
    )
    table.notes.append(
        "Targets (issue 28): httpx2 + FailoverTransport as httpx + FailoverTransport (happy_path); the OpenAI "
        "call at most 1.02x the bare SDK."
    )
    report.tables.append(table)
    report.data = data
    report.seconds = time.monotonic() - started
    return report
