"""The pytest plugin: fake domain outages and failover telemetry in any test suite.

Loaded through the ``pytest11`` entry point in every pytest run of anyone who
installs the package, so this module imports only pytest and the standard
library. The simulator (trustme, servers), the OpenTelemetry SDK and the OTLP
exporter are imported when a fixture or an option first needs them.

Face of the plugin:

* fixture ``fake_domains``  -> :class:`pytest_failover._plugin_domains.FakeDomainsFixture`
* marker ``@pytest.mark.outage(host, fault, /, *args, **kwargs)``
* fixture ``failover_telemetry`` -> :class:`pytest_failover.telemetry_capture.FailoverTelemetry`
* ini ``failover_fresh_state`` (true by default): each test starts with the failover
  clients' learned state forgotten (``_failover_fresh_state``)
* ini ``failover_testing`` (false by default): testing mode for the run, no wait before a
  retry (:func:`pytest_failover.set_testing`)
* options ``--failover-block-unknown-hosts`` (ini ``failover_block_unknown_hosts``)
  and ``--failover-otlp-endpoint`` (ini ``failover_otlp_endpoint``; ``none``: off). With
  neither, an ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`` in the environment turns the session
  trace on (:func:`pytest_failover._plugin_otlp.environment_requests_export`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

# Light on purpose (pytest and the standard library only): exported for annotations,
# ``def test_x(fake_domains: FakeDomainsFixture) -> None``.
from ._plugin_domains import FakeDomainsFixture

if TYPE_CHECKING:
    import ssl

    from ._plugin_domains import SessionDomains
    from .telemetry_capture import FailoverTelemetry

__all__ = ["FakeDomainsFixture", "failover_telemetry", "fake_domains", "fake_domains_ssl_context"]

OUTAGE_MARKER_HELP = (
    "outage(host, fault, /, *args, **kwargs): while the test body runs, the fake domain "
    "`host` (registered if needed) suffers `fault`, a fault name from "
    "pytest_failover.faults (e.g. 'dns_nxdomain', 'refused', 'read_timeout', "
    "'tls_expired') called with *args/**kwargs (e.g. outage('api.example.com', "
    "'status', 503, headers={'Retry-After': '1'})), or a fault object. "
    "Uses the fake_domains fixture; several markers may name several hosts."
)

_BLOCK_HELP = (
    "fail any test that resolves a hostname other than a fake domain or loopback, "
    "so a test can never reach the internet by accident."
)
_OTLP_HELP = (
    "export the test session's spans over OTLP to this endpoint "
    "(http://host:4318 for OTLP/HTTP, grpc://host:4317 for OTLP/gRPC): "
    "each test a span, each injected fault an event, the failover client's spans as children. "
    "Without it, OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT turns the export on; 'none' turns it off."
)

_FRESH_HELP = (
    "before each test, forget what every failover client in the process learned from earlier "
    "tests (breakers, the domain serving each pool, retry budgets, slow-call counts, stale copies), "
    "so that no test's result depends on the tests before it; false keeps that state."
)

_TESTING_HELP = (
    "testing mode for the run (pytest_failover.set_testing): every failover client retries at "
    "once, without the backoff's or Retry-After's wait, each retry decided as if it had waited."
)

_SESSION_DOMAINS_KEY = pytest.StashKey["SessionDomains"]()
_RESTORE_TESTING_KEY = pytest.StashKey[contextlib.AbstractContextManager[None]]()
_FRESH_STATE_KEY = pytest.StashKey[bool]()
_TEST_DOMAINS_KEY = pytest.StashKey["FakeDomainsFixture"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("failover", "pytest-failover (fake domain outages)")
    group.addoption(
        "--failover-block-unknown-hosts",
        action="store_true",
        default=None,
        dest="failover_block_unknown_hosts",
        help=_BLOCK_HELP,
    )
    group.addoption(
        "--failover-otlp-endpoint",
        action="store",
        default=None,
        dest="failover_otlp_endpoint",
        metavar="URL",
        help=_OTLP_HELP,
    )
    parser.addini("failover_block_unknown_hosts", _BLOCK_HELP, type="bool", default=False)
    parser.addini("failover_otlp_endpoint", _OTLP_HELP, type="string", default="")
    parser.addini("failover_fresh_state", _FRESH_HELP, type="bool", default=True)
    parser.addini("failover_testing", _TESTING_HELP, type="bool", default=False)


def _block_unknown_hosts(config: pytest.Config) -> bool:
    flag = config.getoption("failover_block_unknown_hosts")
    if flag is not None:
        return bool(flag)
    return _ini_flag(config, "failover_block_unknown_hosts")


def _ini_flag(config: pytest.Config, name: str) -> bool:
    """The ini option ``name``, a flag: a usage error naming it when it is neither true
    nor false (pytest's own error names only the value: a ValueError before pytest 9, a
    UsageError since)."""
    try:
        return bool(config.getini(name))
    except (ValueError, pytest.UsageError) as exc:
        raise pytest.UsageError(f"ini option {name}: {exc} (expected true or false)") from None


def _otlp_endpoint(config: pytest.Config) -> str | None:
    endpoint = config.getoption("failover_otlp_endpoint") or config.getini(
        "failover_otlp_endpoint"
    )
    return str(endpoint) if endpoint else None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", OUTAGE_MARKER_HELP)
    _register_session_trace(config)
    config.stash[_FRESH_STATE_KEY] = _ini_flag(config, "failover_fresh_state")
    if _ini_flag(config, "failover_testing"):
        from ._testing import set_testing

        restore = set_testing(True)
        restore.__enter__()  # left at pytest_unconfigure: the mode the run found comes back
        config.stash[_RESTORE_TESTING_KEY] = restore
    if _block_unknown_hosts(config):
        from ._plugin_block import UnknownHostBlocker

        config.pluginmanager.register(
            UnknownHostBlocker(lambda: _session_domains(config)), "failover-block-unknown-hosts"
        )


def _register_session_trace(config: pytest.Config) -> None:
    """The option's or ini's endpoint (``none``: off); without either, the OTEL_* environment's."""
    from ._plugin_otlp import (
        OTLP_OFF,
        MissingExporterError,
        SessionTraceExporter,
        environment_requests_export,
    )

    endpoint = _otlp_endpoint(config)
    if endpoint is not None and endpoint.strip().lower() == OTLP_OFF:
        return
    if endpoint is None and not environment_requests_export():
        return
    try:
        exporter = SessionTraceExporter(config, endpoint)
    except MissingExporterError as exc:
        if endpoint is not None:
            raise pytest.UsageError(str(exc)) from exc
        # Asked by the environment alone (set for the code under test, perhaps): not an error.
        config.issue_config_time_warning(
            pytest.PytestConfigWarning(f"pytest-failover: no session trace over OTLP: {exc}"),
            stacklevel=2,
        )
        return
    config.pluginmanager.register(exporter, "failover-otlp-session")


