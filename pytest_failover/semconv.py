"""Every telemetry name of pytest-failover, in one place: the documented contract.

Span names, instrumentation scopes, metric names and units, attribute keys, the
values those attributes take, event names and histogram buckets of the failover
client, the pytest plugin and the agent. Names the OpenTelemetry semantic
conventions define come from ``opentelemetry.semconv`` (stable modules first,
``_incubating`` only where no stable one has the name); the ``failover.*`` names
fill the gaps the conventions leave (pools, breakers, probes, readiness).

:func:`prometheus_name` gives the name Prometheus shows for a metric (what the
OpenTelemetry Prometheus exporter and the collector's Prometheus exporter
produce), :func:`prometheus_label` the label of an attribute, so dashboards and
alert rules never spell a series by hand. Every name is a plain ``str``
constant: using one costs nothing on the request path.

Nothing here may be renamed: dashboards, alert rules and users' queries depend on
these strings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from opentelemetry.semconv._incubating.attributes import http_attributes as http_incubating
from opentelemetry.semconv._incubating.attributes import test_attributes
from opentelemetry.semconv.attributes import (
    code_attributes,
    error_attributes,
    http_attributes,
    network_attributes,
    server_attributes,
    service_attributes,
    url_attributes,
)
from opentelemetry.semconv.metrics import http_metrics
from opentelemetry.semconv.schemas import Schemas

__all__ = [
    "AGENT_CHECK",
    "AGENT_JOBS",
    "AGENT_METRIC_NAMES",
    "AGENT_SCOPE",
    "ANSWERED_RESULTS",
    "ATTEMPT_RESULTS",
    "ATTRIBUTE_KEYS",
    "BAD_OUTCOMES",
    "BREAKER_CLOSED",
    "BREAKER_GAUGE",
    "BREAKER_HALF_OPEN",
    "BREAKER_OPEN",
    "BREAKER_REASON_SLOW_CALLS",
    "BREAKER_STATES",
    "CHECK_CERT",
    "CHECK_CORS",
    "CHECK_HEALTH",
    "CLIENT_METRIC_NAMES",
    "CLIENT_SCOPE",
    "CODE_FILE_PATH",
    "CODE_FUNCTION_NAME",
    "DURATION_BUCKETS",
    "ERROR_APP",
    "ERROR_CANCELLED",
    "ERROR_CONNECT",
    "ERROR_CONNECTION_REFUSED",
    "ERROR_CONNECTION_RESET",
    "ERROR_CONNECT_TIMEOUT",
    "ERROR_DNS",
    "ERROR_POOL_TIMEOUT",
    "ERROR_READ",
    "ERROR_READ_TIMEOUT",
    "ERROR_REMOTE_PROTOCOL",
    "ERROR_SERVER_CERTIFICATE_INVALID",
    "ERROR_TIMEOUT",
    "ERROR_TLS",
    "ERROR_TYPE",
    "ERROR_WRITE",
    "ERROR_WRITE_TIMEOUT",
    "EVENT_ADDRESS_SWITCH",
    "EVENT_BREAKER_TRANSITION",
    "EVENT_FAULT_HEALED",
    "EVENT_FAULT_INJECTED",
    "EVENT_RETRY_BUDGET_REJECTED",
    "EVENT_SWITCH",
    "EVENT_UPLOAD_RESUMED",
    "FAILOVER_AGENT_JOB_OVERRUNS",
    "FAILOVER_AGENT_TELEMETRY_DROPPED",
    "FAILOVER_ATTEMPT",
    "FAILOVER_ATTEMPTS",
    "FAILOVER_ATTEMPTS_ATTRIBUTE",
    "FAILOVER_ATTEMPT_RESULT",
    "FAILOVER_BREAKER_FROM",
    "FAILOVER_BREAKER_STATE",
    "FAILOVER_BREAKER_TO",
    "FAILOVER_BREAKER_TRANSITIONS",
    "FAILOVER_CONTROL_DOMAIN_DISABLED",
    "FAILOVER_CONTROL_ISSUED_TIMESTAMP",
    "FAILOVER_CONTROL_QUORUM_UP",
    "FAILOVER_CONTROL_VERSION",
    "FAILOVER_DNS_MISMATCH",
    "FAILOVER_DOMAIN",
    "FAILOVER_FAULT",
    "FAILOVER_FAULT_HOST",
    "FAILOVER_FAULT_NAME",
    "FAILOVER_FROM",
    "FAILOVER_HEDGE",
    "FAILOVER_HEDGES",
    "FAILOVER_HEDGE_OUTCOME",
    "FAILOVER_MAINTENANCE_ACTIVE",
    "FAILOVER_OUTCOME",
    "FAILOVER_POOL",
    "FAILOVER_POOL_AVAILABLE",
    "FAILOVER_POOL_SERVING",
    "FAILOVER_PROBE_DURATION",
    "FAILOVER_PROBE_PHASE_DURATION",
    "FAILOVER_PROBE_STATUS_CODE",
    "FAILOVER_PROBE_SUCCESS",
    "FAILOVER_READINESS_READY",
    "FAILOVER_REASON",
    "FAILOVER_REQUESTS",
    "FAILOVER_REQUEST_DURATION",
    "FAILOVER_RESOLVER",
    "FAILOVER_RESOLVE_DURATION",
    "FAILOVER_RESOLVE_FAILURES",
    "FAILOVER_RESOLVE_SOURCE",
    "FAILOVER_RETRY_BUDGET_REJECTIONS",
    "FAILOVER_SHARED_STATE",
    "FAILOVER_SLOW_CALLS",
    "FAILOVER_STEERING",
    "FAILOVER_SWITCHES",
    "FAILOVER_TLS_CERT_EXPIRY_TIMESTAMP",
    "FAILOVER_TO",
    "FAILOVER_UPLOAD_BYTES",
    "FAILOVER_UPLOAD_OFFSET",
    "FAILOVER_UPLOAD_RESUMES",
    "FAILOVER_UPLOAD_SIZE",
    "HEDGE_CANCELLED",
    "HEDGE_LOST",
    "HEDGE_OUTCOMES",
    "HEDGE_THROTTLED",
    "HEDGE_WON",
    "HTTP_CLIENT_REQUEST_DURATION",
    "HTTP_METHOD_OTHER",
    "HTTP_REQUEST_BODY_SIZE",
    "HTTP_REQUEST_METHOD",
    "HTTP_REQUEST_RESEND_COUNT",
    "HTTP_RESPONSE_STATUS_CODE",
    "JOB_CONTROL",
    "JOB_POOL",
    "JOB_PROBE",
    "JOB_READY",
    "KNOWN_HTTP_METHODS",
    "METRICS",
    "NETWORK_PEER_ADDRESS",
    "OUTCOMES",
    "OUTCOME_CIRCUIT_OPEN",
    "OUTCOME_FAILURE",
    "OUTCOME_FALLBACK",
    "OUTCOME_STALE",
    "OUTCOME_SUCCESS",
    "PHASE_TOTAL",
    "PLUGIN_SCOPE",
    "PROBE_LOCATION",
    "PROBE_PHASE",
    "PROBE_PHASES",
    "PROMETHEUS_SCOPE_NAME",
    "PROMETHEUS_SCOPE_PREFIX",
    "PROMETHEUS_SCOPE_SCHEMA_URL",
    "PROMETHEUS_SCOPE_VERSION",
    "PROMETHEUS_TARGET_INFO",
    "PYTEST_DURATION",
    "PYTEST_OUTCOME",
    "PYTEST_WORKER",
    "QUORUM_SCOPE",
    "READINESS_CHECK",
    "READINESS_CHECKS",
    "REQUEST_SPAN_PREFIX",
    "RESOLVE_SOURCES",
    "RESOLVE_SOURCE_CACHE",
    "RESOLVE_SOURCE_DOH",
    "RESOLVE_SOURCE_HTTPDNS",
    "RESOLVE_SOURCE_STALE",
    "RESOLVE_SOURCE_SYSTEM",
    "RESULT_ANSWER",
    "RESULT_DROPPED",
    "RESULT_FAILURE",
    "RESULT_SUCCESS",
    "SCHEMA_URL",
    "SERVER_ADDRESS",
    "SERVER_PORT",
    "SERVICE_NAME",
    "SESSION_SPAN",
    "SEVERITIES",
    "SEVERITY_LABEL",
    "SEVERITY_PAGE",
    "SEVERITY_TICKET",
    "SHARED_CLOSED",
    "SHARED_CONNECTED",
    "SHARED_DISCONNECTED",
    "SHARED_GAUGE",
    "SHARED_SCOPE",
    "SHARED_STATES",
    "SIGNAL_METRICS",
    "SIGNAL_SPANS",
    "SLO_BURN_RATE",
    "SLO_ERROR_BUDGET_REMAINING",
    "SLO_LABEL",
    "SLO_PROBE_ERRORS",
    "SLO_RECORDS",
    "SLO_REQUEST_ERRORS",
    "STEERINGS",
    "STEERING_AFFINITY",
    "STEERING_ORDER",
    "STEERING_TIME_ORDER",
    "STEERING_WEIGHT",
    "STOP_DEADLINE",
    "STOP_DONE",
    "STOP_EXHAUSTED",
    "STOP_NOT_RETRYABLE",
    "STOP_REASONS",
    "STOP_RETRY_BUDGET",
    "SWITCH_REASONS",
    "SWITCH_REASON_FAILBACK",
    "SWITCH_REASON_PREFERRED_UNAVAILABLE",
    "TELEMETRY_SIGNAL",
    "TELEMETRY_SIGNALS",
    "TEST_CASE_NAME",
    "TEST_CASE_RESULT_STATUS",
    "TEST_RESULT_FAIL",
    "TEST_RESULT_PASS",
    "TEST_SUITE_NAME",
    "TRANSPORT_ERROR_TYPES",
    "UNIT_ATTEMPT",
    "UNIT_BYTES",
    "UNIT_CALL",
    "UNIT_HEDGE",
    "UNIT_ITEM",
    "UNIT_NONE",
    "UNIT_REQUEST",
    "UNIT_RESOLUTION",
    "UNIT_RETRY",
    "UNIT_RUN",
    "UNIT_SECONDS",
    "UNIT_SWITCH",
    "UNIT_TRANSITION",
    "UPLOAD_CHUNK_SPAN",
    "UPLOAD_SCOPE",
    "UPLOAD_SPAN",
    "URL_FULL",
    "URL_SCHEME",
    "Metric",
    "MetricKind",
    "prometheus_label",
    "prometheus_name",
    "slo_record",
]

# =========================================================================== scopes

CLIENT_SCOPE: Final = "pytest_failover"
"""Tracer and meter name of the failover client."""
PLUGIN_SCOPE: Final = "pytest_failover.plugin"
"""Tracer name of the pytest plugin's session trace (``--failover-otlp-endpoint``)."""
AGENT_SCOPE: Final = "failover_agent"
"""Meter name of the agent's own metrics."""
QUORUM_SCOPE: Final = "failover_agent.quorum"
"""Meter name of the quorum publisher's own metrics (``failover-agent control quorum``)."""
SHARED_SCOPE: Final = "pytest_failover.shared"
"""Meter name of shared health (``pytest_failover.shared``: ``RedisHealth``)."""
UPLOAD_SCOPE: Final = "pytest_failover.uploads"
"""Tracer and meter name of the resumable uploads (``pytest_failover.uploads``)."""
SCHEMA_URL: Final = Schemas.V1_26_0.value
"""Semantic-conventions schema URL of the client's tracer and meter."""

