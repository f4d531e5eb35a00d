"""The agent's configuration file (``agent.toml``): a strict pydantic v2 model.

Every model forbids unknown keys and does not coerce types, so a misspelt key or a
string where a number belongs is an error that names its path in the file
(``pools[1].domains[0]: not a URL``). :func:`load_config` is the only entry point;
it raises :class:`ConfigError` carrying every problem at once.
"""

from __future__ import annotations

import difflib
import ssl
import tomllib
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from types import UnionType
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

import httpx
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from pytest_failover import (
    Domain,
    ExponentialBackoff,
    Policy,
    Pool,
    RetryBudget,
    ScheduleTable,
    Step,
)

from .durations import seconds
from .maintenance import cron_trigger

if TYPE_CHECKING:
    from pytest_failover.resolve import Resolver
from .slo import BURN_ALERTS, FASTEST_RATE, LONGEST_WINDOW

__all__ = [
    "AgentConfig",
    "ConfigError",
    "ControlConfig",
    "ExportersConfig",
    "MaintenanceConfig",
    "OtlpConfig",
    "PolicyConfig",
    "PoolConfig",
    "ProbeConfig",
    "PrometheusConfig",
    "QuorumConfig",
    "ReadinessConfig",
    "ResolverConfig",
    "SloConfig",
    "StatusConfig",
    "load_config",
    "parse_config",
]


class ConfigError(Exception):
    """The configuration is invalid; ``errors`` holds ``(path, message)`` pairs."""

    def __init__(self, source: str, errors: list[tuple[str, str]]) -> None:
        self.source = source
        self.errors = errors
        lines = "\n".join(f"  {path}: {msg}" if path else f"  {msg}" for path, msg in errors)
        super().__init__(f"{source}: {len(errors)} error(s)\n{lines}")


def _check_scheme(value: str, example: str) -> None:
    """The one rule for every URL of the file: http or https, said so when it is neither."""
    scheme, sep, _ = value.partition("://")
    if not sep:
        raise ValueError(f"not a URL (expected e.g. {example!r})")
    if scheme.lower() not in ("http", "https"):
        raise ValueError(f"unsupported scheme {scheme!r} (expected http or https, e.g. {example!r})")


def _check_port(port: int | None) -> None:
    if port is not None and not 0 <= port <= 65535:
        raise ValueError(f"port {port} out of range (0 to 65535)")


def _check_url(value: str) -> str:
    _check_scheme(value, "https://api.example.com")
    try:
        domain = Domain.parse(value)
        port = httpx.URL(value).port
    except (ValueError, httpx.InvalidURL) as exc:  # the library's reason, without its "domain 'x': "
        raise ValueError(str(exc).removeprefix(f"domain {value!r}: ")) from None
    _check_port(port)
    return domain.url


def _check_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError("must start with '/'")
    return value


def _check_status(values: list[int]) -> list[int]:
    bad = [v for v in values if not 100 <= v <= 599]
    if bad:
        raise ValueError(f"{bad} are not HTTP status codes")
    if not values:
        raise ValueError("must not be empty")
    return values


