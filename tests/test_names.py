"""pytest_failover.semconv is the one place telemetry names are written.

Its Prometheus translation matches the real OpenTelemetry Prometheus exporter; the
client and the agent create exactly the metrics it lists; the dashboards and alert
rules use only names it knows; and no other source file spells a telemetry name.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from failover_agent.metrics import METRIC_NAMES, AgentMetrics
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import (
    CallbackT,
    Counter,
    Histogram,
    Meter,
    MeterProvider,
    NoOpMeter,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
    _Gauge,
)
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.util.types import Attributes
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import pytest_failover
from pytest_failover import semconv
from pytest_failover._telemetry import Telemetry
from pytest_failover.semconv import MetricKind, prometheus_label, prometheus_name
from pytest_failover.uploads._telemetry import UploadTelemetry

ROOT = Path(__file__).resolve().parent.parent
NAMES_MODULE = ROOT / "pytest_failover" / "semconv.py"


# --------------------------------------------------------------------------- the module itself


def _section(title: str) -> list[str]:
    """The constants assigned in one ``# ===== title`` section of the names module."""
    source = NAMES_MODULE.read_text(encoding="utf-8")
    body = source.split(f"# {'=' * 75} {title}\n", 1)[1].split(f"# {'=' * 75} ", 1)[0]
    return re.findall(r"^([A-Z][A-Z0-9_]*): Final = ", body, flags=re.M)


def test_every_attribute_key_constant_is_listed_in_attribute_keys() -> None:
    """ATTRIBUTE_KEYS holds every constant of the attribute-keys section, and nothing else."""
    names = [name for name in _section("attribute keys") if name != "ATTRIBUTE_KEYS"]
    assert len(names) > 30
    assert {getattr(semconv, name) for name in names} == semconv.ATTRIBUTE_KEYS


def test_every_metric_name_constant_is_in_the_registry() -> None:
    """Each metric-name constant has its kind, unit and scope in METRICS, and nothing else is there."""
    names = [name for name in _section("metric names and units") if not name.startswith("UNIT_")]
    assert {getattr(semconv, name) for name in names} == set(semconv.METRICS)


def test_names_come_from_the_semantic_conventions_package() -> None:
    """The conventions' names are the opentelemetry-semantic-conventions constants themselves."""
    from opentelemetry.semconv.attributes import (
        error_attributes,
        http_attributes,
        server_attributes,
        url_attributes,
    )
    from opentelemetry.semconv.metrics import http_metrics

    assert semconv.HTTP_REQUEST_METHOD is http_attributes.HTTP_REQUEST_METHOD
    assert semconv.HTTP_RESPONSE_STATUS_CODE is http_attributes.HTTP_RESPONSE_STATUS_CODE
    assert semconv.HTTP_REQUEST_RESEND_COUNT is http_attributes.HTTP_REQUEST_RESEND_COUNT
    assert semconv.SERVER_ADDRESS is server_attributes.SERVER_ADDRESS
    assert semconv.SERVER_PORT is server_attributes.SERVER_PORT
    assert semconv.ERROR_TYPE is error_attributes.ERROR_TYPE
    assert semconv.URL_FULL is url_attributes.URL_FULL
    assert semconv.HTTP_CLIENT_REQUEST_DURATION is http_metrics.HTTP_CLIENT_REQUEST_DURATION


def test_the_names_module_is_public_and_lazy() -> None:
    """``pytest_failover.semconv`` is reachable from the package, as the agent needs."""
    assert pytest_failover.semconv is semconv


def test_duration_buckets_are_the_recommended_ones() -> None:
    """The semconv's recommended buckets."""
    assert semconv.DURATION_BUCKETS == (
        0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10,
    )


def test_every_counter_has_a_unit() -> None:
    """Counters say what they count (a unit or an annotation such as ``{run}``)."""
    assert [m.name for m in semconv.METRICS.values() if m.kind == "counter" and not m.unit] == []