# =========================================================================== span names

REQUEST_SPAN_PREFIX: Final = "failover "
"""The INTERNAL span of a logical request is named ``failover {pool}``; each attempt is a
CLIENT child span named ``{http.request.method}`` (semantic conventions)."""
SESSION_SPAN: Final = "pytest session"
"""Root span of the plugin's session trace; each test is a child span named by its node id."""
UPLOAD_SPAN: Final = "failover.upload"
"""INTERNAL span of one ``TusUpload.upload()`` call; the failover transport's request spans nest in it."""
UPLOAD_CHUNK_SPAN: Final = "failover.upload.chunk"
"""INTERNAL child span of an upload span per ``PATCH`` chunk."""

# =========================================================================== attribute keys

# --- semantic conventions (stable)
HTTP_REQUEST_METHOD: Final = http_attributes.HTTP_REQUEST_METHOD
"""HTTP method, or ``_OTHER`` for a method the conventions do not know."""
HTTP_RESPONSE_STATUS_CODE: Final = http_attributes.HTTP_RESPONSE_STATUS_CODE
"""HTTP status code of the response, when there was one."""
HTTP_REQUEST_RESEND_COUNT: Final = http_attributes.HTTP_REQUEST_RESEND_COUNT
"""Number of earlier attempts of the same logical request (attempt spans after the first)."""
SERVER_ADDRESS: Final = server_attributes.SERVER_ADDRESS
"""Host name of the domain (no scheme, no port). The agent's per-domain series carry
``url.scheme``, ``server.address`` and ``server.port``: the domain's full origin, so two
ports of one host are two series."""
SERVER_PORT: Final = server_attributes.SERVER_PORT
"""Port of the domain (the scheme's default when the URL has none)."""
URL_FULL: Final = url_attributes.URL_FULL
"""Absolute URL without credentials, query or fragment."""
URL_SCHEME: Final = url_attributes.URL_SCHEME
"""Scheme of the domain (``http`` or ``https``): with ``server.address`` and ``server.port``, the
origin that names an agent series' domain."""
ERROR_TYPE: Final = error_attributes.ERROR_TYPE
"""Low-cardinality reason of a failure (see :data:`TRANSPORT_ERROR_TYPES`)."""
SERVICE_NAME: Final = service_attributes.SERVICE_NAME
"""Resource attribute: the service (``failover-agent``, or the test run's service)."""
CODE_FUNCTION_NAME: Final = code_attributes.CODE_FUNCTION_NAME
"""Test span attribute: the test function's name."""
CODE_FILE_PATH: Final = code_attributes.CODE_FILE_PATH
"""Test span attribute: the test file's path."""