def _check_listen(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError("expected HOST:PORT such as '127.0.0.1:9464'")
    _check_port(int(port))
    return value


DomainURL = Annotated[str, AfterValidator(_check_url)]
URLPath = Annotated[str, AfterValidator(_check_path)]
Statuses = Annotated[list[int], AfterValidator(_check_status)]
Listen = Annotated[str, AfterValidator(_check_listen)]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
METHODS = Literal["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"]


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class JsonCheck(_Model):
    """A check on the JSON body: the value at dotted ``field`` must equal ``equals``."""

    field: str = Field(min_length=1)
    equals: str | int | float | bool


class ProbeOverride(_Model):
    """Per-domain probe settings; unset keys fall back to the pool's probe settings."""

    path: URLPath | None = None
    method: METHODS | None = None
    headers: dict[str, str] | None = None
    expected_status: Statuses | None = None
    json_check: JsonCheck | None = None
    interval: Seconds | None = None
    timeout: Seconds | None = None


class ProbeConfig(_Model):
    """How the domains of a pool are probed (and the pool probe's request)."""

    path: URLPath = "/"
    method: METHODS = "GET"
    headers: dict[str, str] = {}
    expected_status: Statuses = [200]
    json_check: JsonCheck | None = None
    interval: Seconds = 15.0
    timeout: Seconds = 5.0
    domains: dict[DomainURL, ProbeOverride] = {}

    @model_validator(mode="after")
    def _timeout_fits(self) -> ProbeConfig:
        if self.timeout > self.interval:
            raise ValueError(f"timeout ({self.timeout} s) is larger than interval ({self.interval} s)")
        for url, override in self.domains.items():
            interval = override.interval or self.interval
            timeout = override.timeout or self.timeout
            if timeout > interval:
                raise ValueError(
                    f"domains.{url!r}: timeout ({timeout} s) is larger than interval ({interval} s)"
                )
        return self

    def for_domain(self, url: str) -> ProbeConfig:
        """The effective settings for one domain (its override merged in)."""
        override = self.domains.get(url)
        if override is None:
            return self
        values = {k: v for k, v in override.model_dump(exclude_none=True).items()}
        if override.json_check is not None:
            values["json_check"] = override.json_check
        return self.model_copy(update={**values, "domains": {}})


class ReadinessConfig(_Model):
    """Checks that each backup could take the primary's traffic."""

    enabled: bool = True
    interval: Seconds = 60.0
    timeout: Seconds = 5.0
    cert_warning_days: float = Field(default=14.0, ge=0)
    cors_origins: list[str] = []
    cors_method: METHODS = "GET"
    health_path: URLPath | None = None
    health_field: str | None = None

    @model_validator(mode="after")
    def _timeout_fits(self) -> ReadinessConfig:
        if self.timeout > self.interval:
            raise ValueError(f"timeout ({self.timeout} s) is larger than interval ({self.interval} s)")
        return self


# The policy's sections carry the library's names, types and nothing else: an unset key keeps
# the library's default and every range is checked by the library itself (its message is
# reported at ``pools[N].policy``), so the agent repeats none of its rules.


class BackoffConfig(_Model):
    """:class:`~pytest_failover.ExponentialBackoff`'s fields."""

    base: float | None = None
    cap: float | None = None
    max_attempts: int | None = None


class StepConfig(_Model):
    """One :class:`~pytest_failover.Step`."""

    at: float
    domain: int


class ScheduleTableConfig(_Model):
    """A :class:`~pytest_failover.ScheduleTable`."""

    steps: list[StepConfig]
    jitter: float | None = None


class RetryBudgetConfig(_Model):
    """A :class:`~pytest_failover.RetryBudget`, or none with ``enabled = false``."""

    enabled: bool = True
    max_tokens: float | None = None
    token_ratio: float | None = None


class PolicyConfig(_Model):
    """The failover client's :class:`~pytest_failover.Policy` for one pool."""

    preset: Literal["default", "agora"] = "default"
    backoff: BackoffConfig | None = None
    schedule_table: ScheduleTableConfig | None = None
    attempt_timeout: float | None = None
    deadline: float | None = None
    retry_statuses: list[int] | None = None
    retry_after_cap: float | None = None
    breaker_threshold: int | None = None
    breaker_cooldown: float | None = None
    retry_budget: RetryBudgetConfig | None = None
    sticky: bool | None = None

    @model_validator(mode="after")
    def _one_schedule(self) -> PolicyConfig:
        if self.backoff is not None and self.schedule_table is not None:
            raise ValueError("set either backoff or schedule_table, not both")
        self.to_policy()  # the library's own validation, reported at this path
        return self

    def to_policy(self) -> Policy:
        """Build the library's Policy (raises ValueError with the library's message)."""
        values: dict[str, Any] = self.model_dump(
            include={"attempt_timeout", "deadline", "retry_after_cap", "breaker_threshold",
                     "breaker_cooldown", "sticky"},
            exclude_none=True,
        )
        if self.backoff is not None:
            values["schedule"] = ExponentialBackoff(**self.backoff.model_dump(exclude_none=True))
        if self.schedule_table is not None:
            table = self.schedule_table.model_dump(include={"jitter"}, exclude_none=True)
            values["schedule"] = ScheduleTable([Step(s.at, s.domain) for s in self.schedule_table.steps], **table)
        if self.retry_statuses is not None:
            values["retry_statuses"] = frozenset(self.retry_statuses)
        budget = self.retry_budget
        if budget is not None:
            values["retry_budget"] = (
                RetryBudget(**budget.model_dump(include={"max_tokens", "token_ratio"}, exclude_none=True))
                if budget.enabled else None
            )
        if self.preset == "agora":
            return Policy.agora(**values)
        return Policy(**values)


def _check_bootstrap(values: list[str]) -> list[str]:
    import ipaddress

    for value in values:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an IP address: bootstrap is the resolver's own address, "
                             "such as '192.0.2.53', so reaching it needs no DNS") from None
    return values