def test_no_attribute_becomes_a_reserved_prometheus_label() -> None:
    """No attribute turns into a label Prometheus sets itself (``job``, ``instance``) or reserves (``__*``)."""
    labels = {prometheus_label(key) for key in semconv.ATTRIBUTE_KEYS}
    assert not labels & {"job", "instance", "le", "quantile"}
    assert not [label for label in labels if label.startswith("__")]


# --------------------------------------------------------------------------- Prometheus spelling

_EXTRA_CASES: list[tuple[str, str, MetricKind]] = [
    ("foo.bar_total", "s", "counter"),
    ("req.time", "ms", "histogram"),
    ("mem.used", "By", "updowncounter"),
    ("cpu.ratio", "1", "gauge"),
    ("disk.full", "%", "gauge"),
    ("packets.in", "{packet}", "counter"),
    ("call.duration_seconds", "s", "histogram"),
    ("a-b/c.d", "", "counter"),
]


def _exported_samples(name: str, unit: str, kind: MetricKind) -> set[str]:
    """The series names the OpenTelemetry Prometheus exporter writes for one metric."""
    registry = CollectorRegistry(auto_describe=True)
    provider = SdkMeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    meter = provider.get_meter("names-test")
    if kind == "counter":
        meter.create_counter(name, unit=unit).add(1)
    elif kind == "updowncounter":
        meter.create_up_down_counter(name, unit=unit).add(1)
    elif kind == "histogram":
        meter.create_histogram(name, unit=unit).record(0.1)
    else:
        meter.create_gauge(name, unit=unit).set(1)
    text = generate_latest(registry).decode()
    provider.shutdown()
    return {
        sample.name
        for family in text_string_to_metric_families(text)
        if family.name != semconv.PROMETHEUS_TARGET_INFO
        for sample in family.samples
    }


@pytest.mark.parametrize(
    ("name", "unit", "kind"),
    [(m.name, m.unit, m.kind) for m in semconv.METRICS.values()] + _EXTRA_CASES,
)
def test_prometheus_name_is_what_the_exporter_writes(name: str, unit: str, kind: MetricKind) -> None:
    """prometheus_name() gives the exporter's name: the series, or a histogram's base name."""
    expected = _exported_samples(name, unit, kind)
    base = prometheus_name(name, unit, kind)
    if kind == "histogram":
        assert expected == {f"{base}_bucket", f"{base}_sum", f"{base}_count"}
    else:
        assert expected == {base}


def test_metric_samples_are_the_exported_series() -> None:
    """Metric.samples lists every series Prometheus stores for the metric."""
    for metric in semconv.METRICS.values():
        assert set(metric.samples) == _exported_samples(metric.name, metric.unit, metric.kind)


def test_documented_prometheus_spellings() -> None:
    """The spellings the design document and the dashboards promise."""
    metrics = semconv.METRICS
    assert metrics[semconv.FAILOVER_ATTEMPTS].prometheus == "failover_attempts_total"
    assert metrics[semconv.HTTP_CLIENT_REQUEST_DURATION].prometheus == "http_client_request_duration_seconds"
    assert prometheus_label(semconv.FAILOVER_POOL) == "failover_pool"


def test_prometheus_label_is_what_the_exporter_writes() -> None:
    """prometheus_label() gives the exporter's label for every attribute key (and odd ones)."""
    keys = [*sorted(semconv.ATTRIBUTE_KEYS), "a-b/c.d", "9lives", "x..y"]
    registry = CollectorRegistry(auto_describe=True)
    provider = SdkMeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    gauge = provider.get_meter("names-test").create_gauge("labels")
    for key in keys:
        gauge.set(1, {key: "v"})
    text = generate_latest(registry).decode()
    provider.shutdown()
    exported = [  # the exporter gives every series of a family every label, most of them empty
        [label for label, value in sample.labels.items() if value == "v"]
        for family in text_string_to_metric_families(text)
        if family.name == "labels"
        for sample in family.samples
    ]
    assert sorted(exported) == sorted([prometheus_label(key)] for key in keys)


