"""Benchmark 5: CPU time and memory per probe, and 1,000 domains at a 15 s interval.

Three probers hit the same loopback targets (the fast server, one port per target),
each with one fresh connection per probe:

- Debian's ``prometheus-blackbox-exporter`` (config written to a temp dir, ``/probe``
  requests driven from this process over keep-alive; its CPU read from /proc, so its
  figure includes serving ``/probe`` and rendering the metrics, as a Prometheus scrape
  would cost it);
- a plain httpx prober (``benchmarks._prober``, its own process, probing phase only);
- ``failover-agent run CONFIG`` (its own process, CPU and RSS read from /proc; every
  probe it makes is counted by the target server).

Part A, throughput: a burst of probes at a fixed concurrency -> CPU per probe.
Part B, steady load: the 1,000-domain, 15 s-interval shape (66.7 probes/s) for a bounded
time -> CPU% of one core and RSS, and the agent's scrape: size, series, and how much of it
is the agent's own metrics versus the failover client's (from the pool probes), told apart
by metric name (:data:`pytest_failover.semconv.METRICS` gives each its scope: /metrics has
no ``otel_scope_*`` labels by default). Also the agent on 2 domains: its RSS floor (the
interpreter and the libraries it imports).

Part C, the ``/metrics`` renderer: the agent's hand-written reader
(``failover_agent.prometheus_text``) against the official OpenTelemetry Prometheus exporter
(``opentelemetry-exporter-prometheus`` + ``prometheus_client.generate_latest``), both on one
MeterProvider holding the agent metrics of 1,000 domains, in this process: CPU per render,
bytes, and the peak of Python allocations during a render.

Part D, the RSS floor: a fresh interpreter imports what the agent imports, group by group in
the agent's order, reading its RSS after each; then what the imports the agent dropped
(aiohttp's web server, httpx's command line, httpcore) would add.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx

from benchmarks import _harness as h
from benchmarks._drive import burst, steady
from benchmarks._options import Options
from pytest_failover import semconv

NAME = "agent"
_PROBE_SUCCESS_SERIES = semconv.METRICS[semconv.FAILOVER_PROBE_SUCCESS].prometheus + "{"
_SCOPES = {sample: m.scope for m in semconv.METRICS.values() for sample in m.samples}
"""Prometheus series name -> the instrumentation scope of its metric."""
BLACKBOX = "prometheus-blackbox-exporter"
BLACKBOX_CONFIG = """\
modules:
  http_2xx:
    prober: http
    timeout: 5s
    http:
      method: GET
      valid_status_codes: [200]
      preferred_ip_protocol: ip4
      ip_protocol_fallback: false