def _check_resolver_url(value: str) -> str:
    _check_scheme(value, "https://dns.example/dns-query")
    return value


class ResolverConfig(_Model):
    """``[pools.resolver]``: the resolver each pinned probe compares the system's answer with
    (``failover_dns_mismatch``): a DNS-over-HTTPS server (``doh``) or an HTTPDNS endpoint
    (``httpdns``, a URL template with ``{host}``), reached at ``bootstrap``."""

    doh: Annotated[str, AfterValidator(_check_resolver_url)] | None = None
    httpdns: Annotated[str, AfterValidator(_check_resolver_url)] | None = None
    bootstrap: Annotated[list[str], AfterValidator(_check_bootstrap)] = []
    timeout: Seconds = 2.0

    @model_validator(mode="after")
    def _one_kind(self) -> ResolverConfig:
        if (self.doh is None) == (self.httpdns is None):
            raise ValueError("set either doh (a DNS-over-HTTPS URL such as 'https://dns.example/dns-query') "
                             "or httpdns (a URL template such as 'https://203.0.113.1/d?host={host}'), not "
                             + ("both" if self.doh is not None else "neither"))
        if self.httpdns is not None and "{host}" not in self.httpdns:
            raise ValueError(f"httpdns: {self.httpdns!r} has no '{{host}}' for the name to resolve, "
                             "such as 'https://203.0.113.1/d?host={host}'")
        return self

    def to_resolver(self, verify: ssl.SSLContext | bool = True) -> Resolver:
        """The library's resolver (DoH needs the ``resolve`` extra, dnspython)."""
        from pytest_failover.resolve import DoHResolver, HTTPDNSResolver

        bootstrap = self.bootstrap or None
        if self.doh is not None:
            return DoHResolver(self.doh, bootstrap=bootstrap, timeout=self.timeout, verify=verify)
        assert self.httpdns is not None  # _one_kind
        return HTTPDNSResolver(self.httpdns, bootstrap=bootstrap, timeout=self.timeout, verify=verify)


class PoolConfig(_Model):
    """One pool: ordered domains, region orders, its policy, probes and readiness."""

    name: str = Field(min_length=1)
    domains: list[DomainURL] = Field(min_length=1)
    region_order: dict[str, list[DomainURL]] = {}
    policy: PolicyConfig = PolicyConfig()
    probe: ProbeConfig = ProbeConfig()
    readiness: ReadinessConfig = ReadinessConfig()
    resolver: ResolverConfig | None = None

    @model_validator(mode="after")
    def _consistent(self) -> PoolConfig:
        for url in self.probe.domains:
            if url not in self.domains:
                raise ValueError(f"probe.domains: {url!r} is not a domain of this pool")
        self.to_pool()
        return self

    def to_pool(self) -> Pool:
        return Pool(self.name, list(self.domains), region_order=self.region_order or None)

    def primary(self, region: str | None) -> str:
        return self.to_pool().order(region)[0].url


class PrometheusConfig(_Model):
    enabled: bool = True
    listen: Listen = "127.0.0.1:9464"
    scope_info_enabled: bool = False
    """The ``otel_scope_*`` labels on every ``/metrics`` series (the Prometheus exporters'
    option of that name; off here: they were ~40 % of the scrape, and OTLP keeps the scopes)."""