# --- semantic conventions (development: no stable module has them yet)
TEST_SUITE_NAME: Final = test_attributes.TEST_SUITE_NAME
"""Session span attribute: the test suite (the project's root directory name)."""
TEST_CASE_NAME: Final = test_attributes.TEST_CASE_NAME
"""Test span attribute: the pytest node id."""
TEST_CASE_RESULT_STATUS: Final = test_attributes.TEST_CASE_RESULT_STATUS
"""Test span attribute: ``pass`` or ``fail``."""

# --- the failover client
FAILOVER_POOL: Final = "failover.pool"
"""Name of the pool a request, attempt or probe belongs to."""
FAILOVER_DOMAIN: Final = "failover.domain"
"""Base URL of the domain (``scheme://host[:port][/prefix]``)."""
FAILOVER_RESOLVE_SOURCE: Final = "failover.resolve.source"
"""Attempt span: how the address it connected to was found (a ``RESOLVE_SOURCES`` value)."""
FAILOVER_RESOLVER: Final = "failover.resolver"
"""Resolution metrics: the kind of the resolver a host is given (``Policy.resolver``), its
class name: ``DoHResolver``, ``ChainResolver``, ``CachingResolver``... (the agent's DNS
mismatch: the configured resolver's, ``DoHResolver`` or ``HTTPDNSResolver``)."""
NETWORK_PEER_ADDRESS: Final = network_attributes.NETWORK_PEER_ADDRESS
"""Attempt span: the IP address the attempt's connection went to (pools with a resolver)."""
FAILOVER_ATTEMPT: Final = "failover.attempt"
"""Attempt span attribute: 1 for the first attempt of a logical request, then 2, 3, ..."""
FAILOVER_ATTEMPTS_ATTRIBUTE: Final = "failover.attempts"
"""Logical span attribute: how many attempts the request took (same string as the metric)."""
FAILOVER_OUTCOME: Final = "failover.outcome"
"""How a logical request ended for the application (see :data:`OUTCOMES`)."""
FAILOVER_ATTEMPT_RESULT: Final = "failover.attempt.result"
"""What one attempt's result means for the domain (see :data:`ATTEMPT_RESULTS`)."""
FAILOVER_STEERING: Final = "failover.steering"
"""Logical span attribute: why the request's order was not the pool's (see :data:`STEERINGS`);
absent when it was."""
FAILOVER_FROM: Final = "failover.from"
"""Switch: base URL of the domain that served the pool before."""
FAILOVER_TO: Final = "failover.to"
"""Switch: base URL of the domain that serves the pool now."""
FAILOVER_REASON: Final = "failover.reason"
"""Switch: why traffic moved (an ``error.type``, or see :data:`SWITCH_REASONS`)."""
FAILOVER_BREAKER_FROM: Final = "failover.breaker.from"
"""Breaker transition: the state before (see :data:`BREAKER_STATES`)."""
FAILOVER_BREAKER_TO: Final = "failover.breaker.to"
"""Breaker transition: the state after (see :data:`BREAKER_STATES`)."""
FAILOVER_HEDGE: Final = "failover.hedge"
"""Attempt span attribute: ``true`` on a hedged attempt (sent while an earlier one was still
in flight, see ``Hedging``)."""
FAILOVER_HEDGE_OUTCOME: Final = "failover.hedge.outcome"
"""``failover.hedges``: how a hedge ended (see :data:`HEDGE_OUTCOMES`)."""

# --- the outage simulator (fault events of the fake_domains fixture)
FAILOVER_FAULT: Final = "failover.fault"
"""Fault event: the fault's full description (its repr)."""
FAILOVER_FAULT_HOST: Final = "failover.fault.host"
"""Fault event: the fake domain's host, ``*`` for all of them."""
FAILOVER_FAULT_NAME: Final = "failover.fault.name"
"""Fault event: the fault's short name."""

# --- resumable uploads
FAILOVER_UPLOAD_SIZE: Final = "failover.upload.size"
"""Upload span: the upload's length in bytes."""
FAILOVER_UPLOAD_OFFSET: Final = "failover.upload.offset"
"""Chunk span: the offset the chunk starts at; upload span: the offset reached; resume
event: the offset the upload goes on from."""
FAILOVER_UPLOAD_RESUMES: Final = "failover.upload.resumes"
"""Upload span: how many times the upload asked ``HEAD`` where it stands."""
HTTP_REQUEST_BODY_SIZE: Final = http_incubating.HTTP_REQUEST_BODY_SIZE
"""Chunk span: the chunk's size in bytes (semantic conventions, development)."""

# --- the pytest plugin's session trace
PYTEST_WORKER: Final = "pytest.worker"
"""Resource attribute: the pytest-xdist worker id, ``main`` without xdist."""
PYTEST_OUTCOME: Final = "pytest.outcome"
"""Test span attribute: passed, failed, error or skipped."""
PYTEST_DURATION: Final = "pytest.duration"
"""Test span attribute: duration of the test's call phase in seconds."""

# --- the agent
PROBE_LOCATION: Final = "probe.location"
"""Where the agent probes from (resource attribute, and on every agent and client point)."""
PROBE_PHASE: Final = "phase"
"""Probe phase duration: the phase of the pinned probe (see :data:`PROBE_PHASES`), as
blackbox_exporter's ``probe_http_duration_seconds{phase=...}``."""
READINESS_CHECK: Final = "check"
"""Readiness: which check of the backup (see :data:`READINESS_CHECKS`)."""
TELEMETRY_SIGNAL: Final = "signal"
"""Dropped telemetry: which signal was lost (see :data:`TELEMETRY_SIGNALS`)."""
AGENT_CHECK: Final = "failover.agent.check"
"""Job overruns: the kind of check that overran (see :data:`AGENT_JOBS`). Not ``job``: that
label is Prometheus' own (the scrape job), which an attribute must not overwrite."""