"""


# ---------------------------------------------------------------- blackbox_exporter


def _wait_http(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up within {seconds} s")


def run_blackbox(targets: list[str], *, probes: int, concurrency: int, rate: float,
                 seconds: float) -> dict[str, Any] | None:
    """Drive blackbox_exporter; None if it is not installed."""
    exe = shutil.which(BLACKBOX)
    if exe is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "blackbox.yml"
        config.write_text(BLACKBOX_CONFIG)
        port = h.closed_port()
        proc = subprocess.Popen(
            [exe, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{port}",
             "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_http(f"{base}/-/healthy", 10)

            async def drive(mode: str) -> tuple[int, int]:
                limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
                async with httpx.AsyncClient(base_url=base, limits=limits, timeout=10) as client:

                    async def probe(i: int) -> bool:
                        target = f"http://{targets[i % len(targets)]}/health"
                        r = await client.get("/probe", params={"module": "http_2xx", "target": target})
                        return "\nprobe_success 1" in r.text

                    await burst(probe, count=20, concurrency=2, max_seconds=5)  # warm-up
                    if mode == "burst":
                        return await burst(probe, count=probes, concurrency=concurrency,
                                           max_seconds=seconds)
                    return await steady(probe, rate=rate, seconds=seconds, max_in_flight=200)

            out: dict[str, Any] = {}
            for mode in ("burst", "steady"):
                if mode == "steady" and not rate:
                    continue
                cpu0 = h.proc_cpu_seconds(proc.pid)
                t0 = time.monotonic()
                done, ok = asyncio.run(drive(mode))
                out[mode] = {"cpu_s": h.proc_cpu_seconds(proc.pid) - cpu0,
                             "wall_s": time.monotonic() - t0, "probes": done, "ok": ok,
                             "rss": h.proc_rss_bytes(proc.pid),
                             "peak_rss": h.proc_peak_rss_bytes(proc.pid)}
            return out
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


# ---------------------------------------------------------------- plain httpx prober


def run_httpx_prober(targets: list[str], *, probes: int, concurrency: int, rate: float,
                     seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in ("burst", "steady"):
        if mode == "steady" and not rate:
            continue
        args = [sys.executable, "-m", "benchmarks._prober", "--targets", ",".join(targets),
                "--seconds", str(seconds)]
        if mode == "burst":
            args += ["--probes", str(probes), "--concurrency", str(concurrency)]
        else:
            args += ["--rate", str(rate)]
        done = subprocess.run(args, cwd=h.ROOT, capture_output=True, text=True,
                              timeout=seconds + 60, check=True)
        out[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


# ---------------------------------------------------------------- failover-agent


def _agent_exe() -> str | None:
    exe = Path(sys.executable).parent / "failover-agent"
    if not exe.exists():
        return None
    try:
        import failover_agent.cli  # noqa: F401  # the console script's target must import
    except ImportError:
        return None
    return str(exe)


def _timed_get(url: str) -> tuple[str, float]:
    t0 = time.monotonic()
    text = httpx.get(url, timeout=30).text
    return text, time.monotonic() - t0


def agent_config(targets: list[str], *, interval: float, listen: str, readiness: bool,
                 otlp: str | None = None) -> str:
    """An ``agent.toml``: pools of two consecutive targets (primary, backup); ``otlp``: an
    OTLP/HTTP endpoint for metrics and spans."""
    lines = ['location = "bench"', "", "[exporters.prometheus]", f'listen = "{listen}"', ""]
    if otlp is not None:
        lines += ["[exporters.otlp]", f'endpoint = "{otlp}"', ""]
    for i in range(0, len(targets) - 1, 2):
        lines += [
            "[[pools]]",
            f'name = "p{i // 2:04d}"',
            f'domains = ["http://{targets[i]}", "http://{targets[i + 1]}"]',
            "[pools.probe]",
            'path = "/health"',
            f"interval = {interval}",
            f"timeout = {min(5.0, interval)}",
            "[pools.readiness]",
            f"enabled = {'true' if readiness else 'false'}",
            "",
        ]
    return "\n".join(lines)


class _OtlpSink(http.server.BaseHTTPRequestHandler):
    """Accepts every OTLP/HTTP export (200, body read and dropped) and counts them."""

    posts = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        type(self).posts += 1
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _otlp_sink() -> Iterator[tuple[str, type[_OtlpSink]]]:
    """A loopback OTLP/HTTP receiver: its endpoint and its handler class (``posts``)."""
    handler = type("Sink", (_OtlpSink,), {"posts": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def run_agent(targets: list[str], srv: h.Server, *, interval: float, seconds: float,
              settle: float = 5.0, readiness: bool = False, otlp: bool = False) -> dict[str, Any] | None:
    """Run ``failover-agent run`` on ``targets`` for ``seconds`` once it is up; None if absent.

    CPU and RSS come from /proc; the probes it sent are counted by the target server.
    ``/metrics`` is scraped every 15 s, as Prometheus would. ``otlp``: metrics and spans also
    go over OTLP/HTTP to a loopback receiver that drops them."""
    exe = _agent_exe()
    if exe is None:
        return None
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        endpoint, sink = stack.enter_context(_otlp_sink()) if otlp else (None, None)
        port = h.closed_port()
        config = Path(tmp) / "agent.toml"
        config.write_text(agent_config(targets, interval=interval, listen=f"127.0.0.1:{port}",
                                       readiness=readiness, otlp=endpoint))
        log = (Path(tmp) / "agent.log").open("w")
        proc = subprocess.Popen([exe, "run", "--config", str(config), "--plain", "--log-level", "WARNING"],
                                stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
        try:
            base = f"http://127.0.0.1:{port}"
            t_up = time.monotonic()
            _wait_http(f"{base}/healthz", 180)
            startup_s = time.monotonic() - t_up
            startup_cpu = h.proc_cpu_seconds(proc.pid)
            time.sleep(settle)  # let the start-up burst pass: the steady state is measured
            cpu0, count0, t0 = h.proc_cpu_seconds(proc.pid), srv.count(), time.monotonic()
            rss_samples = []
            scrape_s: list[float] = []
            scrapes = failed_scrapes = 0
            next_scrape = t0
            while (now := time.monotonic()) - t0 < seconds:
                if proc.poll() is not None:
                    raise RuntimeError(f"failover-agent exited with {proc.returncode}")
                if now >= next_scrape:
                    scrapes += 1
                    try:
                        scrape_s.append(_timed_get(f"{base}/metrics")[1])
                    except httpx.HTTPError:
                        failed_scrapes += 1
                    next_scrape += 15
                rss_samples.append(h.proc_rss_bytes(proc.pid))
                time.sleep(0.5)
            wall = time.monotonic() - t0
            cpu = h.proc_cpu_seconds(proc.pid) - cpu0
            probes = srv.count() - count0
            scrape_cpu0 = h.proc_cpu_seconds(proc.pid)
            try:
                text, last = _timed_get(f"{base}/metrics")
                scrape_s.append(last)
            except httpx.HTTPError:
                text, failed_scrapes = "", failed_scrapes + 1
            scrape_cpu = h.proc_cpu_seconds(proc.pid) - scrape_cpu0  # includes ~1 s of probing
            series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
            by_scope: dict[str, list[int]] = {}  # scope -> [series, bytes]
            for line in text.splitlines():
                if line and not line.startswith("#"):
                    scope = _SCOPES.get(re.split(r"[{ ]", line, maxsplit=1)[0], "(resource)")
                    entry = by_scope.setdefault(scope, [0, 0])
                    entry[0] += 1
                    entry[1] += len(line) + 1
            up = down = 0
            for line in text.splitlines():
                if line.startswith(_PROBE_SUCCESS_SERIES):
                    if float(line.rsplit(" ", 1)[1]) >= 1:
                        up += 1
                    else:
                        down += 1
            log.flush()
            log_text = (Path(tmp) / "agent.log").read_text(errors="replace")
            return {"steady": {"cpu_s": cpu, "wall_s": wall, "probes": probes, "ok": probes,
                               "rss": max(rss_samples), "peak_rss": h.proc_peak_rss_bytes(proc.pid),
                               "scrapes": scrapes, "failed_scrapes": failed_scrapes,
                               "scrape_seconds": scrape_s, "pools": len(targets) // 2,
                               "last_scrape_cpu_s": scrape_cpu, "metrics_bytes": len(text.encode()),
                               "metrics_series": series, "by_scope": by_scope,
                               "domains_up_at_end": up, "domains_down_at_end": down,
                               "down_lines_in_log": log_text.count(" is DOWN "),
                               "overruns_in_log": log_text.count("overran its interval"),
                               "otlp_posts": None if sink is None else sink.posts,
                               "startup_s": startup_s, "startup_cpu_s": startup_cpu}}
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            log.close()


# ---------------------------------------------------------------- the /metrics renderer


class _NoDrops:
    def snapshot(self) -> dict[str, int]:
        return {}


def _agent_state(domains: int) -> Any:
    """The agent's state after one probe of ``domains`` http domains in pools of 2."""
    from failover_agent.checks.result import ProbeResult
    from failover_agent.state import AgentState, DomainStatus, PoolStatus

    state = AgentState(location="bench")
    phases = {"dns": 1e-5, "connect": 2e-4, "ttfb": 3e-4, "transfer": 1e-5, "total": 6e-4}
    for i in range(0, domains - 1, 2):
        urls = (f"http://127.0.0.1:{20000 + i}", f"http://127.0.0.1:{20001 + i}")
        name = f"p{i // 2:04d}"
        for url in urls:
            d = DomainStatus(name, url, "127.0.0.1")
            d.record(ProbeResult(True, 200, None, 6e-4, phases))
            state.domains[(name, url)] = d
        state.pools[name] = PoolStatus(name, urls[0], "127.0.0.1", urls,
                                       last=ProbeResult(True, 200, None, 1e-3, served_by=urls[0]))
    return state