class OtlpConfig(_Model):
    """``[exporters.otlp]``: every key optional. A key left out comes from the SDK's ``OTEL_*``
    variable (``endpoint`` from ``OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]ENDPOINT``, else the
    SDK's default, ``http://localhost:4318`` over HTTP, ``localhost:4317`` over gRPC), then
    from the defaults below."""

    endpoint: str | None = Field(default=None, min_length=1)
    protocol: Literal["grpc", "http"] = "http"
    headers: dict[str, str] = {}
    insecure: bool = True
    timeout: Seconds = 5.0
    export_interval: Seconds = 10.0
    max_queue_size: int = Field(default=2048, ge=1, le=1_000_000)
    max_export_batch_size: int = Field(default=512, ge=1)
    schedule_delay: Seconds = 2.0

    @field_validator("endpoint")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None:
            _check_scheme(value, "http://127.0.0.1:4318")
        return value

    @model_validator(mode="after")
    def _batch_fits(self) -> OtlpConfig:
        if self.max_export_batch_size > self.max_queue_size:
            raise ValueError("max_export_batch_size must be <= max_queue_size")
        return self


class ExportersConfig(_Model):
    prometheus: PrometheusConfig = PrometheusConfig()
    otlp: OtlpConfig | None = None


def _check_prometheus_url(value: str) -> str:
    _check_scheme(value, "http://prometheus:9090")
    try:
        url = httpx.URL(value)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ValueError(f"not a URL ({exc})") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError("expected the HTTP API's base URL, such as 'http://prometheus:9090' "
                         "(Mimir: 'http://mimir/prometheus')")
    if url.query or url.fragment:
        raise ValueError("must have no query or fragment ('/api/v1/query' is appended to it)")
    return value.rstrip("/")


class QuorumConfig(_Model):
    """``[control.quorum]``: decide the document from every location's probes in Prometheus
    (``failover-agent control quorum``) instead of from this agent's own view."""

    prometheus_url: Annotated[str, AfterValidator(_check_prometheus_url)]
    min_locations: int = Field(default=2, ge=1, le=1000)
    for_seconds: int = Field(default=60, ge=1, le=86_400)
    timeout: Seconds = 5.0
    headers: dict[str, str] = {}


class ControlConfig(_Model):
    """The signed control document the agent publishes for clients."""

    signing_key_file: Path
    key_id: str = ""
    override_file: Path | None = None
    maintenance_file: Path | None = None
    path: URLPath = "/control.json"
    output_file: Path | None = None
    interval: Seconds = 10.0
    expires_in: Seconds = 300.0
    disable_after: int = Field(default=2, ge=1)
    quorum: QuorumConfig | None = None

    @model_validator(mode="after")
    def _expiry(self) -> ControlConfig:
        if self.expires_in <= self.interval:
            raise ValueError("expires_in must be larger than interval (documents would expire before renewal)")
        if self.quorum is not None and self.quorum.timeout > self.interval:
            raise ValueError(f"quorum.timeout ({self.quorum.timeout} s) is larger than interval "
                             f"({self.interval} s): a query would still run when the next one is due")
        return self


class StatusConfig(_Model):
    """The status page's history: kept in a SQLite file, or in bounded memory without a path."""

    history_path: Path | None = None
    retention_days: float = Field(default=7.0, gt=0, le=3660, allow_inf_nan=False)
    max_rows: int = Field(default=1_000_000, ge=1000, le=1_000_000_000)




def _check_window(value: str) -> str:
    if seconds(value, "slo.window") <= seconds(LONGEST_WINDOW, "rules.window"):
        slowest = min(BURN_ALERTS, key=lambda alert: alert.rate)
        raise ValueError(f"{value!r} is not longer than {LONGEST_WINDOW}, the long window of the slowest "
                         f"burn-rate alert ({slowest.rate:g}x over {slowest.long}); use e.g. '30d' or '28d'")
    return value


def _check_objective(value: float) -> float:
    if not 0 < value < 100:
        raise ValueError(f"{value:g} is not a percentage strictly between 0 and 100, such as 99.9")
    return value


def _check_slo_name(value: str) -> str:
    if not value or not all(c.isalnum() or c in "_.:/-" for c in value):
        raise ValueError(f"{value!r}: use letters, digits and _ . : / - (it becomes the 'slo' label)")
    return value