ATTRIBUTE_KEYS: Final = frozenset(
    {
        HTTP_REQUEST_METHOD, HTTP_RESPONSE_STATUS_CODE, HTTP_REQUEST_RESEND_COUNT, SERVER_ADDRESS,
        SERVER_PORT, URL_FULL, URL_SCHEME, ERROR_TYPE, SERVICE_NAME, CODE_FUNCTION_NAME, CODE_FILE_PATH,
        TEST_SUITE_NAME, TEST_CASE_NAME, TEST_CASE_RESULT_STATUS,
        FAILOVER_POOL, FAILOVER_DOMAIN, FAILOVER_ATTEMPT, FAILOVER_ATTEMPTS_ATTRIBUTE,
        FAILOVER_OUTCOME, FAILOVER_ATTEMPT_RESULT, FAILOVER_FROM, FAILOVER_TO, FAILOVER_REASON, FAILOVER_STEERING,
        FAILOVER_BREAKER_FROM, FAILOVER_BREAKER_TO, FAILOVER_HEDGE, FAILOVER_HEDGE_OUTCOME, FAILOVER_FAULT, FAILOVER_FAULT_HOST,
        FAILOVER_FAULT_NAME, PYTEST_WORKER, PYTEST_OUTCOME, PYTEST_DURATION,
        FAILOVER_UPLOAD_SIZE, FAILOVER_UPLOAD_OFFSET, FAILOVER_UPLOAD_RESUMES, HTTP_REQUEST_BODY_SIZE,
        PROBE_LOCATION, PROBE_PHASE, READINESS_CHECK, TELEMETRY_SIGNAL, AGENT_CHECK,
        NETWORK_PEER_ADDRESS, FAILOVER_RESOLVE_SOURCE, FAILOVER_RESOLVER,
    }
)
"""Every attribute key above (span, event, metric point and resource attributes)."""

# =========================================================================== attribute values

HTTP_METHOD_OTHER: Final = http_attributes.HttpRequestMethodValues.OTHER.value
"""``http.request.method`` of a method outside :data:`KNOWN_HTTP_METHODS`."""
KNOWN_HTTP_METHODS: Final = frozenset(
    method.value
    for method in http_attributes.HttpRequestMethodValues
    if method is not http_attributes.HttpRequestMethodValues.OTHER
)
"""Methods ``http.request.method`` reports as they are."""

OUTCOME_SUCCESS: Final = "success"
"""The application got a successful answer (or a final one, like a 404)."""
OUTCOME_FAILURE: Final = "failure"
"""Every allowed attempt failed: the application got an error."""
OUTCOME_CIRCUIT_OPEN: Final = "circuit_open"
"""Every domain's breaker was open: no attempt was made."""
OUTCOME_STALE: Final = "stale"
"""Every attempt failed and a stale cached answer was served."""
OUTCOME_FALLBACK: Final = "fallback"
"""Every attempt failed and the fallback answered."""
OUTCOMES: Final = (OUTCOME_SUCCESS, OUTCOME_FAILURE, OUTCOME_CIRCUIT_OPEN, OUTCOME_STALE, OUTCOME_FALLBACK)
"""Every value of ``failover.outcome``."""
BAD_OUTCOMES: Final = (OUTCOME_FAILURE, OUTCOME_CIRCUIT_OPEN)
"""Outcomes that failed the user (span status ERROR; the SLO's bad requests)."""

RESULT_SUCCESS: Final = "success"
"""The domain answered with a success."""
RESULT_ANSWER: Final = "answer"
"""The domain answered with a final non-success (4xx, application error): it is healthy."""
RESULT_FAILURE: Final = "failure"
"""The domain failed (or throttled): counted against it."""
RESULT_DROPPED: Final = "dropped"
"""The connection closed before any byte of the answer (a server's keep-alive timeout met
the request), and the request went to that domain again at once: not counted against it.
A second drop in the same request, or one that cannot be sent again, is a ``failure``."""
ATTEMPT_RESULTS: Final = (RESULT_SUCCESS, RESULT_ANSWER, RESULT_FAILURE, RESULT_DROPPED)
"""Every value of ``failover.attempt.result``."""
ANSWERED_RESULTS: Final = (RESULT_SUCCESS, RESULT_ANSWER)
"""Attempt results where the domain answered."""

BREAKER_CLOSED: Final = "closed"
"""Breaker state: requests go through."""
BREAKER_HALF_OPEN: Final = "half_open"
"""Breaker state: one probe request is allowed."""
BREAKER_OPEN: Final = "open"
"""Breaker state: the domain is skipped without a network call."""
BREAKER_STATES: Final = (BREAKER_CLOSED, BREAKER_HALF_OPEN, BREAKER_OPEN)
"""Every value of ``failover.breaker.from`` and ``failover.breaker.to``."""
BREAKER_GAUGE: Final[Mapping[str, int]] = {BREAKER_CLOSED: 0, BREAKER_HALF_OPEN: 1, BREAKER_OPEN: 2}
"""Value of the ``failover.breaker.state`` gauge for each state."""

SHARED_CONNECTED: Final = "connected"
"""Shared health state: connected to Redis, sharing breakers with the fleet."""
SHARED_DISCONNECTED: Final = "disconnected"
"""Shared health state: Redis is unreachable or slow; local-only, reconnecting."""
SHARED_STATES: Final = (SHARED_CONNECTED, SHARED_DISCONNECTED)
"""Every state of shared health (``transport.state().shared.state``, "closed" aside)."""
SHARED_CLOSED: Final = "closed"
"""``transport.state().shared.state`` once shared health is closed (no gauge value)."""
SHARED_GAUGE: Final[Mapping[str, int]] = {SHARED_DISCONNECTED: 0, SHARED_CONNECTED: 1}
"""Value of the ``failover.shared.state`` gauge for each state."""

STEERING_WEIGHT: Final = "weight"
"""Steering: a weight draw put a domain first (a gray release)."""
STEERING_AFFINITY: Final = "affinity"
"""Steering: the request's affinity key ranked the affinity domains first (rendezvous hashing)."""
STEERING_ORDER: Final = "order"
"""Steering: the request named one of the pool's orders."""
STEERING_TIME_ORDER: Final = "time_order"
"""Steering: the current time window's order replaced the pool's."""
STEERINGS: Final = (STEERING_WEIGHT, STEERING_AFFINITY, STEERING_ORDER, STEERING_TIME_ORDER)
"""``failover.steering`` values: why a request's order was not the pool's."""

SWITCH_REASON_FAILBACK: Final = "failback"
"""Switch reason: traffic went back to a preferred domain."""
SWITCH_REASON_PREFERRED_UNAVAILABLE: Final = "preferred_unavailable"
"""Switch reason: the preferred domain was skipped (breaker open, disabled) without failing."""
SWITCH_REASONS: Final = (SWITCH_REASON_FAILBACK, SWITCH_REASON_PREFERRED_UNAVAILABLE)
"""``failover.reason`` values besides the ``error.type`` of the failure that moved traffic."""
BREAKER_REASON_SLOW_CALLS: Final = "slow_calls"
"""``failover.reason`` of a breaker transition (and switch) caused by slow calls (``SlowCalls``):
the domain answered, but too often slower than the threshold."""

