"""The quorum publisher without Prometheus: answers it must refuse, the count, what it signs and logs."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from failover_agent.cli import main
from failover_agent.config import AgentConfig, ConfigError, parse_config
from failover_agent.control_writer import ControlWriter
from failover_agent.maintenance import Window
from failover_agent.maintenance_file import sign_windows
from failover_agent.quorum import prometheus
from failover_agent.quorum.prometheus import PrometheusQuery, QuorumSourceError
from failover_agent.quorum.promql import location_votes
from failover_agent.quorum.publisher import QuorumPublisher
from failover_agent.telemetry import Telemetry

from pytest_failover import semconv
from pytest_failover.control import ControlDocument, generate_key, save_key

A, B, C = "https://api.example.com", "https://api2.example.com", "https://api3.example.com"
KEY = generate_key("EdDSA", kid="q")


def _votes(*rows: tuple[str, str, str], pool: str = "api") -> dict[str, Any]:
    """A Prometheus answer with one series per (host, port, location)."""
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"failover_pool": pool, "url_scheme": "https", "server_address": host, "server_port": port,
                    "probe_location": location, "job": "failover-agent"}, "value": [1_800_000_000.5, "0"]}
        for host, port, location in rows]}}


def _config(tmp_path: Path, domains: tuple[str, ...] = (A, B, C), output: Path | None = None,
            maintenance: list[dict[str, Any]] | None = None, maintenance_file: Path | None = None,
            **quorum: Any) -> AgentConfig:
    key = save_key(tmp_path / "control.key", KEY, private=True, overwrite=True)
    control: dict[str, Any] = {
        "signing_key_file": key, "interval": 1.0,
        "quorum": {"prometheus_url": "http://prometheus.invalid:9090", "timeout": 0.5, **quorum},
    }
    if output is not None:
        control["output_file"] = output
    if maintenance_file is not None:
        control["maintenance_file"] = maintenance_file
    return parse_config({"location": "publisher", "pools": [{"name": "api", "domains": list(domains)}],
                         "control": control, "maintenance": maintenance or []})


Answer = Callable[[httpx.Request], httpx.Response]


class Scripted:
    """An httpx transport answering each query with the next scripted answer."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.queries: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.queries.append(request)
        return self.answers.pop(0)(request)


def ok(body: dict[str, Any]) -> Answer:
    return lambda _: httpx.Response(200, json=body)