class SloConfig(_Model):
    """``[[slo]]``: an objective for a pool's end-to-end availability or for a domain's probes."""

    pool: str = Field(min_length=1)
    domain: DomainURL | None = None
    indicator: Literal["availability", "probe"] | None = None
    objective: Annotated[float, Field(allow_inf_nan=False), AfterValidator(_check_objective)]
    window: Annotated[str, AfterValidator(_check_window)] = "30d"
    name: Annotated[str, AfterValidator(_check_slo_name)] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> SloConfig:
        if self.indicator == "probe" and self.domain is None:
            raise ValueError("indicator 'probe' is a domain's probe success: set domain (one of the pool's)")
        if self.indicator == "availability" and self.domain is not None:
            raise ValueError("indicator 'availability' is the whole pool's: remove domain, "
                             "or use indicator 'probe' for the domain's probes")
        budget = 100 - self.objective
        if FASTEST_RATE * budget >= 100:
            raise ValueError(
                f"objective {self.objective:g} leaves an error budget of {budget:g} %: the {FASTEST_RATE:g}x burn that "
                f"pages would be an error ratio of {FASTEST_RATE * budget:g} %, which cannot happen; "
                f"use an objective above {100 - 100 / FASTEST_RATE:.2f}")
        return self

    @property
    def kind(self) -> Literal["availability", "probe"]:
        """The indicator: given, or ``probe`` for a domain and ``availability`` for a pool."""
        return self.indicator or ("availability" if self.domain is None else "probe")

    @property
    def label(self) -> str:
        """The SLO's name: given, or the pool's (``pool/host:port`` for a domain's)."""
        if self.name is not None:
            return self.name
        if self.domain is None:
            return self.pool
        domain = Domain.parse(self.domain)
        return f"{self.pool}/{domain.host}:{domain.effective_port}"


def _duration(key: str) -> AfterValidator:
    """A validator of a duration written for ``key`` (:data:`failover_agent.durations.KEYS`)."""

    def check(value: str) -> str:
        seconds(value, key)
        return value

    return AfterValidator(check)