HEDGE_WON: Final = "won"
"""Hedge outcome: its answer was the one returned."""
HEDGE_LOST: Final = "lost"
"""Hedge outcome: it ended (failed) while the request went on, or answered after the winner."""
HEDGE_CANCELLED: Final = "cancelled"
"""Hedge outcome: another attempt won while it was in flight; it was cut off."""
HEDGE_THROTTLED: Final = "throttled"
"""Hedge outcome: a hedge was due, but the throttle (``Hedging.max_ratio``) held it back."""
HEDGE_OUTCOMES: Final = (HEDGE_WON, HEDGE_LOST, HEDGE_CANCELLED, HEDGE_THROTTLED)
"""``failover.hedge.outcome`` values; all but ``throttled`` are also how each attempt of a hedged
request ended (``AttemptRecord.race``)."""

ERROR_APP: Final = "app_error"
"""``error.type`` of a 2xx the policy's ``is_app_error`` rejected (never on the semconv histogram)."""
ERROR_CANCELLED: Final = "cancelled"
"""``error.type`` of an attempt or request the caller cancelled."""
ERROR_CONNECT_TIMEOUT: Final = "connect_timeout"
"""``error.type``: the connection was not made in time (``httpx.ConnectTimeout``)."""
ERROR_READ_TIMEOUT: Final = "read_timeout"
"""``error.type``: the answer did not come in time (``httpx.ReadTimeout``)."""
ERROR_WRITE_TIMEOUT: Final = "write_timeout"
"""``error.type``: the request could not be sent in time (``httpx.WriteTimeout``)."""
ERROR_POOL_TIMEOUT: Final = "pool_timeout"
"""``error.type``: no connection of the pool came free in time (``httpx.PoolTimeout``)."""
ERROR_TIMEOUT: Final = "timeout"
"""``error.type``: any other timeout (``httpx.TimeoutException``, the agent's pool probe)."""
ERROR_CONNECT: Final = "connect_error"
"""``error.type``: the connection failed, no more precise cause known (``httpx.ConnectError``)."""
ERROR_READ: Final = "read_error"
"""``error.type``: reading the answer failed (``httpx.ReadError``)."""
ERROR_WRITE: Final = "write_error"
"""``error.type``: sending the request failed (``httpx.WriteError``)."""
ERROR_REMOTE_PROTOCOL: Final = "remote_protocol_error"
"""``error.type``: the server broke HTTP (``httpx.RemoteProtocolError``)."""
ERROR_DNS: Final = "dns_error"
"""``error.type``: the host name did not resolve."""
ERROR_CONNECTION_REFUSED: Final = "connection_refused"
"""``error.type``: nothing listens at the domain's port."""
ERROR_CONNECTION_RESET: Final = "connection_reset"
"""``error.type``: the peer reset the connection."""
ERROR_TLS: Final = "tls_error"
"""``error.type``: the TLS handshake failed."""
ERROR_SERVER_CERTIFICATE_INVALID: Final = "server_certificate_invalid"
"""``error.type``: the server's certificate did not verify."""
TRANSPORT_ERROR_TYPES: Final = frozenset(
    {
        ERROR_CONNECT_TIMEOUT,
        ERROR_READ_TIMEOUT,
        ERROR_WRITE_TIMEOUT,
        ERROR_POOL_TIMEOUT,
        ERROR_TIMEOUT,
        ERROR_CONNECT,
        ERROR_READ,
        ERROR_WRITE,
        ERROR_REMOTE_PROTOCOL,
        ERROR_DNS,
        ERROR_CONNECTION_REFUSED,
        ERROR_CONNECTION_RESET,
        ERROR_TLS,
        ERROR_SERVER_CERTIFICATE_INVALID,
    }
)
"""``error.type`` of transport failures; a response's is its status code (``"503"``), and an
unknown exception's is its qualified class name."""
STOP_DONE: Final = "done"
"""Stop reason: a success or an answer ended the request."""
STOP_EXHAUSTED: Final = "exhausted"
"""Stop reason: the schedule's attempts, or the admissible domains, ran out."""
STOP_DEADLINE: Final = "deadline"
"""Stop reason: the next attempt would start past the request's deadline."""
STOP_NOT_RETRYABLE: Final = "not_retryable"
"""Stop reason: the failure may not be retried (a request whose bytes may have left, say)."""
STOP_RETRY_BUDGET: Final = "retry_budget"
"""Stop reason: the pool's retry budget refused the retry."""
STOP_REASONS: Final = frozenset(
    {STOP_DONE, STOP_EXHAUSTED, STOP_DEADLINE, STOP_NOT_RETRYABLE, STOP_RETRY_BUDGET, OUTCOME_CIRCUIT_OPEN}
)
"""Why the client stopped trying; a failed request without an attempt error reports it as ``error.type``."""

PROBE_PHASES: Final = ("dns", "connect", "tls", "ttfb", "transfer")
"""Every value of ``phase`` (``tls`` for https only); the whole probe is ``failover.probe.duration``."""
PHASE_TOTAL: Final = "total"
"""Not a ``phase`` value: the whole pinned probe's entry among a probe result's phases, which
``failover.probe.duration`` records."""
CHECK_CERT: Final = "cert"
"""Readiness check: the certificate is valid for longer than the warning days."""
CHECK_CORS: Final = "cors"
"""Readiness check: the CORS preflight answer equals the primary's."""
CHECK_HEALTH: Final = "health"
"""Readiness check: the health answer equals the primary's."""
READINESS_CHECKS: Final = (CHECK_CERT, CHECK_CORS, CHECK_HEALTH)
"""Every value of ``check``."""
SIGNAL_SPANS: Final = "spans"
"""``signal`` of dropped spans."""
SIGNAL_METRICS: Final = "metrics"
"""``signal`` of dropped metric points."""
TELEMETRY_SIGNALS: Final = (SIGNAL_SPANS, SIGNAL_METRICS)
"""Every value of ``signal``."""
JOB_PROBE: Final = "probe"
"""``failover.agent.check``: the pinned probe of a domain."""
JOB_POOL: Final = "pool"
"""``failover.agent.check``: the end-to-end probe of a pool through the failover client."""
JOB_READY: Final = "ready"
"""``failover.agent.check``: the readiness checks of a backup."""
JOB_CONTROL: Final = "control"
"""``failover.agent.check``: writing the control document."""
AGENT_JOBS: Final = (JOB_PROBE, JOB_POOL, JOB_READY, JOB_CONTROL)
"""Every value of ``failover.agent.check``."""