def pytest_unconfigure(config: pytest.Config) -> None:
    restore = config.stash.get(_RESTORE_TESTING_KEY, None)
    if restore is not None:
        restore.__exit__(None, None, None)
        del config.stash[_RESTORE_TESTING_KEY]
    session_domains = config.stash.get(_SESSION_DOMAINS_KEY, None)
    if session_domains is not None:
        session_domains.close()
        del config.stash[_SESSION_DOMAINS_KEY]


def _session_domains(config: pytest.Config) -> SessionDomains:
    """The session's servers, started the first time a test asks for them."""
    existing = config.stash.get(_SESSION_DOMAINS_KEY, None)
    if existing is None:
        from ._plugin_domains import SessionDomains

        existing = SessionDomains(block_unknown_hosts=_block_unknown_hosts(config))
        config.stash[_SESSION_DOMAINS_KEY] = existing
    return existing


@pytest.fixture
def fake_domains(request: pytest.FixtureRequest) -> Iterator[FakeDomainsFixture]:
    """Fake domains on real loopback servers: ``add``, ``fail``, ``heal``, ``requests``, ``ca``.

    The servers live for the session; each test starts with no registered domain,
    no fault and no recorded request. Name resolution and CA trust are patched
    only while the test runs.
    """
    fixture = FakeDomainsFixture(_session_domains(request.config), request.node)
    fixture.activate()
    request.node.stash[_TEST_DOMAINS_KEY] = fixture
    try:
        yield fixture
    finally:
        del request.node.stash[_TEST_DOMAINS_KEY]
        fixture.deactivate()


@pytest.fixture(scope="session")
def fake_domains_ssl_context(request: pytest.FixtureRequest) -> ssl.SSLContext:
    """A client SSL context trusting the session's test CA (and certifi's roots).

    For clients built once per module or session (an ``httpx.Client`` costs about
    30 ms): ``httpx.Client(verify=fake_domains_ssl_context)``. Clients built inside
    a test that uses ``fake_domains`` trust the test CA without it.
    """
    context: ssl.SSLContext = _session_domains(request.config).domains.ssl_context()
    return context


@pytest.fixture(autouse=True)
def _failover_outage_marker(request: pytest.FixtureRequest) -> None:
    """Pull in ``fake_domains`` for tests marked ``outage``; costs one lookup otherwise."""
    if request.node.get_closest_marker("outage") is None:
        return
    from ._plugin_outage import parse_outage_markers

    # Parsing here turns a bad marker into a setup error naming the test.
    outages = parse_outage_markers(request.node)
    domains: FakeDomainsFixture = request.getfixturevalue("fake_domains")
    domains.schedule_outages(outages)


@pytest.fixture(autouse=True)
def _failover_fresh_state(request: pytest.FixtureRequest) -> None:
    """Each test starts with what the failover clients learned before forgotten
    (``State.forget``), so a session-wide client that failed over in one test serves the
    next from its primary, breakers closed. Free in a run that built no client: their
    module is not even imported then."""
    states = sys.modules.get("pytest_failover._state")
    if states is not None and request.config.stash.get(_FRESH_STATE_KEY, True):
        states.forget_everywhere()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    """Inject the outages of ``@pytest.mark.outage`` after every fixture ran, before the body."""
    domains = item.stash.get(_TEST_DOMAINS_KEY, None)
    if domains is not None:
        domains.apply_scheduled_outages()
    return (yield)


@pytest.fixture
def failover_telemetry(request: pytest.FixtureRequest) -> Iterator[FailoverTelemetry]:
    """The spans and metrics the failover client emitted during this test.

    An in-memory SDK exporter and reader are installed once per process the
    first time a test asks for this fixture; each test sees only its own data.
    """
    from .telemetry_capture import capture_for_test

    with capture_for_test() as telemetry:
        yield telemetry
