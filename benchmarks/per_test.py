"""Benchmark 4: per-test cost with a fault injected (set-up, one request, tear-down).

A generated test file is run by pytest in a subprocess, the way a downstream suite
runs. Its tests are interleaved (iteration 1 of every kind, then iteration 2, ...), so
noise hits all kinds alike. Each test's cost is pytest's own measurement of its
set-up + call + tear-down phases (``TestReport.duration``), collected by a tiny
conftest hook; the first iterations (session servers starting, imports) are dropped.

Kinds, each injecting a 503 and a connection failure into one GET:

- ``fake_domains`` (this project): real loopback servers with real TLS (a session
  ``httpx.Client(verify=fake_domains_ssl_context)``), faults ``status(503)`` and
  ``dns_nxdomain()``; also through the ``@pytest.mark.outage`` marker. Each kind has
  its own host, so a kind's row is its own steady state: a ``status(503)`` test reuses
  the keep-alive connection the previous test of its kind left (the server applies
  the fault per request), while a connect-level fault such as ``dns_nxdomain`` drops
  its host's connections. The row "fresh TLS connection" sends ``Connection: close``,
  so every test of that kind pays a new TCP + TLS handshake: the cost of a 503 test
  right after a connect-level fault on the same host;
- ``respx`` (``respx_mock``): routes answering ``httpx.Response(503)`` / raising
  ``httpx.ConnectError``; no socket;
- ``pytest-httpx`` (``httpx_mock``): ``add_response(status_code=503)`` /
  ``add_exception(httpx.ConnectError)``; no socket. Only where it is installed: it pins
  httpx to 0.28, so the development tools leave it out, and the suite runs on the httpx a
  user installs (``pip install pytest-httpx`` in a venv of its own adds its rows);
- a real server started per test (``http.server.ThreadingHTTPServer`` in a thread,
  plain HTTP): answering 503, or stopped before the request (refused);
- an empty test: pytest's own per-test cost, for reference.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks import _harness as h
from benchmarks._options import Options

NAME = "per_test"

CONFTEST = '''
import http.server
import json
import os
import threading
from collections import defaultdict

import httpx
import pytest

_DURATIONS = defaultdict(float)


def pytest_runtest_logreport(report):
    _DURATIONS[report.nodeid] += report.duration


def pytest_sessionfinish(session):
    with open(os.environ["BENCH_PER_TEST_OUT"], "w") as fh:
        json.dump(_DURATIONS, fh)


@pytest.fixture(scope="session")
def tls_client(fake_domains_ssl_context):
    with httpx.Client(verify=fake_domains_ssl_context) as client:
        yield client


@pytest.fixture(scope="session")
def plain_client():
    with httpx.Client() as client:
        yield client


class _Handler(http.server.BaseHTTPRequestHandler):
    status = 503

    def do_GET(self):
        self.send_response(self.server.status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


@pytest.fixture
def real_server():
    """A real HTTP server started for this test only; yields its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.status = 503
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.005})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
'''

TESTS = {
    "fake_domains_503": '''
def test_{i:04d}_fake_domains_503(fake_domains, tls_client):
    fake_domains.add(HOST)
    fake_domains.fail(HOST, faults.status(503))
    assert tls_client.get(URL).status_code == 503
''',
    "fake_domains_marker_503": '''
@pytest.mark.outage(MARKER_HOST, "status", 503)
def test_{i:04d}_fake_domains_marker_503(tls_client):
    assert tls_client.get(MARKER_URL).status_code == 503
''',
    "fake_domains_fresh_503": '''
def test_{i:04d}_fake_domains_fresh_503(fake_domains, tls_client):
    fake_domains.add(FRESH_HOST)
    fake_domains.fail(FRESH_HOST, faults.status(503))
    assert tls_client.get(FRESH_URL, headers={{"Connection": "close"}}).status_code == 503
''',
    "fake_domains_dns": '''