def down(_: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused")


def nonsense(_: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": []}})


def _publisher(tmp_path: Path, script: Scripted, **kw: Any) -> tuple[QuorumPublisher, Telemetry]:
    telemetry = Telemetry(location="publisher")
    return QuorumPublisher(_config(tmp_path, **kw), telemetry, transport=httpx.MockTransport(script)), telemetry


def _run(publisher: QuorumPublisher, rounds: int) -> list[bool]:
    async def go() -> list[bool]:
        try:
            return [await publisher.poll(now=1_800_000_000 + i) for i in range(rounds)]
        finally:
            await publisher.aclose()

    return asyncio.run(go())


def _doc(publisher: QuorumPublisher) -> ControlDocument:
    raw = publisher.document()
    assert raw is not None
    return ControlDocument.parse(raw, key=KEY.public(), now=1_800_000_010)


def _up(telemetry: Telemetry) -> list[float]:
    text = b"".join(telemetry.prometheus_chunks()).decode()
    return [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("failover_control_quorum_up{")]


# --------------------------------------------------------------------------- the count


def test_two_locations_disable_and_the_document_says_who(tmp_path: Path) -> None:
    """Two distinct locations disable a domain; one does not; the quorum member lists the agreeing ones."""
    script = Scripted(ok(_votes(("api.example.com", "443", "eu"), ("api.example.com", "443", "us"),
                                ("api.example.com", "443", "us"), ("api2.example.com", "443", "eu"))))
    publisher, _ = _publisher(tmp_path, script)
    assert _run(publisher, 1) == [True]
    doc = _doc(publisher)
    assert dict(doc.disabled) == {"api": frozenset({A})}
    assert doc.quorum is not None and dict(doc.quorum.agreed) == {"api": {A: ("eu", "us")}}
    assert script.queries[0].url.params["query"] == location_votes(60)
    assert script.queries[0].url.path == "/api/v1/query"


def test_min_locations_three(tmp_path: Path) -> None:
    """With min_locations = 3 two agreeing locations disable nothing."""
    script = Scripted(ok(_votes(("api.example.com", "443", "eu"), ("api.example.com", "443", "us"))))
    publisher, _ = _publisher(tmp_path, script, min_locations=3)
    _run(publisher, 1)
    assert dict(_doc(publisher).disabled) == {"api": frozenset()}


def test_series_of_unknown_domains_and_pools_are_ignored(tmp_path: Path) -> None:
    """Prometheus cannot add a domain: another port, host or pool counts for nothing."""
    rows = [("api.example.com", "8443", "eu"), ("api.example.com", "8443", "us"),
            ("evil.example.com", "443", "eu"), ("evil.example.com", "443", "us")]
    body = _votes(*rows)
    body["data"]["result"] += _votes(("api.example.com", "443", "eu"), ("api.example.com", "443", "us"),
                                     pool="other")["data"]["result"]
    publisher, _ = _publisher(tmp_path, Scripted(ok(body)))
    _run(publisher, 1)
    doc = _doc(publisher)
    assert dict(doc.disabled) == {"api": frozenset()} and doc.quorum is not None and dict(doc.quorum.agreed) == {}


def test_the_pool_rule_still_holds(tmp_path: Path) -> None:
    """Every domain agreed down: none is disabled, and the quorum member still records the agreement."""
    both = [(host, "443", loc) for host in ("api.example.com", "api2.example.com") for loc in ("eu", "us")]
    publisher, _ = _publisher(tmp_path, Scripted(ok(_votes(*both))), domains=(A, B))
    _run(publisher, 1)
    doc = _doc(publisher)
    assert dict(doc.disabled) == {"api": frozenset()}
    assert doc.quorum is not None and set(doc.quorum.agreed["api"]) == {A, B}


# --------------------------------------------------------------------------- maintenance drains

T0 = 1_800_000_000


def _disabled_at(publisher: QuorumPublisher, times: list[int]) -> list[tuple[frozenset[str], dict[str, Any]]]:
    """Per poll at ``T0 + t``: the domains of pool api the signed document disables, and its
    quorum's ``agreed``."""
    async def go() -> list[tuple[frozenset[str], dict[str, Any]]]:
        out = []
        try:
            for t in times:
                assert await publisher.poll(now=T0 + t)
                raw = publisher.document()
                assert raw is not None
                doc = ControlDocument.parse(raw, key=KEY.public(), now=T0 + t)
                assert doc.quorum is not None
                out.append((doc.disabled.get("api", frozenset()), dict(doc.quorum.agreed)))
        finally:
            await publisher.aclose()
        return out

    return asyncio.run(go())


def _window(**extra: Any) -> dict[str, Any]:
    """Maintenance of A over [T0 + 600, T0 + 1200) with a 5 minute drain."""
    return {"pool": "api", "domains": [A], "start": datetime.fromtimestamp(T0 + 600, UTC),
            "end": datetime.fromtimestamp(T0 + 1200, UTC), "drain": "5m", **extra}


def test_a_configured_window_drains_its_domain_through_the_quorum_document(tmp_path: Path) -> None:
    """No location votes A down, yet the document disables it from start - drain until the end
    of its window, then enables it again; ``quorum.agreed`` stays empty (nobody voted)."""
    times = [0, 299, 300, 600, 1199, 1200]
    publisher, _ = _publisher(tmp_path, Scripted(*[ok(_votes())] * len(times)), maintenance=[_window()])
    assert _disabled_at(publisher, times) == [
        (frozenset(), {}), (frozenset(), {}), (frozenset({A}), {}), (frozenset({A}), {}), (frozenset({A}), {}),
        (frozenset(), {})]


def test_a_window_started_at_run_time_drains_through_the_quorum_document(tmp_path: Path) -> None:
    """``failover-agent maintenance start`` against the publisher's configuration writes the signed
    maintenance file; the publisher reads it and drains as for a configured window."""
    path = tmp_path / "maintenance.jws"
    window = Window(pool="api", domains=frozenset({B}), start=T0 + 600, end=T0 + 1200, drain=300.0, reason="",
                    source="w1")
    path.write_bytes(sign_windows([window], 1, KEY))
    publisher, _ = _publisher(tmp_path, Scripted(*[ok(_votes())] * 3), maintenance_file=path)
    assert [disabled for disabled, _ in _disabled_at(publisher, [0, 300, 1200])] == [
        frozenset(), frozenset({B}), frozenset()]


def test_a_drain_with_the_rest_of_the_pool_voted_down_keeps_the_pool_rule(tmp_path: Path) -> None:
    """Pool of A and B: the quorum votes B down while A drains; disabling both would leave the
    pool nothing, so neither automatic decision is taken (rule 3); alone, the vote disables B."""
    votes = _votes(("api2.example.com", "443", "eu"), ("api2.example.com", "443", "us"))
    publisher, _ = _publisher(tmp_path, Scripted(ok(votes), ok(votes)), domains=(A, B), maintenance=[_window()])
    assert _disabled_at(publisher, [0, 300]) == [
        (frozenset({B}), {"api": {B: ("eu", "us")}}), (frozenset(), {"api": {B: ("eu", "us")}})]


# --------------------------------------------------------------------------- Prometheus failing


def test_the_last_document_stays_and_each_change_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Unreachable or nonsense: nothing signed, gauge 0, one line per change of state; then decided anew."""
    vote = ok(_votes(("api.example.com", "443", "eu"), ("api.example.com", "443", "us")))
    script = Scripted(vote, down, down, down, nonsense, nonsense, ok(_votes()))
    publisher, telemetry = _publisher(tmp_path, script)
    caplog.set_level(logging.INFO, logger="failover_agent.publisher")
    async def go() -> list[tuple[bool, bytes | None, list[float]]]:
        out = []
        for i in range(len(script.answers)):
            result = await publisher.poll(now=1_800_000_000 + i)
            out.append((result, publisher.document(), _up(telemetry)))
        await publisher.aclose()
        return out

    rounds = asyncio.run(go())
    assert [r[0] for r in rounds] == [True, False, False, False, False, False, True]
    first = rounds[0][1]
    assert all(doc == first for _, doc, _ in rounds[1:6]), "the document changed while Prometheus failed"
    assert [up for _, _, up in rounds] == [[1.0]] + [[0.0]] * 5 + [[1.0]]
    assert dict(_doc(publisher).disabled) == {"api": frozenset()}
    lines = [r.getMessage() for r in caplog.records if "Prometheus" in r.getMessage()]
    assert len(lines) == 3, lines
    assert "(unreachable)" in lines[0] and "stays in force" in lines[0]
    assert "(invalid)" in lines[1] and "resultType" in lines[1]
    assert "answers again" in lines[2]


def test_no_document_before_prometheus_answers(tmp_path: Path) -> None:
    """A publisher that never got an answer serves nothing (clients keep what they have) and says so."""
    publisher, telemetry = _publisher(tmp_path, Scripted(down))
    assert _run(publisher, 1) == [False]
    assert publisher.document() is None and _up(telemetry) == [0.0]


def test_a_restart_while_prometheus_is_down_serves_the_last_document(tmp_path: Path) -> None:
    """The document left in output_file is served again at start, and the next one has a greater version."""
    output = tmp_path / "control.jws"
    vote = ok(_votes(("api.example.com", "443", "eu"), ("api.example.com", "443", "us")))
    first = QuorumPublisher(_config(tmp_path, output=output), Telemetry(location="publisher"),
                            transport=httpx.MockTransport(Scripted(vote)))

    async def poll(publisher: QuorumPublisher) -> bool:
        try:
            return await publisher.poll()
        finally:
            await publisher.aclose()

    assert asyncio.run(poll(first))
    written = output.read_bytes()
    second = QuorumPublisher(_config(tmp_path, output=output), Telemetry(location="publisher"),
                             transport=httpx.MockTransport(Scripted(down, vote)))
    assert second.document() == written
    assert not asyncio.run(poll(second)) and second.document() == written
    second.source = PrometheusQuery("http://p.invalid", timeout=0.5, transport=httpx.MockTransport(Scripted(vote)))
    assert asyncio.run(poll(second))
    assert ControlDocument.parse(second.document() or b"", key=KEY.public()).version > first.writer.version


def test_a_foreign_or_expired_file_is_not_served(tmp_path: Path) -> None:
    """A document signed by another key, or expired, stays unserved: nothing until Prometheus answers."""
    output = tmp_path / "control.jws"
    other = generate_key("EdDSA", kid="other")
    for key, now in ((other, None), (KEY, time.time() - 1000)):
        output.write_bytes(ControlDocument.sign(version=1, pools={"api": []}, expires_in=300, key=key, now=now))
        publisher = QuorumPublisher(_config(tmp_path, output=output), Telemetry(location="publisher"),
                                    transport=httpx.MockTransport(Scripted()))
        assert publisher.document() is None
        asyncio.run(publisher.aclose())


def test_the_publisher_creates_exactly_its_listed_metrics(tmp_path: Path) -> None:
    """Beside the agent's own (control) families, /metrics has exactly the quorum scope's."""
    publisher, telemetry = _publisher(tmp_path, Scripted(down))
    _run(publisher, 1)
    text = b"".join(telemetry.prometheus_chunks()).decode()
    families = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    agent = {m.prometheus for m in semconv.METRICS.values() if m.scope == semconv.AGENT_SCOPE}
    agent.add(semconv.PROMETHEUS_TARGET_INFO)
    assert families - agent == {m.prometheus for m in semconv.METRICS.values() if m.scope == semconv.QUORUM_SCOPE}


# --------------------------------------------------------------------------- the HTTP API client


def _query(handler: Answer) -> QuorumSourceError:
    async def go() -> None:
        source = PrometheusQuery("http://prometheus.invalid", timeout=0.5, transport=httpx.MockTransport(handler))
        try:
            await source.query("up")
        finally:
            await source.aclose()

    with pytest.raises(QuorumSourceError) as info:
        asyncio.run(go())
    return info.value


def _row(**metric: str) -> dict[str, Any]:
    labels = {"failover_pool": "api", "url_scheme": "https", "server_address": "a", "server_port": "443",
              "probe_location": "eu", **metric}
    return {"status": "success", "data": {"resultType": "vector", "result": [{"metric": labels, "value": [1, "0"]}]}}


@pytest.mark.parametrize(
    ("answer", "reason", "words"),
    [
        (lambda _: httpx.Response(200, text="<html>login</html>"), "invalid", "not JSON"),
        (lambda _: httpx.Response(200, json=[]), "invalid", "not an instant vector"),
        (lambda _: httpx.Response(200, json={"status": "success"}), "invalid", "data"),
        (nonsense, "invalid", "resultType"),
        (lambda _: httpx.Response(200, json=_row(probe_location="")), "invalid", "probe_location"),
        (lambda _: httpx.Response(200, json={**_row(), "data": {"resultType": "vector", "result": [
            {"metric": _row()["data"]["result"][0]["metric"], "value": [1, "many"]}]}}), "invalid", "'many'"),
        (lambda _: httpx.Response(200, json={**_row(), "data": {"resultType": "vector", "result": [
            {"metric": _row()["data"]["result"][0]["metric"], "value": [1, "NaN"]}]}}), "invalid", "NaN"),
        (lambda _: httpx.Response(200, json={**_row(), "data": {**_row()["data"], "extra": 1}}), "invalid", "extra"),
        (lambda _: httpx.Response(400, json={"status": "error", "errorType": "bad_data", "error": "parse error"}),
         "refused", "bad_data: parse error"),
        (lambda _: httpx.Response(200, json={"status": "error", "errorType": "timeout", "error": "slow"}),
         "refused", "timeout: slow"),
        (lambda _: httpx.Response(502, text="bad gateway"), "http_status", "HTTP 502"),
        (lambda _: httpx.Response(301, headers={"Location": "http://elsewhere/"}), "http_status", "HTTP 301"),
        (down, "unreachable", "connection refused"),
    ],
)
def test_answers_that_are_refused(answer: Answer, reason: str, words: str) -> None:
    """Each kind of bad answer is a QuorumSourceError with its reason and a message that says what was wrong."""
    error = _query(answer)
    assert error.reason == reason and words in str(error), str(error)


def test_a_success_answer_with_warnings_passes() -> None:
    """Members Prometheus may add at the top (warnings, infos) are allowed."""
    async def go() -> int:
        body = {**_row(), "warnings": ["partial"], "infos": ["x"]}
        source = PrometheusQuery("http://p.invalid/", timeout=0.5, transport=httpx.MockTransport(ok(body)))
        answer = await source.query("up")
        await source.aclose()
        return len(answer.data.result)

    assert asyncio.run(go()) == 1


def test_too_large_answers_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer larger than MAX_ANSWER_BYTES is refused without reading all of it."""
    monkeypatch.setattr(prometheus, "MAX_ANSWER_BYTES", 1000)
    error = _query(lambda _: httpx.Response(200, content=b"[" + b"0," * 10_000 + b"0]"))
    assert error.reason == "too_large"


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A loopback port that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def test_a_silent_prometheus_times_out(silent_server: int) -> None:
    """No answer within the timeout is 'unreachable', after about the timeout."""
    async def go() -> QuorumSourceError:
        source = PrometheusQuery(f"http://127.0.0.1:{silent_server}", timeout=0.3)
        try:
            await source.query("up")
        except QuorumSourceError as exc:
            return exc
        finally:
            await source.aclose()
        raise AssertionError("no error")

    error = asyncio.run(go())
    assert error.reason == "unreachable" and "within 0.3 s" in str(error)


# --------------------------------------------------------------------------- configuration and CLI


@pytest.mark.parametrize(
    ("quorum", "path", "words"),
    [
        ({"prometheus_url": "ftp://p"}, "control.quorum.prometheus_url", "unsupported scheme 'ftp'"),
        ({"prometheus_url": "http://p/?x=1"}, "control.quorum.prometheus_url", "no query"),
        ({"prometheus_url": "http://p", "min_locations": 0}, "control.quorum.min_locations", "greater than"),
        ({"prometheus_url": "http://p", "for_seconds": 1.5}, "control.quorum.for_seconds", "integer"),
        ({"prometheus_url": "http://p", "timeout": 20.0}, "control", "quorum.timeout"),
        ({}, "control.quorum.prometheus_url", "required"),
        ({"prometheus_url": "http://p", "bogus": 1}, "control.quorum.bogus", "unknown key"),
    ],
)
def test_bad_quorum_settings(tmp_path: Path, quorum: dict[str, Any], path: str, words: str) -> None:
    """Each bad [control.quorum] key is reported at its path with a specific message."""
    data = {"pools": [{"name": "api", "domains": [A, B]}],
            "control": {"signing_key_file": tmp_path / "k", "interval": 10.0, "quorum": quorum}}
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert [(p, m) for p, m in info.value.errors if p == path and words in m], info.value.errors


def test_defaults(tmp_path: Path) -> None:
    """min_locations 2, for_seconds 60; the URL loses a trailing slash."""
    cfg = parse_config({"pools": [{"name": "api", "domains": [A]}],
                        "control": {"signing_key_file": tmp_path / "k", "quorum": {"prometheus_url": "http://p:9090/"}}})
    assert cfg.control is not None and cfg.control.quorum is not None
    q = cfg.control.quorum
    assert (q.prometheus_url, q.min_locations, q.for_seconds) == ("http://p:9090", 2, 60)


def test_an_agent_refuses_a_quorum_configuration(tmp_path: Path) -> None:
    """`run` with [control.quorum] names the publisher's command instead of deciding from its own view."""
    cfg = _config(tmp_path)
    assert cfg.control is not None
    with pytest.raises(ValueError, match="failover-agent control quorum"):
        ControlWriter(cfg.control, cfg.pools)
    plain = cfg.control.model_copy(update={"quorum": None})
    with pytest.raises(ValueError, match=r"\[control.quorum\]"):
        ControlWriter(plain, cfg.pools, quorum=True)


def _write(tmp_path: Path, quorum: bool) -> Path:
    key = save_key(tmp_path / "control.key", KEY, private=True, overwrite=True)
    lines = ["[[pools]]", 'name = "api"', f'domains = ["{A}", "{B}"]',
             "[control]", f'signing_key_file = "{key}"']
    if quorum:
        lines += ["[control.quorum]", 'prometheus_url = "http://127.0.0.1:9"', "for_seconds = 90",
                  "min_locations = 3"]
    path = tmp_path / "publisher.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_print_query_uses_the_file(tmp_path: Path) -> None:
    """--print-query prints the votes query and the decision for the file's for_seconds and min_locations."""
    result = CliRunner().invoke(main, ["control", "quorum", str(_write(tmp_path, True)), "--print-query"])
    assert result.exit_code == 0, result.output
    assert location_votes(90) in result.output and ">= bool 3" in result.output


def test_help_shows_the_query() -> None:
    """`failover-agent control quorum --help` shows the PromQL operators can paste into Grafana."""
    result = CliRunner().invoke(main, ["control", "quorum", "--help"])
    assert result.exit_code == 0
    for line in location_votes(60).splitlines():
        assert line.strip() in result.output


def test_run_on_a_publisher_file_is_a_one_line_usage_error(tmp_path: Path) -> None:
    """`failover-agent run` on a file with [control.quorum]: exit 2, the publisher's command, no traceback."""
    path = _write(tmp_path, True)
    result = CliRunner().invoke(main, ["run", str(path)])
    assert result.exit_code == 2, result.output
    assert f"failover-agent control quorum {path}" in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_file_without_quorum_is_a_usage_error(tmp_path: Path) -> None:
    """No [control.quorum]: exit 2 with what is missing."""
    result = CliRunner().invoke(main, ["control", "quorum", str(_write(tmp_path, False))])
    assert result.exit_code == 2 and "no [control.quorum]" in result.output


def test_the_document_json_is_what_verify_prints(tmp_path: Path) -> None:
    """`failover-agent control verify` prints the quorum member of a publisher's document."""
    publisher, _ = _publisher(tmp_path, Scripted(ok(_votes(("api.example.com", "443", "eu"),
                                                           ("api.example.com", "443", "us")))))
    _run(publisher, 1)
    doc_file = tmp_path / "doc.jws"
    doc_file.write_bytes(publisher.document() or b"")
    pub = save_key(tmp_path / "control.pub.jwk", KEY.public(), private=False)
    result = CliRunner().invoke(main, ["control", "verify", str(doc_file), "--key", str(pub),
                                       "--now", "1800000001"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["quorum"]["agreed"] == {"api": {A: ["eu", "us"]}}