# --------------------------------------------------------------------------- what is emitted


class _RecordingMeter(NoOpMeter):
    """A no-op meter that remembers every instrument created through it."""

    def __init__(self, name: str, created: list[tuple[str, str, MetricKind, str, Any]]) -> None:
        super().__init__(name)
        self._created = created

    def _note(self, name: str, kind: MetricKind, unit: str, buckets: Any = None) -> None:
        self._created.append((self.name, name, kind, unit, buckets))

    def create_counter(self, name: str, unit: str = "", description: str = "") -> Counter:
        self._note(name, "counter", unit)
        return super().create_counter(name, unit, description)

    def create_up_down_counter(self, name: str, unit: str = "", description: str = "") -> UpDownCounter:
        self._note(name, "updowncounter", unit)
        return super().create_up_down_counter(name, unit, description)

    def create_gauge(self, name: str, unit: str = "", description: str = "") -> _Gauge:
        self._note(name, "gauge", unit)
        return super().create_gauge(name, unit, description)

    def create_histogram(
        self,
        name: str,
        unit: str = "",
        description: str = "",
        *,
        explicit_bucket_boundaries_advisory: Sequence[float] | None = None,
    ) -> Histogram:
        self._note(name, "histogram", unit, explicit_bucket_boundaries_advisory)
        return super().create_histogram(
            name, unit, description, explicit_bucket_boundaries_advisory=explicit_bucket_boundaries_advisory
        )

    def create_observable_counter(
        self, name: str, callbacks: Sequence[CallbackT] | None = None, unit: str = "", description: str = ""
    ) -> ObservableCounter:
        self._note(name, "counter", unit)
        return super().create_observable_counter(name, callbacks, unit, description)

    def create_observable_up_down_counter(
        self, name: str, callbacks: Sequence[CallbackT] | None = None, unit: str = "", description: str = ""
    ) -> ObservableUpDownCounter:
        self._note(name, "updowncounter", unit)
        return super().create_observable_up_down_counter(name, callbacks, unit, description)

    def create_observable_gauge(
        self, name: str, callbacks: Sequence[CallbackT] | None = None, unit: str = "", description: str = ""
    ) -> ObservableGauge:
        self._note(name, "gauge", unit)
        return super().create_observable_gauge(name, callbacks, unit, description)


class _RecordingProvider(MeterProvider):
    def __init__(self) -> None:
        self.created: list[tuple[str, str, MetricKind, str, Any]] = []

    def get_meter(
        self,
        name: str,
        version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes = None,
    ) -> Meter:
        return _RecordingMeter(name, self.created)


def _check_created(created: list[tuple[str, str, MetricKind, str, Any]], scope: str) -> None:
    made = {name: (meter, kind, unit) for meter, name, kind, unit, _ in created}
    assert len(made) == len(created), "an instrument was created twice"
    expected = {m.name: (m.scope, m.kind, m.unit) for m in semconv.METRICS.values() if m.scope == scope}
    assert made == expected


def test_the_client_creates_exactly_the_listed_metrics() -> None:
    """Every client instrument has the name, kind, unit and meter the registry gives it."""
    provider = _RecordingProvider()
    Telemetry(meter_provider=provider)
    _check_created(provider.created, semconv.CLIENT_SCOPE)
    histograms = [buckets for _, _, kind, _, buckets in provider.created if kind == "histogram"]
    assert histograms and all(list(b) == list(semconv.DURATION_BUCKETS) for b in histograms)


def test_the_agent_creates_exactly_the_listed_metrics() -> None:
    """Every agent instrument has the name, kind, unit and meter the registry gives it."""
    provider = _RecordingProvider()
    AgentMetrics(provider, lambda: None, None)
    _check_created(provider.created, semconv.AGENT_SCOPE)
    assert tuple(METRIC_NAMES) == semconv.AGENT_METRIC_NAMES


def test_the_uploader_creates_exactly_the_listed_metrics() -> None:
    """Every upload instrument has the name, kind, unit and meter the registry gives it."""
    provider = _RecordingProvider()
    UploadTelemetry(None, provider)
    _check_created(provider.created, semconv.UPLOAD_SCOPE)


