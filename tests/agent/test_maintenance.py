"""Maintenance windows: the configuration, the decision at a given time, the metric and the drain."""

from __future__ import annotations

from collections.abc import Set
from datetime import UTC, datetime
from pathlib import Path

import pytest
from failover_agent.checks.result import ProbeResult
from failover_agent.config import AgentConfig, ConfigError, load_config, parse_config
from failover_agent.control_writer import EMPTY_OVERRIDE, Override, decide_disabled
from failover_agent.maintenance import Window, decide, windows_at
from failover_agent.metrics import AgentMetrics
from failover_agent.prometheus_text import PrometheusTextReader
from failover_agent.state import AgentState, DomainStatus
from opentelemetry.sdk.metrics import MeterProvider

A, B, C = "https://api.example.com", "https://api2.example.com", "https://api3.example.com"
POOLS = f'[[pools]]\nname = "api"\ndomains = ["{A}", "{B}", "{C}"]\n'
CONTROL = '[control]\nsigning_key_file = "control.key"\n'  # drain needs it; parse_config reads no key


def _utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def _config(text: str) -> AgentConfig:
    import tomllib

    return parse_config(tomllib.loads(POOLS + text))


def _errors(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "agent.toml"
    path.write_text(POOLS + text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return dict(info.value.errors)


# --- configuration -------------------------------------------------------------------------


def test_one_off_and_recurring_windows_load() -> None:
    """A range takes TOML's own times or quoted RFC 3339 ones; a schedule takes a crontab line."""
    config = _config(
        CONTROL + f'[[maintenance]]\npool = "api"\ndomains = ["{A}"]\nstart = 2026-12-05T02:00:00Z\n'
        'end = "2026-12-05T04:00:00+01:00"\ndrain = "5m"\nreason = "database upgrade"\n'
        '[[maintenance]]\npool = "api"\nschedule = "30 3 * * sun"\nduration = "1h30m"\n'
        'timezone = "Europe/Paris"\n')
    first, second = config.maintenance
    assert (first.domains, first.drain, first.reason) == ([A], "5m", "database upgrade")
    assert first.end is not None and first.end.timestamp() == _utc("2026-12-05T03:00:00")
    assert (second.schedule, second.duration, second.timezone, second.domains) == (
        "30 3 * * sun", "1h30m", "Europe/Paris", [])


@pytest.mark.parametrize(
    ("text", "path", "message"),
    [
        ('pool = "api"\nschedul = "0 2 * * sun"\nduration = "1h"\n', "maintenance[0].schedul",
         "unknown key: did you mean 'schedule'?"),
        ('pool = "apl"\nstart = 2026-12-05T02:00:00Z\nend = 2026-12-05T03:00:00Z\n', "",
         "maintenance[0].pool: no pool named 'apl': did you mean 'api'?"),
        ('pool = "api"\ndomains = ["https://web.example.com"]\nstart = 2026-12-05T02:00:00Z\n'
         'end = 2026-12-05T03:00:00Z\n', "",
         f"maintenance[0].domains: 'https://web.example.com' is not a domain of pool 'api' ({A}, {B}, {C})"),
        ('pool = "api"\nstart = 2026-12-05T02:00:00\nend = 2026-12-05T03:00:00Z\n', "maintenance[0].start",
         "2026-12-05T02:00:00 has no UTC offset: add one, such as 2026-12-05T02:00:00Z or "
         "2026-12-05T02:00:00+01:00"),
        ('pool = "api"\nstart = "tomorrow"\nend = 2026-12-05T03:00:00Z\n', "maintenance[0].start",
         "'tomorrow' is not an RFC 3339 time such as 2026-12-05T02:00:00Z"),
        ('pool = "api"\nstart = 2026-12-05T03:00:00Z\nend = 2026-12-05T02:00:00Z\n', "maintenance[0]",
         "end (2026-12-05T02:00:00+00:00) is not after start (2026-12-05T03:00:00+00:00)"),
        ('pool = "api"\nstart = 2026-12-05T03:00:00Z\n', "maintenance[0]",
         "set both start and end (only start is set)"),
        ('pool = "api"\n', "maintenance[0]",
         "set start and end (one window), or schedule and duration (recurring windows)"),
        ('pool = "api"\nschedule = "0 2 * * sun"\n', "maintenance[0]",
         "a schedule needs a duration, and a duration a schedule (such as schedule = '0 2 * * sun' "
         "and duration = '2h')"),
        ('pool = "api"\nschedule = "0 2 * * sun"\nduration = "1h"\nstart = 2026-12-05T03:00:00Z\n',
         "maintenance[0]", "set either start and end (one window) or schedule and duration (a window "
         "each time the schedule fires), not both"),
        ('pool = "api"\nschedule = "0 2 * *"\nduration = "1h"\n', "maintenance[0]",
         "schedule: '0 2 * *' is not a cron schedule: expected 5 fields (minute hour day month "
         "day-of-week), such as '0 2 * * sun'"),
        ('pool = "api"\nschedule = "0 2 * * 0"\nduration = "1h"\n', "maintenance[0]",
         "schedule: '0 2 * * 0': write the day of week as a name (mon, tue, ..., sun, or mon-fri): "
         "0 is Sunday to cron but Monday to APScheduler"),
        ('pool = "api"\nschedule = "0 25 * * sun"\nduration = "1h"\n', "maintenance[0]",
         "schedule: '0 25 * * sun' is not a valid cron schedule: Error validating expression '25': "
         "the last value (25) is higher than the maximum value (23)"),
        ('pool = "api"\nschedule = "0 2 * * sun"\nduration = "2 hours"\n', "maintenance[0].duration",
         "maintenance.duration takes whole numbers of s (seconds), m (minutes), h (hours) or d (days), the "
         "largest unit first, such as '90s', '5m', '2h' or '1h30m': not '2 hours'"),
        ('pool = "api"\nschedule = "0 2 * * sun"\nduration = "1h"\ntimezone = "Paris"\n',
         "maintenance[0].timezone", "'Paris' is not an IANA time zone such as 'UTC' or 'Europe/Paris'"),
    ],
    ids=["misspelt-key", "pool-misspelt", "domain-not-in-pool", "no-offset", "not-a-time", "end-before-start",
         "start-only", "nothing", "schedule-only", "both-kinds", "four-fields", "numeric-weekday",
         "bad-hour", "bad-duration", "bad-timezone"],
)
def test_maintenance_errors_say_what_is_wrong(tmp_path: Path, text: str, path: str, message: str) -> None:
    """Each mistake in a [[maintenance]] table is one error, at its path, saying what would be right."""
    assert _errors(tmp_path, "[[maintenance]]\n" + text) == {path: message}


def test_drain_without_control_is_an_error(tmp_path: Path) -> None:
    """``drain`` with no [control] section is an error: no control document would move a client."""
    assert _errors(tmp_path, f'[[maintenance]]\npool = "api"\ndomains = ["{A}"]\nstart = 2026-12-05T02:00:00Z\n'
                             'end = 2026-12-05T03:00:00Z\ndrain = "5m"\n') == {
        "": "maintenance[0].drain: nothing would drain: clients leave a domain when the signed control document "
            "disables it, and without a [control] section the agent signs none; add [control] (its "
            "signing_key_file) or remove drain"}


# --- the decision --------------------------------------------------------------------------


def test_a_one_off_window_drains_then_is_active_then_ends() -> None:
    """Before start - drain nothing; then draining; from start to end (excluded) active too."""
    config = _config(CONTROL + f'[[maintenance]]\npool = "api"\ndomains = ["{A}"]\nstart = 2026-12-05T02:00:00Z\n'
                     'end = 2026-12-05T03:00:00Z\ndrain = "5m"\nreason = "upgrade"\n')
    start = _utc("2026-12-05T02:00:00")

    def at(offset: float) -> tuple[bool, bool, int]:
        d = decide(windows_at(config, start + offset), start + offset)
        return d.is_active("api", A), ("api", A) in d.draining, len(d.upcoming)

    assert at(-301) == (False, False, 1)  # announced (within a day), not draining yet
    assert at(-300) == (False, True, 1)
    assert at(-1) == (False, True, 1)
    assert at(0) == (True, True, 0)
    assert at(3599) == (True, True, 0)
    assert at(3600) == (False, False, 0)
    assert not decide(windows_at(config, start), start).is_active("api", B)


def test_a_recurring_window_is_each_occurrence_of_its_schedule() -> None:
    """Sundays 02:00 for 2 h in Paris: active at 01:00 UTC on a Sunday in winter, not on Monday."""
    config = _config(CONTROL + '[[maintenance]]\npool = "api"\nschedule = "0 2 * * sun"\nduration = "2h"\n'
                     'timezone = "Europe/Paris"\ndrain = "10m"\n')
    sunday_2am_paris = _utc("2026-12-06T01:00:00")  # a Sunday; Paris is UTC+1 in December

    def decision(now: float) -> tuple[bool, bool]:
        d = decide(windows_at(config, now), now)
        return d.is_active("api", A) and d.is_active("api", C), ("api", B) in d.draining

    assert decision(sunday_2am_paris - 601) == (False, False)
    assert decision(sunday_2am_paris - 600) == (False, True)
    assert decision(sunday_2am_paris) == (True, True)
    assert decision(sunday_2am_paris + 7199) == (True, True)
    assert decision(sunday_2am_paris + 7200) == (False, False)
    assert decision(sunday_2am_paris + 86400) == (False, False)
    assert decision(sunday_2am_paris + 7 * 86400) == (True, True)


def test_overlapping_windows_keep_the_one_ending_last() -> None:
    """Two windows on one domain: it stays in maintenance until the later end, with that reason."""
    early = Window(pool="api", domains=frozenset({A}), start=100, end=200, reason="early")
    late = Window(pool="api", domains=frozenset({A}), start=150, end=300, reason="late")
    assert decide([early, late], 160).active[("api", A)].reason == "late"
    assert decide([late, early], 160).active[("api", A)].reason == "late"
    assert decide([early, late], 250).is_active("api", A)
    assert not decide([early, late], 300).is_active("api", A)


def test_a_window_must_end_after_it_starts() -> None:
    with pytest.raises(ValueError, match=r"window 'm1': end \(100\) is not after start \(100\)"):
        Window(pool="api", domains=frozenset({A}), start=100, end=100, source="m1")


# --- the drain through the control writer's rules --------------------------------------------


def _state(config: AgentConfig, down: Set[str] = frozenset()) -> AgentState:
    state = AgentState(location="lab")
    for pool in config.pools:
        for url in pool.domains:
            status = DomainStatus(pool.name, url, url.split("//")[1])
            for _ in range(3):
                status.record(ProbeResult(url not in down, 200 if url not in down else None, None, 0.01))
            state.domains[(pool.name, url)] = status
    return state


def test_a_drained_domain_is_disabled_but_never_the_last_one() -> None:
    """Draining disables the domain; the pool rule drops it when the others are down too; the
    operator's enable wins over it."""
    config = _config("")
    drained = {"api": {A}}
    assert decide_disabled(config.pools, _state(config), 2, EMPTY_OVERRIDE, drained) == {"api": frozenset({A})}
    assert decide_disabled(config.pools, _state(config, {B, C}), 2, EMPTY_OVERRIDE, drained) == {"api": frozenset()}
    enable = Override({}, {"api": frozenset({A})})
    assert decide_disabled(config.pools, _state(config), 2, enable, drained) == {"api": frozenset()}
    every = {"api": {A, B, C}}
    assert decide_disabled(config.pools, _state(config), 2, EMPTY_OVERRIDE, every) == {"api": frozenset()}


# --- the metric ----------------------------------------------------------------------------


class _NoDrops:
    def snapshot(self) -> dict[str, int]:
        return {}


def test_the_metric_names_the_domains_in_maintenance_and_only_them() -> None:
    """``failover_maintenance_active 1`` per domain in a window, with the domain's labels; none outside."""
    config = _config(f'[[maintenance]]\npool = "api"\ndomains = ["{B}"]\nstart = 2026-12-05T02:00:00Z\n'
                     'end = 2026-12-05T03:00:00Z\n')
    state = _state(config)
    now = [_utc("2026-12-05T02:30:00")]
    reader = PrometheusTextReader()
    provider = MeterProvider(metric_readers=[reader])
    AgentMetrics(provider, lambda: state, _NoDrops(), lambda: decide(windows_at(config, now[0]), now[0]))
    during = [line for line in reader.render().decode().splitlines() if line.startswith("failover_maintenance_active")]
    now[0] = _utc("2026-12-05T03:00:00")
    after = [line for line in reader.render().decode().splitlines() if line.startswith("failover_maintenance_active")]
    provider.shutdown()
    assert during == ['failover_maintenance_active{failover_pool="api",otel_scope_name="failover_agent",'
                      'probe_location="lab",server_address="api2.example.com",server_port="443",url_scheme="https"} 1.0']
    assert after == []