def test_{i:04d}_fake_domains_dns(fake_domains, tls_client):
    fake_domains.add(DNS_HOST)
    fake_domains.fail(DNS_HOST, faults.dns_nxdomain())
    with pytest.raises(httpx.ConnectError):
        tls_client.get(DNS_URL)
''',
    "respx_503": '''
def test_{i:04d}_respx_503(respx_mock, plain_client):
    respx_mock.get(URL).mock(return_value=httpx.Response(503))
    assert plain_client.get(URL).status_code == 503
''',
    "respx_connect_error": '''
def test_{i:04d}_respx_connect_error(respx_mock, plain_client):
    respx_mock.get(URL).mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(httpx.ConnectError):
        plain_client.get(URL)
''',
    "pytest_httpx_503": '''
def test_{i:04d}_pytest_httpx_503(httpx_mock, plain_client):
    httpx_mock.add_response(url=URL, status_code=503)
    assert plain_client.get(URL).status_code == 503
''',
    "pytest_httpx_connect_error": '''
def test_{i:04d}_pytest_httpx_connect_error(httpx_mock, plain_client):
    httpx_mock.add_exception(httpx.ConnectError("refused"), url=URL)
    with pytest.raises(httpx.ConnectError):
        plain_client.get(URL)
''',
    "real_server_503": '''
def test_{i:04d}_real_server_503(real_server, plain_client):
    assert plain_client.get(real_server + "/v1/ping").status_code == 503
''',
    "real_server_refused": '''
def test_{i:04d}_real_server_refused(plain_client):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()
    with pytest.raises(httpx.ConnectError):
        plain_client.get(f"http://127.0.0.1:{{port}}/v1/ping")
''',
    "empty": '''
def test_{i:04d}_empty():
    pass