def _check_instant(value: object) -> object:
    """An RFC 3339 time with its offset: TOML's own (``2026-12-05T02:00:00Z``) or the same quoted."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an RFC 3339 time such as 2026-12-05T02:00:00Z") from None
    if isinstance(value, datetime) and value.utcoffset() is None:
        raise ValueError(f"{value.isoformat()} has no UTC offset: add one, such as "
                         f"{value.isoformat()}Z or {value.isoformat()}+01:00")
    return value


def _check_timezone(value: str) -> str:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{value!r} is not an IANA time zone such as 'UTC' or 'Europe/Paris'") from None
    return value


Instant = Annotated[datetime, BeforeValidator(_check_instant)]


class MaintenanceConfig(_Model):
    """``[[maintenance]]``: planned maintenance of some domains of a pool, once or on a schedule."""

    pool: str = Field(min_length=1)
    domains: list[DomainURL] = []
    start: Instant | None = None
    end: Instant | None = None
    schedule: str | None = None
    duration: Annotated[str, _duration("maintenance.duration")] | None = None
    timezone: Annotated[str, AfterValidator(_check_timezone)] = "UTC"
    drain: Annotated[str, _duration("maintenance.drain")] | None = None
    reason: str = ""

    @model_validator(mode="after")
    def _one_kind(self) -> MaintenanceConfig:
        once = self.start is not None or self.end is not None
        cron = self.schedule is not None or self.duration is not None
        if once and cron:
            raise ValueError("set either start and end (one window) or schedule and duration (a window "
                             "each time the schedule fires), not both")
        if once:
            if self.start is None or self.end is None:
                raise ValueError(f"set both start and end (only {'start' if self.end is None else 'end'} is set)")
            if self.end <= self.start:
                raise ValueError(f"end ({self.end.isoformat()}) is not after start ({self.start.isoformat()})")
        elif cron:
            if self.schedule is None or self.duration is None:
                raise ValueError("a schedule needs a duration, and a duration a schedule "
                                 "(such as schedule = '0 2 * * sun' and duration = '2h')")
            try:
                cron_trigger(self.schedule, self.timezone)
            except ValueError as exc:
                raise ValueError(f"schedule: {exc}") from None
        else:
            raise ValueError("set start and end (one window), or schedule and duration (recurring windows)")
        return self


class AgentConfig(_Model):
    """The whole ``agent.toml``."""

    location: str = Field(default="local", min_length=1)
    region: str | None = None
    ca_file: Path | None = None
    pools: list[PoolConfig] = Field(min_length=1)
    exporters: ExportersConfig = ExportersConfig()
    control: ControlConfig | None = None
    status: StatusConfig = StatusConfig()
    slo: list[SloConfig] = []
    maintenance: list[MaintenanceConfig] = []

    @model_validator(mode="after")
    def _unique(self) -> AgentConfig:
        names = [p.name for p in self.pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"pool names must be unique: {', '.join(dupes)}")
        self._check_slos()
        self._check_maintenance()
        if (self.control is not None and not self.exporters.prometheus.enabled
                and self.control.output_file is None):
            raise ValueError("control: with the HTTP listener disabled, set control.output_file")
        return self

    def pool_named(self, name: str, where: str) -> PoolConfig:
        """The pool ``name`` (``ValueError`` at ``where``, with the closest name, if there is none)."""
        pools = {p.name: p for p in self.pools}
        pool = pools.get(name)
        if pool is None:
            close = difflib.get_close_matches(name, list(pools), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"the pools are {', '.join(map(repr, pools))}"
            raise ValueError(f"{where}: no pool named {name!r}: {hint}")
        return pool

    def _check_maintenance(self) -> None:
        for i, window in enumerate(self.maintenance):
            self.maintenance_domains(window.pool, window.domains, f"maintenance[{i}]")
            if window.drain is not None and self.control is None:
                raise ValueError(f"maintenance[{i}].drain: nothing would drain: clients leave a domain when the "
                                 "signed control document disables it, and without a [control] section the agent "
                                 "signs none; add [control] (its signing_key_file) or remove drain")

    def maintenance_domains(self, pool_name: str, urls: Iterable[str], where: str) -> frozenset[str]:
        """The domains a maintenance window of ``pool_name`` names (every domain of the pool
        without ``urls``); ``ValueError`` at ``where`` for a pool or domain not configured."""
        pool = self.pool_named(pool_name, f"{where}.pool")
        urls = list(urls)
        stray = [url for url in urls if url not in pool.domains]
        if stray:
            raise ValueError(f"{where}.domains: {', '.join(map(repr, stray))} "
                             f"{'is not a domain' if len(stray) == 1 else 'are not domains'} "
                             f"of pool {pool_name!r} ({', '.join(pool.domains)})")
        return frozenset(urls or pool.domains)

    def _check_slos(self) -> None:
        for i, slo in enumerate(self.slo):
            pool = self.pool_named(slo.pool, f"slo[{i}].pool")
            if slo.domain is not None and slo.domain not in pool.domains:
                raise ValueError(f"slo[{i}].domain: {slo.domain!r} is not a domain of pool {slo.pool!r} "
                                 f"({', '.join(pool.domains)})")
        labels = [slo.label for slo in self.slo]
        dupes = sorted({n for n in labels if labels.count(n) > 1})
        if dupes:
            raise ValueError(f"slo names must be unique: {', '.join(dupes)} (set name on all but one)")


def _format_loc(loc: Iterable[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "." in part or "/" in part or ":" in part:
            out += f"[{part!r}]"
        else:
            out += ("." if out else "") + part
    return out


#: Why a list must not be empty, by its key.
_EMPTY = {
    "domains": "a pool needs at least one domain, such as 'https://api.example.com'",
    "pools": "the agent needs at least one [[pools]] table",
}


def _model_at(loc: Iterable[int | str]) -> type[BaseModel] | None:
    """The model whose keys the table at ``loc`` holds (None: not a model's table)."""
    model: type[BaseModel] | None = AgentConfig
    annotation: Any = None
    for part in loc:
        if model is not None:
            field = model.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return None
            annotation, model = field.annotation, None
        else:  # a list index or a dict key: the element's type
            args = [a for a in get_args(annotation) if a is not type(None)]
            annotation = args[-1] if args else None
        while get_origin(annotation) in (Union, UnionType, Annotated):  # Optional[X], Annotated[X, ...]
            annotation = next(a for a in get_args(annotation) if a is not type(None))
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
    return model


def _unknown_key(loc: tuple[int | str, ...]) -> str:
    model = _model_at(loc[:-1])
    # difflib's closest name at its default cut-off, as the library's fault names suggest
    close = [] if model is None else difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1)
    return "unknown key" + (f": did you mean {close[0]!r}?" if close else "")