RESOLVE_SOURCE_SYSTEM: Final = "system"
"""How an address was found: the operating system's resolver (``socket.getaddrinfo``)."""
RESOLVE_SOURCE_DOH: Final = "doh"
"""How an address was found: a DNS-over-HTTPS server (RFC 8484)."""
RESOLVE_SOURCE_HTTPDNS: Final = "httpdns"
"""How an address was found: an HTTPDNS endpoint (a JSON or text answer over HTTP)."""
RESOLVE_SOURCE_CACHE: Final = "cache"
"""How an address was found: a cached answer still within its TTL."""
RESOLVE_SOURCE_STALE: Final = "stale"
"""How an address was found: a cached answer past its TTL, served because every resolver
failed (serve-stale, RFC 8767)."""
RESOLVE_SOURCES: Final = (
    RESOLVE_SOURCE_SYSTEM,
    RESOLVE_SOURCE_DOH,
    RESOLVE_SOURCE_HTTPDNS,
    RESOLVE_SOURCE_CACHE,
    RESOLVE_SOURCE_STALE,
)
"""Every source of a resolved address (``pytest_failover.resolve.Answer.source``)."""

TEST_RESULT_PASS: Final = test_attributes.TestCaseResultStatusValues.PASS.value
"""``test.case.result.status`` of a test that passed (or was skipped)."""
TEST_RESULT_FAIL: Final = test_attributes.TestCaseResultStatusValues.FAIL.value
"""``test.case.result.status`` of a test that failed or errored."""

# =========================================================================== events

EVENT_BREAKER_TRANSITION: Final = "failover.breaker.transition"
"""Span event of a breaker state change (domain, from, to)."""
EVENT_ADDRESS_SWITCH: Final = "failover.address.switch"
"""Attempt span event: a connect to one address of the domain failed and the next is tried
(``failover.from`` / ``failover.to``: the addresses, ``failover.reason``: the error type);
not a switch of domain."""
EVENT_SWITCH: Final = "failover.switch"
"""Span event of a change of the domain serving a pool (pool, from, to, reason)."""
EVENT_RETRY_BUDGET_REJECTED: Final = "failover.retry_budget.rejected"
"""Span event of a retry the pool's retry budget refused."""
EVENT_FAULT_INJECTED: Final = "failover.fault.injected"
"""Span event of ``fake_domains.fail(...)`` on the test's span."""
EVENT_FAULT_HEALED: Final = "failover.fault.healed"
"""Span event of ``fake_domains.heal(...)`` on the test's span."""
EVENT_UPLOAD_RESUMED: Final = "failover.upload.resumed"
"""Upload span event: ``HEAD`` said where the upload stands (offset, the domain that answered)."""

# =========================================================================== metric names and units

UNIT_SECONDS: Final = "s"
"""Unit of durations and of times (Prometheus suffix ``_seconds``)."""
UNIT_REQUEST: Final = "{request}"
"""Unit annotation of request counts (no Prometheus suffix)."""
UNIT_ATTEMPT: Final = "{attempt}"
"""Unit annotation of attempt counts."""
UNIT_SWITCH: Final = "{switch}"
"""Unit annotation of switch counts."""
UNIT_TRANSITION: Final = "{transition}"
"""Unit annotation of breaker transition counts."""
UNIT_RETRY: Final = "{retry}"
"""Unit annotation of retry counts."""
UNIT_HEDGE: Final = "{hedge}"
"""Unit annotation of hedge counts."""
UNIT_CALL: Final = "{call}"
"""Unit annotation of call counts."""
UNIT_RESOLUTION: Final = "{resolution}"
"""Unit annotation of counts of name resolutions."""
UNIT_BYTES: Final = "By"
"""Unit of byte counts (Prometheus suffix ``_bytes``)."""
UNIT_RUN: Final = "{run}"
"""Unit annotation of counts of check runs."""
UNIT_ITEM: Final = "{item}"
"""Unit annotation of counts of telemetry items (spans, metric points)."""
UNIT_NONE: Final = ""
"""No unit (states, flags, counts of things without an annotation)."""

# --- the failover client (meter ``pytest_failover``)
HTTP_CLIENT_REQUEST_DURATION: Final = http_metrics.HTTP_CLIENT_REQUEST_DURATION
"""Histogram, s: duration of each attempt (semantic conventions)."""
FAILOVER_REQUESTS: Final = "failover.requests"
"""Counter: logical requests, by outcome."""
FAILOVER_REQUEST_DURATION: Final = "failover.request.duration"
"""Histogram, s: duration of logical requests, retries and waits included."""
FAILOVER_ATTEMPTS: Final = "failover.attempts"
"""Counter: attempts sent to a domain, by result."""
FAILOVER_SWITCHES: Final = "failover.switches"
"""Counter: changes of the domain serving a pool."""
FAILOVER_BREAKER_TRANSITIONS: Final = "failover.breaker.transitions"
"""Counter: circuit breaker state changes."""
FAILOVER_BREAKER_STATE: Final = "failover.breaker.state"
"""Gauge: breaker state per domain (:data:`BREAKER_GAUGE`)."""
FAILOVER_RETRY_BUDGET_REJECTIONS: Final = "failover.retry_budget.rejections"
"""Counter: retries refused because the pool's retry budget was spent."""
FAILOVER_HEDGES: Final = "failover.hedges"
"""Counter: hedged attempts, by ``failover.hedge.outcome`` (and the ones the throttle held back)."""
FAILOVER_SLOW_CALLS: Final = "failover.slow_calls"
"""Counter: calls slower than ``SlowCalls.threshold``, per domain."""
FAILOVER_RESOLVE_DURATION: Final = "failover.resolve.duration"
"""Histogram, s: duration of each resolution of a pool's host through its resolver (a
connection being opened), answered or failed (``error.type``), by ``failover.resolver`` and
``failover.resolve.source`` (``cache`` and ``stale`` included)."""
FAILOVER_RESOLVE_FAILURES: Final = "failover.resolve.failures"
"""Counter: resolutions of a pool's host that gave no address (``error.type``: the
``ResolveError`` class), by ``failover.resolver``."""

# --- shared health (meter ``pytest_failover.shared``)
FAILOVER_SHARED_STATE: Final = "failover.shared.state"
"""Gauge: 1 while shared health is connected to Redis, 0 while local-only (:data:`SHARED_GAUGE`)."""

# --- resumable uploads (meter ``pytest_failover.uploads``)
FAILOVER_UPLOAD_BYTES: Final = "failover.upload.bytes"
"""Counter, By: bytes of uploads the servers acknowledged, by pool and domain."""