# --------------------------------------------------------------------------- dashboards and alerts

_PROM_TOKEN = re.compile(r"(?<![\w.-])(?:failover|http|server|probe|error|tls|otel|target)_[a-z0-9_]+\b")
_OUR_LABELS = {prometheus_label(key) for key in semconv.ATTRIBUTE_KEYS} | {
    semconv.PROMETHEUS_SCOPE_NAME,
    semconv.PROMETHEUS_SCOPE_VERSION,
    semconv.PROMETHEUS_SCOPE_SCHEMA_URL,
}
_OUR_SERIES = {sample for m in semconv.METRICS.values() for sample in m.samples} | {
    semconv.PROMETHEUS_TARGET_INFO
}
_OUR_FAMILIES = {m.prometheus for m in semconv.METRICS.values()}


def _values() -> set[str]:
    """Every string the names module holds, value sets included (``error.type`` values...)."""
    out: set[str] = set()
    for name in dir(semconv):
        value = getattr(semconv, name)
        if name.startswith("_"):
            continue
        if isinstance(value, str):
            out.add(value)
        elif isinstance(value, (tuple, frozenset)):
            out |= {item for item in value if isinstance(item, str)}
    return out


#: Alertmanager's own configuration keys that look like our prefixes (dashboards/alertmanager/).
_ALERTMANAGER_KEYS = {"target_matchers", "target_match", "target_match_re"}
_KNOWN_IN_QUERIES = _OUR_SERIES | _OUR_FAMILIES | _OUR_LABELS | _values() | _ALERTMANAGER_KEYS
#: The dashboards, the alert rules and their tests, the provisioning and the demo stack.
_DASHBOARD_FILES = sorted(
    path for path in (ROOT / "dashboards").rglob("*") if path.suffix in {".json", ".yml", ".yaml"}
)


def test_dashboards_and_alert_rules_use_only_known_names() -> None:
    """Every metric and label of dashboards/*.json and the alert rules exists in the names module."""
    unknown: list[str] = []
    used: set[str] = set()
    for path in _DASHBOARD_FILES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for token in _PROM_TOKEN.findall(line):
                used.add(token)
                if token not in _KNOWN_IN_QUERIES:
                    unknown.append(f"{path.relative_to(ROOT)}:{number}: {token}")
    assert not unknown, "names unknown to pytest_failover.semconv:\n" + "\n".join(unknown)
    assert {p.name for p in _DASHBOARD_FILES} >= {"alerts.yml", "alerts_test.yml", "failover-overview.json"}
    assert len(used & _OUR_SERIES) >= 15  # the scan did find the queried series


def test_label_matchers_and_groupings_use_known_labels() -> None:
    """``by (...)``, ``on (...)`` and ``label=~"..."`` in the queries name labels the metrics have."""
    builtin = {"le", "__name__", "job", "instance", "severity", "slo", "alertname"}
    unknown: list[str] = []
    for path in _DASHBOARD_FILES:
        text = path.read_text(encoding="utf-8")
        labels = re.findall(r"\b(?:by|on|without)\s*\(([^)]*)\)", text)
        names = {label.strip() for group in labels for label in group.split(",") if label.strip()}
        names |= set(re.findall(r"[{,]\s*([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*['\"\\]", text))
        unknown += [f"{path.name}: {name}" for name in sorted(names - _OUR_LABELS - builtin)]
    assert not unknown, "labels unknown to pytest_failover.semconv:\n" + "\n".join(unknown)


# --------------------------------------------------------------------------- no name written twice

_SOURCES = ("pytest_failover", "agent", "dashboards", "benchmarks")

