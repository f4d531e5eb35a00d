"""A plain httpx prober, run in its own process so its CPU and memory can be read alone.

One shared ``httpx.AsyncClient`` (the CA bundle is loaded once) with no keep-alive, so
every probe opens a fresh connection, as blackbox_exporter does. Prints one JSON line:
CPU seconds and wall time of the probing phase only (imports and start-up excluded),
probes run, successes, RSS and peak RSS.

Run: ``python -m benchmarks._prober --targets 127.0.0.1:8080,... --probes 1000``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time

import httpx

from benchmarks._drive import burst, steady
from benchmarks._harness import proc_peak_rss_bytes, proc_rss_bytes


async def _main(args: argparse.Namespace) -> dict[str, float]:
    targets = [f"http://{t}/health" for t in args.targets.split(",")]
    limits = httpx.Limits(max_keepalive_connections=0, max_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=5.0) as client:

        async def probe(i: int) -> bool:
            try:
                response = await client.get(targets[i % len(targets)])
            except httpx.HTTPError:
                return False
            return response.status_code == 200

        await probe(0)  # warm the imports that the first request triggers
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.monotonic()
        if args.rate:
            done, ok = await steady(probe, rate=args.rate, seconds=args.seconds, max_in_flight=200)
        else:
            done, ok = await burst(probe, count=args.probes, concurrency=args.concurrency,
                                   max_seconds=args.seconds)
        wall = time.monotonic() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    import os

    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {"cpu_s": cpu, "wall_s": wall, "probes": done, "ok": ok,
            "rss": proc_rss_bytes(os.getpid()), "peak_rss": proc_peak_rss_bytes(os.getpid())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", required=True, help="comma-separated host:port list")
    parser.add_argument("--probes", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--rate", type=float, default=0.0, help="probes per second (steady mode)")
    parser.add_argument("--seconds", type=float, default=60.0, help="time bound")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(_main(args))), flush=True)


if __name__ == "__main__":
    main()