# --- the agent (meter ``failover_agent``)
FAILOVER_PROBE_SUCCESS: Final = "failover.probe.success"
"""Gauge: 1 if the last pinned probe of the domain succeeded."""
FAILOVER_PROBE_DURATION: Final = "failover.probe.duration"
"""Gauge, s: duration of the whole last pinned probe (blackbox_exporter's
``probe_duration_seconds``): one series per domain, where a histogram was seven."""
FAILOVER_PROBE_PHASE_DURATION: Final = "failover.probe.phase.duration"
"""Gauge, s: duration of each phase of the last pinned probe (blackbox_exporter's
``probe_http_duration_seconds``)."""
FAILOVER_PROBE_STATUS_CODE: Final = "failover.probe.status_code"
"""Gauge: HTTP status of the last pinned probe (0: no response)."""
FAILOVER_POOL_AVAILABLE: Final = "failover.pool.available"
"""Gauge: 1 if the last pool probe through the failover client succeeded."""
FAILOVER_POOL_SERVING: Final = "failover.pool.serving"
"""Gauge: 1 for the domain that served the last pool probe."""
FAILOVER_TLS_CERT_EXPIRY_TIMESTAMP: Final = "failover.tls.cert.expiry_timestamp"
"""Gauge, s: Unix time the earliest-expiring certificate of the domain's verified chain
expires, read from the handshake of each pinned probe (blackbox_exporter's
``probe_ssl_earliest_cert_expiry``); every https domain has it."""
FAILOVER_READINESS_READY: Final = "failover.readiness.ready"
"""Gauge: 1 if the backup passes the readiness check."""
FAILOVER_CONTROL_VERSION: Final = "failover.control.version"
"""Gauge: version of the control document being served."""
FAILOVER_CONTROL_ISSUED_TIMESTAMP: Final = "failover.control.issued_timestamp"
"""Gauge, s: Unix time the served control document was issued."""
FAILOVER_CONTROL_DOMAIN_DISABLED: Final = "failover.control.domain.disabled"
"""Gauge: 1 if the served control document disables the domain."""
FAILOVER_MAINTENANCE_ACTIVE: Final = "failover.maintenance.active"
"""Gauge: 1 while the domain is in a maintenance window (``[[maintenance]]`` or ``failover-agent
maintenance start``); no series outside one (alert rules mute the domain with ``unless on``)."""
FAILOVER_DNS_MISMATCH: Final = "failover.dns.mismatch"
"""Gauge: 1 when the system resolver's addresses of the domain and the configured resolver's
(``[pools.resolver]``) have none in common at the last pinned probe (a sign of hijacking at
that location), 0 when they share one; no series without a resolver or when either failed."""
FAILOVER_CONTROL_QUORUM_UP: Final = "failover.control.quorum.up"
"""Gauge (quorum publisher): 1 if its last Prometheus query answered sensibly and the document
was decided anew; 0 while Prometheus is unreachable or answers nonsense and the last document
stays in force."""
FAILOVER_AGENT_JOB_OVERRUNS: Final = "failover.agent.job.overruns"
"""Counter: check runs skipped because the previous run was still going (``failover.agent.check``)."""
FAILOVER_AGENT_TELEMETRY_DROPPED: Final = "failover.agent.telemetry.dropped"
"""Counter: spans or metric points lost by the OTLP exporters."""

# =========================================================================== histogram buckets

DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)
"""The semantic conventions' recommended buckets (s) of ``http.client.request.duration``,
also used for ``failover.request.duration``."""

# =========================================================================== Prometheus

MetricKind = Literal["counter", "updowncounter", "histogram", "gauge"]
"""What a metric's points are: a monotonic sum, a non-monotonic sum, a histogram, a gauge
(observable or synchronous instruments alike)."""

_NAME_CHARS = re.compile(r"[^a-zA-Z0-9:]+")
_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9]+")
_ANNOTATION = re.compile(r"{.*}")
_UNIT_WORDS = {
    "d": "days", "h": "hours", "min": "minutes", "s": "seconds", "ms": "milliseconds",
    "us": "microseconds", "ns": "nanoseconds", "By": "bytes", "KiBy": "kibibytes",
    "MiBy": "mebibytes", "1": "", "%": "percent",
}


def prometheus_name(name: str, unit: str, kind: MetricKind) -> str:
    """The name Prometheus shows for an OpenTelemetry metric (the OTLP-to-Prometheus rules).

    Characters other than letters, digits and ``:`` become ``_``; the unit is
    appended as a word (``s`` -> ``_seconds``, annotations like ``{request}`` add
    nothing); counters end in ``_total``. For a histogram this is the base name:
    the series are ``{base}_bucket``, ``{base}_sum`` and ``{base}_count``.
    Units with ``/`` are not supported (none is used here).
    """
    base = _NAME_CHARS.sub("_", name)  # an OpenTelemetry name starts with a letter
    if kind == "counter":
        base = base.removesuffix("_total")
    bare = _ANNOTATION.sub("", unit)
    suffix = _UNIT_WORDS[bare] if bare in _UNIT_WORDS else _NAME_CHARS.sub("_", bare).strip("_")
    if suffix and not base.endswith("_" + suffix):
        base = f"{base}_{suffix}"
    return f"{base}_total" if kind == "counter" else base