#: Literals that must stay literal: (file, literal) -> why.
ALLOWED: dict[tuple[str, str], str] = {
    # The simulator's ASGI handler speaks the ASGI protocol: message types, not telemetry.
    ("pytest_failover/simulator/_handlers.py", "http.request"): "ASGI message type",
    ("pytest_failover/simulator/_handlers.py", "http.disconnect"): "ASGI message type",
    ("pytest_failover/simulator/_handlers.py", "http.response.start"): "ASGI message type",
    ("pytest_failover/simulator/_handlers.py", "http.response.body"): "ASGI message type",
}

#: Literals in files another change owns, to be switched to pytest_failover.semconv there.
#: Remove an entry when its file takes the name from the names module (a stale entry fails).
PENDING: dict[tuple[str, str], str] = {}

# A literal that starts like a name of these namespaces (probe.* and tls.* are left to the
# known names: the agent's config keys and timing marks use those prefixes).
_DOTTED_PREFIX = re.compile(r"^(?:failover|http|server|url|error|network|service|code|test|pytest)\.[a-z]")
_KNOWN_DOTTED = {
    value
    for name in dir(semconv)
    if not name.startswith("_") and isinstance(value := getattr(semconv, name), str) and "." in value
    and not value.startswith("https://")
}
_WORD = re.compile(r"[A-Za-z_:][A-Za-z0-9_:.]*")
_PROM_SUFFIXED = re.compile(r"^(?:failover|http_client)_\w+_(?:total|bucket|sum|count|seconds)$")
# Series, and the labels of our namespaces (server_address, error_type... are also ordinary
# field names of the agent's status page, so they are left out).
_KNOWN_PROM = _OUR_SERIES | _OUR_FAMILIES | {
    label for label in _OUR_LABELS if label.startswith(("failover_", "http_", "probe_", "tls_"))
}


def _literals(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """String constants that are not docstrings (f-string parts included)."""
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def _telemetry_names(text: str) -> list[str]:
    """The telemetry-looking names in one literal."""
    found = [text] if _DOTTED_PREFIX.match(text) else []
    for word in _WORD.findall(text):
        stripped = word.rstrip(".:")
        if stripped in _KNOWN_DOTTED or stripped in _KNOWN_PROM or _PROM_SUFFIXED.match(stripped):
            found.append(stripped)
    return found


def _spelt_names() -> dict[tuple[str, str], list[str]]:
    """(file, literal) -> where, for every literal outside the names module that spells a name."""
    found: dict[tuple[str, str], list[str]] = {}
    for top in _SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            if path == NAMES_MODULE or ".venv" in path.parts:
                continue
            relative = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=relative)
            for line, literal in _literals(tree):
                if _telemetry_names(literal):
                    found.setdefault((relative, literal), []).append(f"{relative}:{line}")
    return found


def test_no_telemetry_name_is_spelt_outside_the_names_module() -> None:
    """Span, metric, attribute and event names, and Prometheus series, come from pytest_failover.semconv."""
    found = _spelt_names()
    offending = [
        f"{where}: {literal!r}"
        for (path, literal), wheres in sorted(found.items())
        if (path, literal) not in ALLOWED and (path, literal) not in PENDING
        for where in wheres
    ]
    assert not offending, (
        "telemetry names written outside pytest_failover/semconv.py (import them from it):\n"
        + "\n".join(offending)
    )


def test_allow_lists_have_no_stale_entries() -> None:
    """Every allowed or pending literal still occurs, so the lists only shrink."""
    found = _spelt_names()
    stale = [f"{path}: {literal!r}" for path, literal in [*ALLOWED, *PENDING] if (path, literal) not in found]
    assert not stale, "remove these entries from tests/test_names.py:\n" + "\n".join(stale)


def test_the_scan_catches_a_spelt_name() -> None:
    """The literal scanner flags dotted names, known names and Prometheus series, and spares prose."""
    assert _telemetry_names("failover.requests")
    assert _telemetry_names("http.request.methd")
    assert _telemetry_names("rate(failover_attempts_total[5m])")
    assert _telemetry_names("failover_pool")
    assert _telemetry_names("counted in failover.agent.telemetry.dropped")
    assert not _telemetry_names("failover_block_unknown_hosts")
    assert not _telemetry_names("api.failover.example")
    assert not _telemetry_names("pytest session starts")