''',
}

LABELS = {
    "fake_domains_503": ("fake_domains (real sockets + TLS)", "status(503)"),
    "fake_domains_marker_503": ("fake_domains via @pytest.mark.outage", "status(503)"),
    "fake_domains_fresh_503": ("fake_domains, fresh TLS connection each test", "status(503)"),
    "fake_domains_dns": ("fake_domains (real sockets + TLS)", "dns_nxdomain()"),
    "respx_503": ("respx (respx_mock, no socket)", "503 response"),
    "respx_connect_error": ("respx (respx_mock, no socket)", "ConnectError"),
    "pytest_httpx_503": ("pytest-httpx (httpx_mock, no socket)", "503 response"),
    "pytest_httpx_connect_error": ("pytest-httpx (httpx_mock, no socket)", "ConnectError"),
    "real_server_503": ("real http.server started per test (HTTP)", "503"),
    "real_server_refused": ("real server, stopped before the request", "refused"),
    "empty": ("empty test (pytest's own cost)", "-"),
}


# The kinds that need a plugin which may be missing: the plugin's module.
_NEEDS = {"pytest_httpx_503": "pytest_httpx", "pytest_httpx_connect_error": "pytest_httpx"}


def _kinds() -> list[str]:
    """The kinds this environment can run (see the module's doc on pytest-httpx)."""
    return [k for k in TESTS if k not in _NEEDS or importlib.util.find_spec(_NEEDS[k]) is not None]


def _source(iterations: int, kinds: list[str]) -> str:
    head = textwrap.dedent('''
        import http.server

        import httpx
        import pytest

        from pytest_failover import faults

        HOST = "api.example.com"
        URL = f"https://{HOST}/v1/ping"
        MARKER_HOST = "marker.example.com"
        MARKER_URL = f"https://{MARKER_HOST}/v1/ping"
        FRESH_HOST = "fresh.example.com"
        FRESH_URL = f"https://{FRESH_HOST}/v1/ping"
        DNS_HOST = "dns.example.com"
        DNS_URL = f"https://{DNS_HOST}/v1/ping"
    ''')
    body = []
    for i in range(iterations):
        shift = i % len(kinds)  # rotate the order inside each iteration
        for kind in kinds[shift:] + kinds[:shift]:
            body.append(TESTS[kind].format(i=i))
    return head + "\n".join(body)


def run(opts: Options) -> h.Report:
    report = h.Report(NAME)
    started = time.monotonic()
    iterations = opts.rounds_or(60, 300)
    warmup = 5
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "conftest.py").write_text(CONFTEST)
        kinds = _kinds()
        (root / "test_bench_per_test.py").write_text(_source(iterations, kinds))
        out = root / "durations.json"
        env = dict(os.environ, BENCH_PER_TEST_OUT=str(out))
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
             "-o", "addopts=", "-W", "ignore::DeprecationWarning", str(root)],
            cwd=root, env=env, capture_output=True, text=True,
            timeout=opts.seconds_or(300, 1800),
        )
        if done.returncode != 0:
            raise RuntimeError(f"per-test pytest run failed:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
        durations: dict[str, float] = json.loads(out.read_text())
    per_kind: dict[str, list[float]] = defaultdict(list)
    by_iteration: dict[int, dict[str, float]] = defaultdict(dict)
    for nodeid, seconds in durations.items():
        name = nodeid.rsplit("::", 1)[1]
        index = int(name.split("_")[1])
        if index < warmup:
            continue
        per_kind[name.split("_", 2)[2]].append(seconds)
        by_iteration[index][name.split("_", 2)[2]] = seconds
    empty = statistics.median(per_kind["empty"])
    respx = statistics.median(per_kind["respx_503"])

    def paired(kind: str) -> float:
        """Median over iterations of (kind / respx_503 in the same iteration): robust to drift."""
        return statistics.median(
            tests[kind] / tests["respx_503"]
            for tests in by_iteration.values()
            if kind in tests and "respx_503" in tests
        )

    table = h.Table(
        f"Per-test cost with a fault injected: set-up + one GET + tear-down ({iterations - warmup} tests of each kind, pytest in a subprocess)",
        ["tool", "fault", "median per test", "p25 - p75", "net of an empty test", "vs respx (503)",
         "paired vs respx"],
    )
    data: dict[str, Any] = {"iterations": iterations, "warmup": warmup, "pytest_summary": done.stdout.strip().splitlines()[-1]}
    for kind in kinds:
        st = h.Stats.of(per_kind[kind])
        tool, fault = LABELS[kind]
        table.rows.append([tool, fault, f"**{h.ms(st.median)}**", f"{h.ms(st.p25)} - {h.ms(st.p75)}",
                           h.ms(st.median - empty) if kind != "empty" else "-",
                           f"{st.median / respx:.2f}x", f"{paired(kind):.2f}x"])
        data[kind] = {"median_s": st.median, "p25_s": st.p25, "p75_s": st.p75,
                      "paired_vs_respx": paired(kind), "samples_s": per_kind[kind]}
    table.notes.append(
        "Target: fake_domains per test no more than respx's, while using real sockets and TLS "
        "(session servers, a session client; a test only flips their state)."
    )
    table.notes.append(
        "Each fake_domains kind has its own host. status(503) reuses the keep-alive connection "
        "left by the previous test of its kind; the fresh-connection row (Connection: close) is "
        "what a test pays when it cannot, e.g. right after a connect-level fault on its host."
    )
    table.notes.append(
        "Paired vs respx: the median over iterations of (this test / the respx 503 test of the "
        "same iteration); tests of one iteration run back to back, so load drift cancels."
    )
    if missing := sorted({_NEEDS[k] for k in TESTS if k not in kinds}):
        table.notes.append(f"Not installed, so not run: {', '.join(missing)} (pip install pytest-httpx).")
    table.notes.append(f"pytest: {data['pytest_summary']}")
    report.tables.append(table)
    report.data = data
    report.seconds = time.monotonic() - started
    return report