def _errors(exc: ValidationError) -> list[tuple[str, str]]:
    errors = []
    for err in exc.errors(include_url=False):
        msg = err["msg"]
        for prefix in ("Value error, ", "Assertion failed, "):
            if msg.startswith(prefix):
                msg = msg[len(prefix):]
        # Drop pydantic's union/tagged branch names (e.g. "str", "function-after[...]").
        loc = [p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p in {"str", "int", "float", "bool"}))]
        if err["type"] == "extra_forbidden":
            msg = _unknown_key(tuple(loc))
        elif err["type"] in ("too_short", "string_too_short") and err.get("ctx", {}).get("min_length") == 1:
            why = _EMPTY.get(str(loc[-1])) if loc else None
            msg = "must not be empty" + (f": {why}" if why else "")
        errors.append((_format_loc(loc), msg))
    return errors


def parse_config(data: Mapping[str, Any], *, source: str = "<config>", base: Path | None = None) -> AgentConfig:
    """Validate already-parsed TOML data; relative file paths resolve against ``base``."""
    try:
        config = AgentConfig.model_validate(_paths(data))
    except ValidationError as exc:
        raise ConfigError(source, _errors(exc)) from None
    if base is not None:
        config = _resolve(config, base)
    return config


def _paths(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """TOML has no path type: turn the path-valued strings into ``Path`` for strict mode."""
    out = dict(data)
    if isinstance(out.get("ca_file"), str):
        out["ca_file"] = Path(out["ca_file"])
    control = out.get("control")
    if isinstance(control, dict):
        control = dict(control)
        for key in ("signing_key_file", "override_file", "output_file", "maintenance_file"):
            if isinstance(control.get(key), str):
                control[key] = Path(control[key])
        out["control"] = control
    status = out.get("status")
    if isinstance(status, dict) and isinstance(status.get("history_path"), str):
        out["status"] = {**status, "history_path": Path(status["history_path"])}
    return out


def _resolve(config: AgentConfig, base: Path) -> AgentConfig:
    def fix(p: Path | None) -> Path | None:
        return None if p is None or p.is_absolute() else base / p

    update: dict[str, Any] = {}
    if config.ca_file is not None and not config.ca_file.is_absolute():
        update["ca_file"] = fix(config.ca_file)
    if config.control is not None:
        c = config.control
        cupdate = {
            k: fix(getattr(c, k))
            for k in ("signing_key_file", "override_file", "output_file", "maintenance_file")
            if getattr(c, k) is not None and not getattr(c, k).is_absolute()
        }
        if cupdate:
            update["control"] = c.model_copy(update=cupdate)
    history = config.status.history_path
    if history is not None and not history.is_absolute():
        update["status"] = config.status.model_copy(update={"history_path": base / history})
    return config.model_copy(update=update) if update else config


def load_config(path: str | Path, *, check_files: bool = True) -> AgentConfig:
    """Read and validate ``agent.toml`` and load every file it names (key, override, CA and
    history files: :mod:`failover_agent.config_files`; not with ``check_files=False``, for
    commands that use none of them); raises :class:`ConfigError` listing every error."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(str(path), [("", f"cannot read the file: {exc.strerror or exc}")]) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), [("", f"not valid TOML: {exc}")]) from None
    config = parse_config(data, source=str(path), base=path.resolve().parent)
    if not check_files:
        return config
    # imported here: it loads keys through the control writer, which imports this module
    from .config_files import file_errors

    errors = file_errors(config)
    if errors:
        raise ConfigError(str(path), errors)
    return config