# --------------------------------------------------------------------------- attribute values

#: Values distinct enough to look for: every transport error type but the plain word
#: ``timeout``, the breaker states but ``open`` and ``closed``, the stop reasons but ``done``
#: and ``deadline`` (config keys and ordinary words spell those too).
_DISTINCT_VALUES = (
    (semconv.TRANSPORT_ERROR_TYPES - {semconv.ERROR_TIMEOUT})
    | {semconv.BREAKER_HALF_OPEN, semconv.ERROR_APP}
    | (semconv.STOP_REASONS - {semconv.STOP_DONE, semconv.STOP_DEADLINE})
)

#: (file, literal) -> why it stays literal.
VALUES_ALLOWED: dict[tuple[str, str], str] = {
    ("pytest_failover/faults.py", "connect_timeout"): "a fault's name, which the fault makes happen",
    ("pytest_failover/faults.py", "read_timeout"): "a fault's name, which the fault makes happen",
    ("agent/failover_agent/config.py", "retry_budget"): "a config key, not the stop reason",
}

#: Literals in files another change owns (the request path's rebuild, issue 27): to be taken
#: from pytest_failover.semconv there. Remove an entry when its file does (a stale one fails).
VALUES_PENDING: dict[tuple[str, str], str] = {}


def _spelt_values() -> dict[tuple[str, str], list[str]]:
    """(file, literal) -> where, for every literal outside the names module that is one of
    the distinct attribute values."""
    found: dict[tuple[str, str], list[str]] = {}
    for top in ("pytest_failover", "agent"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if path == NAMES_MODULE or ".venv" in path.parts:
                continue
            relative = path.relative_to(ROOT).as_posix()
            for line, literal in _literals(ast.parse(path.read_text(encoding="utf-8"), filename=relative)):
                if literal in _DISTINCT_VALUES:
                    found.setdefault((relative, literal), []).append(f"{relative}:{line}")
    return found


def test_no_attribute_value_is_spelt_outside_the_names_module() -> None:
    """Error types, breaker states and stop reasons come from pytest_failover.semconv."""
    found = _spelt_values()
    offending = [
        where
        for key, wheres in sorted(found.items())
        if key not in VALUES_ALLOWED and key not in VALUES_PENDING
        for where in wheres
    ]
    assert not offending, "attribute values written outside pytest_failover/semconv.py:\n" + "\n".join(offending)
    stale = [f"{path}: {literal!r}" for path, literal in [*VALUES_ALLOWED, *VALUES_PENDING] if (path, literal) not in found]
    assert not stale, "remove these entries from tests/test_names.py:\n" + "\n".join(stale)


def test_classification_gives_exactly_the_transport_error_types() -> None:
    """Every error type the classifier can give a transport error, from the exception, its
    cause or its message, is one of semconv.TRANSPORT_ERROR_TYPES, and each of those is given."""
    from pytest_failover import _classify

    given = {name for table in (_classify._ERROR_TYPES, _classify._CAUSES) for _, name in table}
    given |= {name for _, name in _classify._MESSAGE_HINTS}
    assert given == semconv.TRANSPORT_ERROR_TYPES


def test_breaker_states_are_the_names_modules() -> None:
    """The breaker's states and gauge values are semconv.BREAKER_STATES and BREAKER_GAUGE."""
    from pytest_failover._breaker import BreakerState

    assert tuple(state.value for state in BreakerState) == semconv.BREAKER_STATES
    assert {state.value: state.gauge for state in BreakerState} == semconv.BREAKER_GAUGE


def test_stop_reasons_are_the_names_modules() -> None:
    """A Stop takes exactly the reasons semconv.STOP_REASONS lists."""
    from pytest_failover._values import Stop

    for reason in semconv.STOP_REASONS:
        assert Stop(reason=reason).reason == reason
    with pytest.raises(ValueError, match=r"Stop\.reason must be one of"):
        Stop(reason="gave_up")