def compare_renderers(domains: int, renders: int) -> dict[str, dict[str, float]]:
    """CPU per render, body size and peak Python allocation of each reader, on the same data."""
    from failover_agent.metrics import AgentMetrics
    from failover_agent.prometheus_text import PrometheusTextReader, cardinality_limits
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    official = PrometheusMetricReader(registry=registry, cardinality_limits=cardinality_limits())
    ours = PrometheusTextReader()
    provider = MeterProvider(metric_readers=[official, ours])
    state = _agent_state(domains)
    metrics = AgentMetrics(provider, lambda: state, _NoDrops())
    for d in state.domains.values():
        assert d.last is not None
        metrics.record_probe(d, d.last)
    variants: dict[str, Any] = {
        "hand-written reader (failover_agent.prometheus_text)": ours.render,
        "official exporter (PrometheusMetricReader + generate_latest)": lambda: generate_latest(registry),
    }
    out: dict[str, dict[str, float]] = {}
    for name, render in variants.items():
        body = render()  # warm-up (label caches, first collection)
        cpu = []
        for _ in range(renders):
            t0 = time.process_time()
            body = render()
            cpu.append(time.process_time() - t0)
        tracemalloc.start()
        render()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        lines = [line for line in body.decode().splitlines() if line and not line.startswith("#")]
        out[name] = {"cpu_s": sorted(cpu)[len(cpu) // 2], "bytes": len(body), "series": len(lines),
                     "peak_alloc": peak}
    provider.shutdown()
    return out


# ---------------------------------------------------------------- the RSS floor, import by import

FLOOR_STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ssl", ("ssl",)),
    ("asyncio", ("asyncio",)),
    ("h11 (the probes' wire and the listener)", ("h11",)),
    ("click", ("click",)),
    ("httpx, without its command line (as the agent's entry imports it)", ("httpx",)),
    ("pydantic", ("pydantic",)),
    ("the library and the agent's configuration models", ("pytest_failover", "failover_agent.config")),
    ("OpenTelemetry SDK (metrics, traces)", ("opentelemetry.sdk.metrics", "opentelemetry.sdk.trace")),
    ("APScheduler", ("apscheduler.schedulers.asyncio",)),
    ("the agent's own modules", ("failover_agent.cli", "failover_agent.service", "failover_agent.server")),
    # not imported by the agent any more: what each would add on top
    ("(not imported) prometheus_client, http.server, wsgiref: the exporter package's own imports",
     ("opentelemetry.exporter.prometheus",)),
    ("(not imported) httpx's command line: rich, pygments", ("httpx._main",)),
    ("(not imported) aiohttp.web, the former listener", ("aiohttp.web",)),
    ("(not imported) httpcore with anyio and trio, the former readiness client's", ("httpcore", "trio")),
)
_FLOOR_SCRIPT = """
import gc, importlib, json, sys
steps = json.loads(sys.argv[1])
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * {page}
sys.modules["httpx._main"] = None  # what failover_agent.__main__.skip_httpx_command_line does first
out = [["the interpreter", rss()]]
for label, modules in steps:
    if label.startswith("(not imported) httpx"):
        del sys.modules["httpx._main"]
    for module in modules:
        importlib.import_module(module)
    gc.collect()
    out.append([label, rss()])
print(json.dumps(out))
"""


