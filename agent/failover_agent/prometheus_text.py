"""``/metrics`` without prometheus_client's object model: a MetricReader that renders text.

The OpenTelemetry Prometheus exporter turns every collection into prometheus_client
metric families (one ``Sample`` object per line) and then renders them, every label of a
family on every series. Measured side by side after the cardinality cuts of issue 14
(``python -m benchmarks agent``, part C: one MeterProvider with both readers, the agent
metrics of 1,000 domains, 14,501 series, scope labels on for both, 2026-12-01 13:14 UTC):
this reader renders in 252 ms of CPU, a 2.61 MiB body, 6.4 MiB peak Python allocation; the
official exporter with ``generate_latest`` in 791 ms (3.1x), 3.26 MiB, 11.1 MiB. At one
scrape per 15 s that is 1.7 % of a core against 5.3 %, so the hand-written renderer stays.
Rerun once this reader stopped caching each series' label text (3.2 MiB of the agent's
memory at 1,000 domains; 2026-12-01 17:25 UTC, a busier machine that hour): 390 ms, 5.6 MiB
peak, against the official exporter's 936 ms (2.4x), 11.2 MiB. This reader collects the same ``MetricsData``
and writes the text exposition directly, with the exporter's naming rules (sanitised names, the unit suffix,
``_total`` for monotonic sums, cumulative non-monotonic sums as gauges, histograms as
``_bucket``/``_count``/``_sum``, the ``target_info`` metric and the ``otel_scope_name``
label), so every series keeps its name and labels. Empty label values are left out
(Prometheus treats ``l=""`` as no label at all).

``scope_info=False`` leaves the ``otel_scope_*`` labels out, as the exporters' option
``without_scope_info`` (Go: ``WithoutScopeInfo``; declarative configuration:
``scope_info_enabled: false``) does: each metric name belongs to one scope
(:mod:`pytest_failover.semconv`), so no two series collide, and at 1,000 domains the scope
name, version and schema URL were some 120 bytes of every line, 40 % of the scrape.
OTLP exports keep the scopes; the agent turns them off on ``/metrics``
(``[exporters.prometheus] scope_info_enabled``).

Instruments whose values the agent holds need not go through the SDK at all: each of
``sources`` returns them as :class:`Family` values (observations, as an observable gauge's
callback gives them) and the reader renders them with the same naming rules. The SDK keeps
per series, between collections, a hash key, a copy of its attributes and an aggregation
with its own lock: for the agent's 8,500 gauge series at 1,000 domains that was 13 MiB of
its RSS (95 MiB with them, 82 without), and for the failover client's counters and breaker
gauges (:mod:`failover_agent.client_meter`) 3.5 MiB more. An instrument the SDK also collects
(for OTLP) is rendered once, from ``sources``.
"""

from __future__ import annotations

import ctypes
import importlib.util
import math
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from json import dumps
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics._internal.instrument import Gauge as SyncGauge
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    HistogramDataPoint,
    MetricReader,
    MetricsData,
    Sum,
)
from opentelemetry.sdk.metrics.export import Histogram as HistogramData
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from pytest_failover.semconv import (
    PROMETHEUS_SCOPE_NAME,
    PROMETHEUS_SCOPE_PREFIX,
    PROMETHEUS_SCOPE_SCHEMA_URL,
    PROMETHEUS_SCOPE_VERSION,
    PROMETHEUS_TARGET_INFO,
)

__all__ = [
    "CARDINALITY_LIMIT",
    "PROMETHEUS_CONTENT_TYPE",
    "Family",
    "PrometheusTextReader",
    "cardinality_limits",
    "release_freed_memory",
]

_NAMING_RULES = "opentelemetry.exporter.prometheus._mapping"


