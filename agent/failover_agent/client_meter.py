"""The failover client's counters and gauges, kept for ``/metrics`` alone, without the SDK.

The pool probes' failover clients record their metrics through the meter provider the agent
gives them. When ``/metrics`` is the only reader (no OTLP, no other reader), the agent gives
them a :class:`ClientMeterProvider`: its counters, up-down counters and gauges keep one number
per attribute set (an observable gauge asks its callbacks as ``/metrics`` is rendered, as the
SDK asks them at a collection), and :meth:`ClientMeterProvider.families` hands them to the ``/metrics``
renderer (:attr:`~failover_agent.prometheus_text.PrometheusTextReader.sources`). The SDK kept
per series a hashed key, a copy of the attributes, an aggregation with its own lock and an
exemplar reservoir: the client's 2,500 series at 1,000 domains (attempts, requests, breaker
states) were 3.5 MiB of the agent's memory, and their collection a part of every scrape's.

What the provider does not keep itself (histograms, observable counters) goes to the
``fallback`` provider, the SDK's, whose views still decide what is dropped. The instruments
are recorded on the agent's event loop; the renderer, in another thread, reads a copy of each
instrument's values (one C-level dict copy, atomic under the GIL).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

from opentelemetry import metrics as metrics_api
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from .prometheus_text import Family

__all__ = ["ClientMeterProvider"]

_Key = tuple[tuple[str, Any], ...]
"""A series: its attributes, sorted by name."""


def _key(attributes: Mapping[str, Any] | None) -> _Key:
    return tuple(sorted(attributes.items())) if attributes else ()


class _Instrument:
    """A counter (``add``, monotonic or not) or a gauge (``set``): a number per series."""

    __slots__ = ("description", "kind", "monotonic", "name", "scope", "unit", "values")

    def __init__(self, name: str, unit: str, description: str, scope: InstrumentationScope,
                 kind: Literal["gauge", "counter"], monotonic: bool) -> None:
        self.name, self.unit, self.description, self.scope = name, unit, description, scope
        self.kind = kind
        self.monotonic = monotonic
        self.values: dict[_Key, float] = {}

    def add(self, amount: float, attributes: Mapping[str, Any] | None = None, context: Any = None) -> None:
        if self.monotonic and amount < 0:  # as the SDK: a counter only grows
            return
        key = _key(attributes)
        self.values[key] = self.values.get(key, 0) + amount

    def set(self, amount: float, attributes: Mapping[str, Any] | None = None, context: Any = None) -> None:
        self.values[_key(attributes)] = amount

    def read(self) -> dict[_Key, float]:
        """Its numbers now: a copy (one C-level dict copy, atomic under the GIL)."""
        return self.values.copy()


_Callback = Callable[[CallbackOptions], Iterable[Observation]]


class _ObservedGauge:
    """An observable gauge: what its callbacks observe, asked each time ``/metrics`` is
    rendered. Its callbacks are its first creator's, as the SDK keeps them: a later creator
    of the same name gets this instrument."""

    __slots__ = ("callbacks", "description", "name", "scope", "unit")
    kind: Literal["gauge"] = "gauge"

    def __init__(self, name: str, unit: str, description: str, scope: InstrumentationScope,
                 callbacks: Sequence[_Callback]) -> None:
        self.name, self.unit, self.description, self.scope = name, unit, description, scope
        self.callbacks = tuple(callbacks)

    def read(self) -> dict[_Key, float]:
        values: dict[_Key, float] = {}
        for callback in self.callbacks:
            for observation in callback(CallbackOptions()):
                values[_key(observation.attributes)] = observation.value
        return values


class _Meter:
    """A meter whose counters, up-down counters and gauges are :class:`_Instrument` values
    (one per name and scope, whoever creates it); a Meter by delegation for the rest."""

    def __init__(self, provider: ClientMeterProvider, scope: InstrumentationScope,
                 fallback: metrics_api.Meter) -> None:
        self._provider = provider
        self._scope = scope
        self._fallback = fallback

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fallback, name)

    def create_counter(self, name: str, unit: str = "", description: str = "") -> _Instrument:
        return self._provider.instrument(self._scope, name, unit, description, "counter", monotonic=True)

    def create_up_down_counter(self, name: str, unit: str = "", description: str = "") -> _Instrument:
        return self._provider.instrument(self._scope, name, unit, description, "gauge", monotonic=False)

    def create_gauge(self, name: str, unit: str = "", description: str = "") -> _Instrument:
        return self._provider.instrument(self._scope, name, unit, description, "gauge", monotonic=False)

    def create_observable_gauge(self, name: str, callbacks: Sequence[_Callback] | None = None,
                                unit: str = "", description: str = "") -> _ObservedGauge:
        return self._provider.observed(self._scope, name, unit, description, callbacks or ())


class ClientMeterProvider(metrics_api.MeterProvider):
    """A meter provider for the failover client, for ``/metrics`` alone (the module docstring);
    ``extra``: attributes every series carries (the probe's location)."""

    def __init__(self, fallback: metrics_api.MeterProvider, extra: Mapping[str, Any]) -> None:
        self._fallback = fallback
        self._extra = dict(extra)
        self._instruments: dict[tuple[InstrumentationScope, str], _Instrument | _ObservedGauge] = {}
        self._meters: dict[InstrumentationScope, _Meter] = {}

    def get_meter(
        self,
        name: str,
        version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> metrics_api.Meter:
        scope = InstrumentationScope(name, version, schema_url, attributes)
        meter = self._meters.get(scope)  # one per scope, as the SDK's (500 transports ask)
        if meter is None:
            fallback = self._fallback.get_meter(name, version, schema_url, attributes)
            meter = self._meters[scope] = _Meter(self, scope, fallback)
        # _Meter is a Meter by delegation (__getattr__), not by inheritance
        return meter  # type: ignore[return-value]

    def instrument(self, scope: InstrumentationScope, name: str, unit: str, description: str,
                   kind: Literal["gauge", "counter"], *, monotonic: bool) -> _Instrument:
        """The instrument ``name`` of ``scope``, made on first use (each transport asks for it)."""
        found = self._instruments.get((scope, name))
        if found is None:
            found = self._instruments[scope, name] = _Instrument(name, unit, description, scope, kind, monotonic)
        if not isinstance(found, _Instrument):
            raise TypeError(f"{name!r} of {scope.name} is an observable gauge already")
        return found

    def observed(self, scope: InstrumentationScope, name: str, unit: str, description: str,
                 callbacks: Sequence[_Callback]) -> _ObservedGauge:
        """The observable gauge ``name`` of ``scope``, made with ``callbacks`` on first use."""
        found = self._instruments.get((scope, name))
        if found is None:
            found = self._instruments[scope, name] = _ObservedGauge(name, unit, description, scope, callbacks)
        if not isinstance(found, _ObservedGauge):
            raise TypeError(f"{name!r} of {scope.name} is a counter or gauge already, not an observable gauge")
        return found

    def families(self) -> Iterator[Family]:
        """Every instrument that has a series, with its values now, one at a time."""
        extra = self._extra
        for instrument in list(self._instruments.values()):
            values = instrument.read()
            if values:
                yield Family(instrument.name, instrument.unit, instrument.description,
                             (Observation(value, {**extra, **dict(key)}) for key, value in values.items()),
                             instrument.scope, instrument.kind)