def prometheus_label(key: str) -> str:
    """The Prometheus label of an attribute key: ``failover.pool`` -> ``failover_pool``."""
    return _LABEL_CHARS.sub("_", "_" + key[1:] if key[:1].isdigit() else key)


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric: its OpenTelemetry name, kind, unit and meter (instrumentation scope)."""

    name: str
    kind: MetricKind
    unit: str
    scope: str

    @property
    def prometheus(self) -> str:
        """The Prometheus name (the base name of a histogram)."""
        return prometheus_name(self.name, self.unit, self.kind)

    @property
    def samples(self) -> tuple[str, ...]:
        """Every Prometheus series name of the metric."""
        base = self.prometheus
        if self.kind == "histogram":
            return (f"{base}_bucket", f"{base}_sum", f"{base}_count")
        return (base,)


def _metrics(*specs: Metric) -> Mapping[str, Metric]:
    return {spec.name: spec for spec in specs}


METRICS: Final[Mapping[str, Metric]] = _metrics(
    Metric(HTTP_CLIENT_REQUEST_DURATION, "histogram", UNIT_SECONDS, CLIENT_SCOPE),
    Metric(FAILOVER_REQUESTS, "counter", UNIT_REQUEST, CLIENT_SCOPE),
    Metric(FAILOVER_REQUEST_DURATION, "histogram", UNIT_SECONDS, CLIENT_SCOPE),
    Metric(FAILOVER_ATTEMPTS, "counter", UNIT_ATTEMPT, CLIENT_SCOPE),
    Metric(FAILOVER_SWITCHES, "counter", UNIT_SWITCH, CLIENT_SCOPE),
    Metric(FAILOVER_BREAKER_TRANSITIONS, "counter", UNIT_TRANSITION, CLIENT_SCOPE),
    Metric(FAILOVER_BREAKER_STATE, "gauge", UNIT_NONE, CLIENT_SCOPE),
    Metric(FAILOVER_RETRY_BUDGET_REJECTIONS, "counter", UNIT_RETRY, CLIENT_SCOPE),
    Metric(FAILOVER_HEDGES, "counter", UNIT_HEDGE, CLIENT_SCOPE),
    Metric(FAILOVER_SLOW_CALLS, "counter", UNIT_CALL, CLIENT_SCOPE),
    Metric(FAILOVER_RESOLVE_DURATION, "histogram", UNIT_SECONDS, CLIENT_SCOPE),
    Metric(FAILOVER_RESOLVE_FAILURES, "counter", UNIT_RESOLUTION, CLIENT_SCOPE),
    Metric(FAILOVER_SHARED_STATE, "gauge", UNIT_NONE, SHARED_SCOPE),
    Metric(FAILOVER_UPLOAD_BYTES, "counter", UNIT_BYTES, UPLOAD_SCOPE),
    Metric(FAILOVER_PROBE_SUCCESS, "gauge", UNIT_NONE, AGENT_SCOPE),
    Metric(FAILOVER_PROBE_DURATION, "gauge", UNIT_SECONDS, AGENT_SCOPE),
    Metric(FAILOVER_PROBE_PHASE_DURATION, "gauge", UNIT_SECONDS, AGENT_SCOPE),
    Metric(FAILOVER_PROBE_STATUS_CODE, "gauge", UNIT_NONE, AGENT_SCOPE),
    Metric(FAILOVER_POOL_AVAILABLE, "gauge", UNIT_NONE, AGENT_SCOPE),
    Metric(FAILOVER_POOL_SERVING, "gauge", UNIT_NONE, AGENT_SCOPE),
    Metric(FAILOVER_TLS_CERT_EXPIRY_TIMESTAMP, "gauge", UNIT_SECONDS, AGENT_SCOPE),
    Metric(FAILOVER_READINESS_READY, "gauge", UNIT_NONE, AGENT_SCOPE),
    Metric(FAILOVER_CONTROL_VERSION, "gauge", UNIT_NONE, AGENT_SCOPE),
    Metric(FAILOVER_CONTROL_ISSUED_TIMESTAMP, "gauge", UNIT_SECONDS, AGENT_SCOPE),
    Metric(FAILOVER_CONTROL_DOMAIN_DISABLED, "gauge", UNIT_NONE, AGENT_SCOPE),
    Metric(FAILOVER_AGENT_JOB_OVERRUNS, "counter", UNIT_RUN, AGENT_SCOPE),
    Metric(FAILOVER_AGENT_TELEMETRY_DROPPED, "counter", UNIT_ITEM, AGENT_SCOPE),
    Metric(FAILOVER_MAINTENANCE_ACTIVE, "gauge", UNIT_NONE, AGENT_SCOPE),
    Metric(FAILOVER_DNS_MISMATCH, "gauge", UNIT_NONE, AGENT_SCOPE),
    Metric(FAILOVER_CONTROL_QUORUM_UP, "gauge", UNIT_NONE, QUORUM_SCOPE),
)
"""Every metric the project emits, by OpenTelemetry name."""
CLIENT_METRIC_NAMES: Final = frozenset(name for name, m in METRICS.items() if m.scope == CLIENT_SCOPE)
"""Names of the failover client's metrics."""
AGENT_METRIC_NAMES: Final = tuple(name for name, m in METRICS.items() if m.scope == AGENT_SCOPE)
"""Names of the agent's own metrics, in the order above."""

PROMETHEUS_TARGET_INFO: Final = "target_info"
"""The Prometheus series that carries the resource attributes as labels."""
PROMETHEUS_SCOPE_NAME: Final = "otel_scope_name"
"""The Prometheus label of a series' instrumentation scope name."""
PROMETHEUS_SCOPE_VERSION: Final = "otel_scope_version"
"""The Prometheus label of a series' instrumentation scope version."""
PROMETHEUS_SCOPE_SCHEMA_URL: Final = "otel_scope_schema_url"
"""The Prometheus label of a series' instrumentation scope schema URL."""
PROMETHEUS_SCOPE_PREFIX: Final = "otel_scope_"
"""Prefix of the Prometheus labels made from instrumentation scope attributes."""

# =========================================================================== SLO rules

SLO_LABEL: Final = "slo"
"""Label of every series and alert ``failover-agent rules`` writes: the SLO's name."""
SEVERITY_LABEL: Final = "severity"
"""Label of every alert rule: who hears of it (the shipped Alertmanager routes on it)."""
SEVERITY_PAGE: Final = "page"
"""Severity of an alert that wakes someone up."""
SEVERITY_TICKET: Final = "ticket"
"""Severity of an alert that can wait for working hours."""
SEVERITIES: Final = (SEVERITY_PAGE, SEVERITY_TICKET)
SLO_PROBE_ERRORS: Final = "failover_probe_errors"
"""The ``probe`` indicator's bad events: a domain's failed pinned probes (``slo:{this}:ratio_rate5m``)."""
SLO_REQUEST_ERRORS: Final = "failover_requests_errors"
"""The ``availability`` indicator's bad events: the agent's pool requests that failed the user."""
SLO_BURN_RATE: Final = "burn_rate"
"""Error ratio over a window divided by the error budget (1: the budget lasts the SLO window)."""
SLO_ERROR_BUDGET_REMAINING: Final = "error_budget_remaining"
"""Share of the SLO window's error budget left (1: untouched, 0 or below: spent)."""
SLO_RECORDS: Final = (SLO_PROBE_ERRORS, SLO_REQUEST_ERRORS, SLO_BURN_RATE, SLO_ERROR_BUDGET_REMAINING)
SLO_CONFIGURED: Final = "failover:slo_configured"
"""Recording rule ``failover-agent rules`` writes for each pool with an ``availability`` SLO: 1,
labelled with the pool and the SLO. The shipped pool burn-rate alerts (``dashboards/alerts.yml``)
leave those pools out (``unless on (failover_pool)``), so a pool pages once, not twice."""


def slo_record(quantity: str, window: str | None = None) -> str:
    """The name of an SLO recording rule, as Prometheus' ``level:metric:operations`` convention
    writes it: ``slo:failover_probe_errors:ratio_rate5m``, or ``slo:error_budget_remaining:ratio``
    without a window."""
    if quantity not in SLO_RECORDS:
        raise ValueError(f"not an SLO record: {quantity!r} (one of {', '.join(SLO_RECORDS)})")
    return f"{SLO_LABEL}:{quantity}:ratio" + (f"_rate{window}" if window else "")