def _naming_rules() -> ModuleType:
    """The official exporter's naming rules (its ``_mapping`` module, which needs only ``re``),
    loaded without its package: the package's ``__init__`` imports prometheus_client and,
    through it, ``http.server`` and ``wsgiref`` (21 modules, 1.4 MiB of the agent's RSS) for
    a reader the agent does not use. A process that imported the package has the module."""
    loaded = sys.modules.get(_NAMING_RULES)
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec(_NAMING_RULES.rpartition(".")[0])  # found, not run
    if package is None or package.origin is None:
        raise ModuleNotFoundError(f"No module named {_NAMING_RULES!r}", name=_NAMING_RULES)
    spec = importlib.util.spec_from_file_location(
        "failover_agent._prometheus_naming", Path(package.origin).with_name("_mapping.py"))
    assert spec is not None and spec.loader is not None  # a .py file path always has both
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_rules = _naming_rules()
map_unit: Callable[[str], str] = _rules.map_unit
sanitize_attribute: Callable[[str], str] = _rules.sanitize_attribute
sanitize_full_name: Callable[[str], str] = _rules.sanitize_full_name
del _rules

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The media type of the text exposition format this module renders."""

# Series per metric stream before the SDK folds the rest into one overflow series. The
# SDK's default (2,000) is below what 1,000 domains produce (domain x phase, domain x
# check), so the agent raises it for every instrument kind.
CARDINALITY_LIMIT = 100_000

_INSTRUMENTS: tuple[type, ...] = (
    Counter, UpDownCounter, Histogram, SyncGauge, ObservableCounter, ObservableUpDownCounter, ObservableGauge,
)


def cardinality_limits() -> dict[type, int]:
    """The ``cardinality_limits`` argument every agent reader gets."""
    return {kind: CARDINALITY_LIMIT for kind in _INSTRUMENTS}


def _float(value: float) -> str:
    """prometheus_client's ``floatToGoString``."""
    if value.__class__ is int and 0 <= value < 1_000_000:  # counts: the common case
        return f"{value}.0"
    d = float(value)
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if d != d:
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _escape_value(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def release_freed_memory() -> None:
    """Hand the heap freed by a large render back to the OS (glibc only; else a no-op).

    A scrape at 1,000 domains allocates some 30 MB for a moment; without this, glibc
    keeps most of it mapped and the agent's RSS stays that much higher."""
    global _TRIM
    if _TRIM is None:
        try:
            _TRIM = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _TRIM = False
    if _TRIM:
        _TRIM(0)


_TRIM: Any = None


@dataclass(frozen=True, slots=True)
class Family:
    """One instrument rendered without the SDK: its name, unit and description, its series
    now (as observations: a value and its attributes), the instrumentation scope it belongs
    to, and whether it is a ``gauge`` or a (monotonic) ``counter``."""

    name: str
    unit: str
    description: str
    observations: Iterable[Observation]  # read once, as the renderer reaches it
    scope: InstrumentationScope
    kind: Literal["gauge", "counter"] = "gauge"


class _Family:
    __slots__ = ("help", "lines", "name", "type")

    def __init__(self, name: str, help_text: str, typ: str) -> None:
        self.name = name
        self.help = help_text
        self.type = typ
        self.lines: list[bytes] = []  # encoded as soon as rendered: few objects alive


class PrometheusTextReader(MetricReader):
    """Collects on demand (``render()``) and returns the text exposition format 0.0.4."""

    def __init__(self, *, scope_info: bool = True) -> None:
        """``scope_info``: label every series with its ``otel_scope_*`` (the official exporter's way)."""
        self.scope_info = scope_info
        cumulative = AggregationTemporality.CUMULATIVE
        super().__init__(
            preferred_temporality={kind: cumulative for kind in _INSTRUMENTS},
            cardinality_limits=cardinality_limits(),
        )
        self._latest: MetricsData | None = None
        self._lock = threading.Lock()
        self.sources: dict[str, Callable[[], Iterable[Family]]] = {}
        """Instruments to render straight from their source, not from the SDK, by who gives them
        (the agent's gauges, the failover client's counters: see the module docstring)."""
        self.resource: Resource | None = None
        """The provider's resource, for ``target_info`` when the SDK collected nothing."""
        self._label_keys: dict[str, str] = {}
        # The label text of a series is built anew at each render (about 3 us a series, 35 ms
        # a scrape at 1,000 domains): a cache of it by series was 3.2 MiB of the agent's memory.

    def _receive_metrics(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> None:
        self._latest = metrics_data

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass

    def render(self) -> bytes:
        """Collect now and render every metric as one body."""
        return b"".join(self.render_chunks())

    def render_chunks(self, size: int = 1 << 18) -> list[bytes]:
        """Collect now and render every metric as pieces of about ``size`` bytes, so a
        server can send them one by one instead of holding one more copy of the whole
        body (thread-safe; one collection at a time)."""
        with self._lock:
            self._latest = None
            self.collect()
            data, self._latest = self._latest, None
            if data is None and not self.sources:
                return []
            chunks: list[bytes] = []
            batch: list[bytes] = []
            filled = 0
            for piece in self._text(data):
                batch.append(piece)
                filled += len(piece)
                if filled >= size:
                    chunks.append(b"".join(batch))
                    batch, filled = [], 0
            if batch:
                chunks.append(b"".join(batch))
        del data, batch
        release_freed_memory()
        return chunks

    # --- rendering ---------------------------------------------------------------------

    def _key(self, key: str) -> str:
        out = self._label_keys.get(key)
        if out is None:
            out = self._label_keys[key] = sanitize_attribute(key)
        return out

    def _series(self, attributes: Mapping[str, Any] | None, scope: Mapping[str, str]) -> str:
        """The label text of one series."""
        if not attributes:
            return self._label_text(scope)
        return self._label_text(self._labels(attributes, scope))

    def _labels(self, attributes: Mapping[str, Any], scope: Mapping[str, str]) -> dict[str, str]:
        labels: dict[str, str] = dict(scope) if scope else {}
        keys = self._label_keys
        for key, value in attributes.items():
            name = keys.get(key)
            if name is None:
                name = self._key(key)
            # str and int (not bool: JSON's true/false) need no encoder
            labels[name] = value if isinstance(value, str) else (
                str(value) if type(value) is int else dumps(value, default=str))
        return labels

    @staticmethod
    def _label_text(labels: Mapping[str, str]) -> str:
        return ",".join([f'{k}="{_escape_value(v)}"' for k, v in sorted(labels.items()) if v != ""])

    def _text(self, data: MetricsData | None) -> Iterator[bytes]:
        families: dict[str, _Family] = {}
        target: dict[str, str] = {}
        rendered: set[str] = set()
        # the instruments from their sources first, one at a time: its observations (an object
        # and an attribute mapping per series) are dropped as soon as its lines are encoded
        for source in list(self.sources.values()):
            for given in source():
                rendered.add(given.name)
                name = self._name(given.name, given.unit, given.kind)
                # prometheus_client names a counter family by its sample (``..._total``) in text 0.0.4
                sample = name + "_total" if given.kind == "counter" else name
                scope = self._scope_labels(given.scope) if self.scope_info else {}
                family = families.get(name)
                if family is None:
                    family = families[name] = _Family(sample, given.description, given.kind)
                # encoded 256 lines at a time: a family's observations (the phases are 5,000 at
                # 1,000 domains) are made one by one, and each is dropped once written
                batch: list[str] = []
                for o in given.observations:
                    batch.append(f"{sample}{{{self._series(o.attributes, scope)}}} {_float(o.value)}\n")
                    if len(batch) == 256:
                        family.lines.append("".join(batch).encode())
                        batch.clear()
                if batch:
                    family.lines.append("".join(batch).encode())
        resources = [rm.resource for rm in data.resource_metrics] if data is not None else \
            [] if self.resource is None else [self.resource]
        for resource in resources:
            for key, value in resource.attributes.items():
                target[self._key(key)] = value if isinstance(value, str) else dumps(value, default=str)
        for rm in () if data is None else data.resource_metrics:
            for sm in rm.scope_metrics:
                scope = self._scope_labels(sm.scope) if self.scope_info else {}
                for metric in sm.metrics:
                    if metric.name not in rendered:
                        self._metric(metric, scope, families)
        if target:
            yield (f"# HELP {PROMETHEUS_TARGET_INFO} Target metadata\n"
                   f"# TYPE {PROMETHEUS_TARGET_INFO} gauge\n").encode()
            yield f"{PROMETHEUS_TARGET_INFO}{{{self._label_text(target)}}} 1.0\n".encode()
        for family in families.values():
            yield (f"# HELP {family.name} {_escape_help(family.help)}\n"
                   f"# TYPE {family.name} {family.type}\n").encode()
            yield from family.lines
            family.lines.clear()  # what is batched need not stay twice

    def _scope_labels(self, scope: Any) -> dict[str, str]:
        labels = {PROMETHEUS_SCOPE_NAME: scope.name or "", PROMETHEUS_SCOPE_VERSION: scope.version or "",
                  PROMETHEUS_SCOPE_SCHEMA_URL: scope.schema_url or ""}
        for key, value in (scope.attributes or {}).items():
            labels[self._key(PROMETHEUS_SCOPE_PREFIX + key)] = value if isinstance(value, str) else dumps(value)
        return labels

    @staticmethod
    def _name(instrument: str, unit: str, typ: str = "gauge") -> str:
        """The family name of an instrument (a counter's without its ``_total``)."""
        name = sanitize_full_name(instrument)
        if typ == "counter" and name.endswith("_total"):  # as prometheus_client: strip, then the unit
            name = name[:-6]
        suffix = map_unit(unit or "")
        if suffix and not name.endswith("_" + suffix):
            name += "_" + suffix
        return name

    def _metric(self, metric: Any, scope: Mapping[str, str], families: dict[str, _Family]) -> None:
        data = metric.data
        help_text = metric.description or ""
        if isinstance(data, Sum) and (data.is_monotonic or data.aggregation_temporality
                                      != AggregationTemporality.CUMULATIVE):
            typ = "counter"
        elif isinstance(data, (Gauge, Sum)):
            typ = "gauge"
        elif isinstance(data, HistogramData):
            typ = "histogram"
        else:
            return
        name = self._name(metric.name, metric.unit, typ)
        sample = name + "_total" if typ == "counter" else name
        family = families.get(name)
        if family is None:
            # prometheus_client names a counter family by its sample (``..._total``) in text 0.0.4
            family = families[name] = _Family(sample if typ == "counter" else name, help_text, typ)
        lines = family.lines
        if typ != "histogram":
            lines.append("".join(
                f"{sample}{{{self._series(point.attributes, scope)}}} {_float(point.value)}\n"
                for point in data.data_points).encode())
            return
        les: dict[tuple[float, ...], list[str]] = {}
        for point in data.data_points:
            assert isinstance(point, HistogramDataPoint)
            labels = self._series(point.attributes, scope)
            prefix = f"{name}_bucket{{{labels}," if labels else f"{name}_bucket{{"
            bounds = tuple(point.explicit_bounds)
            suffixes = les.get(bounds)
            if suffixes is None:
                suffixes = les[bounds] = [f'le="{bound}"}} ' for bound in (*bounds, "+Inf")]
            out = []
            total = 0
            for suffix, count in zip(suffixes, point.bucket_counts, strict=False):
                total += count
                out.append(f"{prefix}{suffix}{_float(total)}\n")
            out.append(f"{name}_count{{{labels}}} {_float(total)}\n")
            out.append(f"{name}_sum{{{labels}}} {_float(point.sum)}\n")
            lines.append("".join(out).encode())