def import_floor() -> list[tuple[str, float]]:
    """RSS added by each group of the agent's imports, in the order the agent imports them,
    in a fresh interpreter that enters as the agent's console script does (so httpx skips its
    command line); then what the imports the agent dropped would add. MiB per step."""
    import os

    script = _FLOOR_SCRIPT.format(page=os.sysconf("SC_PAGE_SIZE"))
    done = subprocess.run([sys.executable, "-c", script, json.dumps(FLOOR_STEPS)], capture_output=True,
                          text=True, timeout=120, check=True, cwd=h.ROOT)
    points = json.loads(done.stdout)
    steps = [(points[0][0], points[0][1] / 2**20)]
    steps += [(label, (now - before) / 2**20) for (_, before), (label, now) in pairwise(points)]
    return steps


# ---------------------------------------------------------------- report


def _per_probe_ms(figures: dict[str, Any]) -> str:
    return f"{figures['cpu_s'] / max(1, figures['probes']) * 1e3:.2f} ms"


def run(opts: Options) -> h.Report:
    report = h.Report(NAME)
    started = time.monotonic()
    burst_probes = opts.pick(600, 5000)
    concurrency = 10
    domains = opts.pick(1000, 1000)
    interval = 15.0
    steady_seconds = opts.seconds_or(10, 120)
    # Whole 15 s scrape intervals: a window of 16 s held two scrapes (at 0 and 15 s), charging
    # the agent 1.9 scrapes per 15 s instead of the one Prometheus would make.
    agent_seconds = opts.seconds_or(30, 300)
    agent_small_seconds = opts.seconds_or(15, 120)
    rate = domains / interval
    with h.server(ports=domains) as srv:
        targets = [f"127.0.0.1:{p}" for p in srv.ports]
        results: dict[str, dict[str, Any] | None] = {}
        results["blackbox_exporter 0.23 (Debian)"] = run_blackbox(
            targets, probes=burst_probes, concurrency=concurrency, rate=rate, seconds=steady_seconds)
        results["plain httpx prober (AsyncClient, no keep-alive)"] = run_httpx_prober(
            targets, probes=burst_probes, concurrency=concurrency, rate=rate, seconds=steady_seconds)
        small = domains // 10
        runs = [
            (f"failover-agent run: {domains} domains (500 pools of 2)", targets, interval, agent_seconds),
            (f"failover-agent run: {domains} domains, OTLP on (metrics and spans to a loopback receiver)",
             targets, interval, agent_seconds),
            (f"failover-agent run: {small} domains at a {interval / 10:g} s interval (same rate)",
             targets[:small], interval / 10, agent_small_seconds),
            ("failover-agent run: 2 domains (its RSS floor)", targets[:2], interval, opts.seconds_or(15, 30)),
        ]
        for label, subset, every, seconds in runs:
            try:
                results[label] = run_agent(subset, srv, interval=every, seconds=seconds, otlp="OTLP on" in label)
            except RuntimeError as exc:  # did not start, or died: a row that says so
                results[label] = {"error": str(exc)}

    renderers = compare_renderers(domains, renders=opts.pick(5, 20))
    floor = import_floor()

    table_a = h.Table(
        f"Agent: CPU per probe (burst of {burst_probes} probes, {concurrency} concurrent, fresh connection each)",
        ["prober", "probes (ok)", "CPU", "CPU per probe", "RSS after"],
    )
    table_b = h.Table(
        f"Agent: {domains} domains at a {interval:.0f} s interval ({rate:.1f} domain probes/s)",
        ["prober", "measured for", "requests sent (ok)", "**CPU % of one core**", "CPU per request", "**RSS** (peak)"],
    )
    for name, res in results.items():
        if res is None or "error" in res:
            missing = (f"not installed (`apt-get install -y {BLACKBOX}`)" if res is None and "blackbox" in name
                       else "not available" if res is None else f"failed: {res['error']}")
            table_a.rows.append([name, missing, "-", "-", "-"])
            table_b.rows.append([name, "-", missing, "-", "-", "-"])
            continue
        if "burst" in res:
            b = res["burst"]
            table_a.rows.append([name, f"{b['probes']} ({b['ok']})", f"{b['cpu_s']:.2f} s",
                                 _per_probe_ms(b), f"{b['rss'] / 2**20:.0f} MiB"])
        if "steady" in res:
            s = res["steady"]
            table_b.rows.append([
                name, f"{s['wall_s']:.0f} s", f"{s['probes']} ({s['ok']})", f"**{s['cpu_s'] / s['wall_s'] * 100:.1f} %**",
                _per_probe_ms(s), f"**{s['rss'] / 2**20:.0f} MiB** ({s['peak_rss'] / 2**20:.0f} MiB)"])
        else:
            table_a.rows.append([name, "runs on its own schedule: see the next table", "-", "-", "-"])
    table_a.notes.append("blackbox_exporter's CPU includes answering `/probe` (the metrics text a scrape would fetch).")
    table_b.notes.append(
        "failover-agent: pools of 2 domains, readiness checks off, its own /metrics scraped every 15 s "
        "(the window is a whole number of 15 s intervals and starts with a scrape, so it holds one "
        "scrape per 15 s); "
        "each pool also gets one pool probe (a request through the failover client) per interval, so it "
        "sends 1.5 requests per domain per interval; CPU and RSS are read from /proc after it is up "
        "(start-up excluded), requests are counted by the target server. The other two probers are driven "
        "at the same 66.7 domain probes/s.")
    for agent_name, agent_res in results.items():
        if not agent_name.startswith("failover-agent") or agent_res is None or "error" in agent_res:
            continue
        a = agent_res["steady"]
        table_b.notes.append(
            f"{agent_name}: start-up took {a['startup_s']:.1f} s "
            f"({a['startup_cpu_s']:.1f} s CPU) until /healthz answered; measured from 5 s later. "
            f"At the end its /metrics showed {a['domains_up_at_end']} domains with probe_success 1 and "
            f"{a['domains_down_at_end']} with 0; its log had {a['down_lines_in_log']} 'is DOWN' lines and "
            f"{a['overruns_in_log']} overrun warnings (every target was healthy). /metrics scrapes: "
            f"{', '.join(f'{x:.2f} s' for x in a['scrape_seconds'])}; failed (30 s timeout): {a['failed_scrapes']}; "
            f"the last one returned {a['metrics_bytes'] / 2**20:.1f} MiB, {a['metrics_series']:,} series, while the "
            f"agent used {a['last_scrape_cpu_s']:.2f} s of CPU (probing included)."
            + ("" if a.get("otlp_posts") is None else f" OTLP exports received: {a['otlp_posts']}.")
        )
        per_domain = a["metrics_series"] / max(1, 2 * a["pools"])
        scopes = "; ".join(f"{scope}: {n:,} series, {size / 2**20:.2f} MiB"
                           for scope, (n, size) in sorted(a["by_scope"].items()))
        table_b.notes.append(f"{agent_name}: {per_domain:.1f} series per domain in all; by scope: {scopes}.")
    table_b.notes.append(
        "Targets (issues 14 and 30): 1,000 domains at 15 s in at most 64 MiB RSS and a scrape of at most 3 MiB, "
        "with CPU per request below blackbox_exporter's; at most 20 series naming a domain "
        "(tests/agent/test_agent_cardinality.py counts them on a real run).")
    table_c = h.Table(
        f"Agent: /metrics of {domains} domains' agent metrics, rendered by each reader (same MeterProvider)",
        ["reader", "series", "body", "CPU per render (median)", "peak Python allocation"],
    )
    for name, r in renderers.items():
        table_c.rows.append([name, f"{r['series']:,.0f}", f"{r['bytes'] / 2**20:.2f} MiB",
                             f"{r['cpu_s'] * 1e3:.0f} ms", f"{r['peak_alloc'] / 2**20:.1f} MiB"])
    table_c.notes.append("The official exporter writes every label of a family on every series (most of them "
                         "empty), hence the larger body; both carry the same series and values "
                         "(tests/agent/test_agent_prometheus_text.py).")
    table_d = h.Table("Agent: its RSS floor, import by import (a fresh interpreter, in the agent's order)",
                      ["step", "RSS added", "RSS so far"])
    so_far = 0.0
    for label, added in floor:
        if not label.startswith("(not imported)"):
            so_far += added
        table_d.rows.append([label, f"{added:.1f} MiB", "" if label.startswith("(") else f"{so_far:.1f} MiB"])
    table_d.notes.append("Each step is what its imports add on top of the steps before it (shared dependencies "
                         "count where first imported). The last rows are what the agent no longer imports would "
                         "add on top of all the rest.")
    report.tables += [table_a, table_b, table_c, table_d]
    report.data = {**{name: res for name, res in results.items()}, "renderers": renderers,
                   "import_floor": floor}
    report.seconds = time.monotonic() - started
    return report
