"""The configuration file: strict validation, errors with their path in the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from failover_agent.checks.pool import POOLS_PER_TRANSPORT
from failover_agent.config import ConfigError, load_config, parse_config
from failover_agent.runner import Agent
from failover_agent.runtime import Runtime

from pytest_failover import ExponentialBackoff, Policy, ScheduleTable
from pytest_failover.control import generate_key, save_key

GOOD = """
location = "eu-west"
region = "eu"

[[pools]]
name = "api"
domains = ["https://api.example.com", "https://api2.example.com", "https://api-eu.example.com"]
region_order = { eu = ["https://api-eu.example.com"] }

[pools.policy]
attempt_timeout = 2.5
deadline = 6
breaker_threshold = 2
breaker_cooldown = 10
retry_statuses = [500, 503]
[pools.policy.schedule_table]
steps = [{ at = 0, domain = 0 }, { at = 1, domain = 1 }]
[pools.policy.retry_budget]
enabled = false

[pools.probe]
path = "/health"
headers = { "User-Agent" = "failover-agent" }
expected_status = [200, 204]
interval = 15
timeout = 5
json_check = { field = "status", equals = "ok" }
[pools.probe.domains."https://api2.example.com"]
path = "/v2/health"
timeout = 1

[pools.readiness]
interval = 60
cert_warning_days = 21
cors_origins = ["https://app.example.com"]
health_field = "status"

[exporters.prometheus]
listen = "127.0.0.1:9464"
[exporters.otlp]
endpoint = "http://127.0.0.1:4317"
protocol = "grpc"

[control]
signing_key_file = "key.bin"
override_file = "override.toml"
path = "/control.json"
"""


def _write(tmp_path: Path, text: str) -> Path:
    if not (tmp_path / "key.bin").exists():
        save_key(tmp_path / "key.bin", generate_key("HS256"), private=True)
    path = tmp_path / "agent.toml"
    path.write_text(text)
    return path


def _errors(tmp_path: Path, text: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text))
    return dict(info.value.errors)


def test_a_full_config_loads_and_maps_onto_the_library(tmp_path: Path) -> None:
    """Every section is read; the policy becomes the library's Policy and overrides merge."""
    config = load_config(_write(tmp_path, GOOD))
    pool = config.pools[0]
    assert pool.primary("eu") == "https://api-eu.example.com"
    assert pool.to_pool().order("eu")[0].url == "https://api-eu.example.com"
    policy = pool.policy.to_policy()
    assert isinstance(policy, Policy)
    assert isinstance(policy.schedule, ScheduleTable)
    assert policy.retry_budget is None
    assert policy.retry_statuses == frozenset({500, 503})
    assert policy.breaker_threshold == 2
    backup = pool.probe.for_domain("https://api2.example.com")
    assert (backup.path, backup.timeout, backup.interval) == ("/v2/health", 1, 15)
    assert pool.probe.for_domain("https://api.example.com").path == "/health"
    assert config.control is not None
    assert config.control.signing_key_file == tmp_path / "key.bin"
    assert config.exporters.otlp is not None and config.exporters.otlp.protocol == "grpc"


def test_defaults_give_the_library_defaults() -> None:
    """A pool with only domains gets the default Policy and probe settings."""
    config = parse_config({"pools": [{"name": "p", "domains": ["http://127.0.0.1:8080"]}]})
    policy = config.pools[0].policy.to_policy()
    assert policy == Policy()
    assert isinstance(policy.schedule, ExponentialBackoff)
    assert config.pools[0].probe.timeout <= config.pools[0].probe.interval
    assert config.location == "local"


def test_errors_name_their_path_in_the_file(tmp_path: Path) -> None:
    """Every error is reported at once, each with its path."""
    text = """
[[pools]]
name = "api"
domains = ["https://api.example.com"]
[pools.probe]
path = "health"
colour = "blue"
[[pools]]
name = "web"
domains = ["not a url", "https://ok.example.com"]
[pools.policy]
breaker_threshold = "3"
[exporters.otlp]
endpoint = "http://127.0.0.1:4317"
protocol = "udp"
"""
    errors = _errors(tmp_path, text)
    assert errors["pools[1].domains[0]"] == "not a URL (expected e.g. 'https://api.example.com')"
    assert errors["pools[0].probe.path"] == "must start with '/'"
    assert errors["pools[0].probe.colour"] == "unknown key"
    assert "valid integer" in errors["pools[1].policy.breaker_threshold"]
    assert "exporters.otlp.protocol" in errors


def test_the_otlp_endpoint_may_come_from_the_environment() -> None:
    """[exporters.otlp] without an endpoint is valid (OTEL_EXPORTER_OTLP_ENDPOINT or the SDK's
    default gives it); an endpoint that is written must still be a URL."""
    base = {"pools": [{"name": "p", "domains": ["http://127.0.0.1:8080"]}]}
    config = parse_config({**base, "exporters": {"otlp": {"headers": {"x-team": "sre"}}}})
    otlp = config.exporters.otlp
    assert otlp is not None and otlp.endpoint is None and otlp.headers == {"x-team": "sre"}
    assert "endpoint" not in otlp.model_fields_set
    with pytest.raises(ConfigError) as info:
        parse_config({**base, "exporters": {"otlp": {"endpoint": "127.0.0.1:4318"}}})
    assert dict(info.value.errors)["exporters.otlp.endpoint"].startswith("not a URL")


def test_a_timeout_larger_than_the_interval_is_rejected(tmp_path: Path) -> None:
    """Probe and per-domain timeouts must fit in their interval."""
    text = """
[[pools]]
name = "api"
domains = ["https://api.example.com", "https://api2.example.com"]
[pools.probe]
interval = 1
timeout = 2
"""
    assert "larger than interval" in _errors(tmp_path, text)["pools[0].probe"]
    text = text.replace("timeout = 2", 'timeout = 0.5\n[pools.probe.domains."https://api2.example.com"]\ntimeout = 3')
    assert "larger than interval" in _errors(tmp_path, text)["pools[0].probe"]


def test_library_rules_are_reported_at_the_pool(tmp_path: Path) -> None:
    """The library's own validation (a 4xx retry status, an unknown region domain) names the pool."""
    text = """
[[pools]]
name = "api"
domains = ["https://api.example.com"]
region_order = { cn = ["https://api-cn.example.com"] }
[pools.policy]
retry_statuses = [404]
"""
    errors = _errors(tmp_path, text)
    assert "4xx" in errors["pools[0].policy"]
    text = text.replace("retry_statuses = [404]", "")
    assert "not a domain of the pool" in _errors(tmp_path, text)["pools[0]"]


def test_missing_files_and_bad_toml(tmp_path: Path) -> None:
    """A missing signing key or broken TOML is an error, not a crash."""
    errors = _errors(tmp_path, GOOD.replace('"key.bin"', '"nope.bin"'))
    assert "no such file" in errors["control.signing_key_file"]
    errors = _errors(tmp_path, "[[pools]\n")
    assert "not valid TOML" in errors[""]
    errors = _errors(tmp_path, "")
    assert "pools" in errors


def test_check_config_cli_exit_codes(tmp_path: Path) -> None:
    """check-config prints each error with its path and exits 2; a good file exits 0."""
    from click.testing import CliRunner
    from failover_agent.cli import main

    bad = _write(tmp_path, '[[pools]]\nname = "a"\ndomains = ["ftp://x"]\n[pools.probe]\ninterval = 1\ntimeout = 2\n')
    run = CliRunner().invoke(main, ["check-config", str(bad)])
    assert run.exit_code == 2
    assert ("pools[0].domains[0]: unsupported scheme 'ftp' (expected http or https, e.g. "
            "'https://api.example.com')") in run.output.splitlines()
    assert "pools[0].probe: timeout (2.0 s) is larger than interval (1.0 s)" in run.output
    good = _write(tmp_path, GOOD)
    run = CliRunner().invoke(main, ["check-config", str(good)])
    assert run.exit_code == 0, run.output
    assert "OK (1 pool(s), 3 domain(s)" in run.output


def test_scope_labels_on_metrics_are_off_unless_the_file_turns_them_on() -> None:
    """[exporters.prometheus] scope_info_enabled reaches the /metrics reader (default: off)."""
    base = {"pools": [{"name": "p", "domains": ["http://127.0.0.1:8080"]}]}
    for given, expected in (({}, False), ({"scope_info_enabled": True}, True)):
        agent = Agent(parse_config({**base, "exporters": {"prometheus": given}}))
        try:
            assert agent.telemetry.prometheus is not None
            assert agent.telemetry.prometheus.scope_info is expected
        finally:
            agent.telemetry.shutdown()


async def test_pools_with_equal_policies_share_one_policy() -> None:
    """The runtime builds one library Policy per distinct [pools.policy] and gives it to every
    pool that has those settings; a pool with other settings gets its own."""
    config = parse_config({"pools": [
        {"name": "a", "domains": ["http://127.0.0.1:8080", "http://127.0.0.1:8081"]},
        {"name": "b", "domains": ["http://127.0.0.1:8082", "http://127.0.0.1:8083"]},
        {"name": "c", "domains": ["http://127.0.0.1:8084"], "policy": {"deadline": 3.0}},
    ]})
    agent = Agent(config)
    runtime = Runtime(agent, config)
    try:
        a, b, c = (runtime.pool_probers[name].policy for name in "abc")
        assert a is b and a == config.pools[0].policy.to_policy()
        assert c is not a and c.deadline == 3.0
    finally:
        await runtime.aclose()
        agent.telemetry.shutdown()


async def test_pools_share_transports_eight_at_most_and_never_a_domain() -> None:
    """Pools share failover transports (and their clients), POOLS_PER_TRANSPORT at most, never
    two pools with a domain in common; each keeps its own policy, breakers and serving domain:
    a failing domain opens its own pool's breaker only."""
    # loopback addresses on the discard port, where nothing listens: every connection is refused
    pools: list[dict[str, object]] = [
        {"name": f"p{n}", "domains": [f"http://127.0.0.{n + 2}:9", f"http://127.0.0.{n + 2}:19"]}
        for n in range(POOLS_PER_TRANSPORT + 1)]
    pools.append({"name": "again", "domains": ["http://127.0.0.2:9"], "policy": {"deadline": 3.0}})
    config = parse_config({"pools": pools})
    agent = Agent(config)
    runtime = Runtime(agent, config)
    try:
        probers = runtime.pool_probers
        first = {name for name, p in probers.items() if p.transport is probers["p0"].transport}
        assert first == {f"p{n}" for n in range(POOLS_PER_TRANSPORT)}
        assert probers["p0"].client is probers["p1"].client
        assert probers["again"].transport is not probers["p0"].transport  # it has p0's first domain
        assert probers["again"].transport is probers[f"p{POOLS_PER_TRANSPORT}"].transport
        assert probers["again"].policy.deadline == 3.0 != probers[f"p{POOLS_PER_TRANSPORT}"].policy.deadline
        # every attempt to p0's domains is refused: only p0's breakers open
        for _ in range(10):
            await probers["p0"].probe()
        assert set(probers["p0"].breakers().values()) == {"open"}
        assert set(probers["p1"].breakers().values()) == {"closed"}
        assert set(probers["again"].breakers().values()) == {"closed"}
        assert (await probers["p0"].probe()).error_type == "circuit_open"
    finally:
        await runtime.aclose()
        agent.telemetry.shutdown()


POOL = '[[pools]]\nname = "api"\ndomains = ["https://api.example.com"]\n'


@pytest.mark.parametrize(
    ("text", "path", "message"),
    [
        (POOL + "[pools.probe]\nintervall = 3\n", "pools[0].probe.intervall",
         "unknown key: did you mean 'interval'?"),
        (POOL + '[pools.probe.domains."https://api.example.com"]\ntimout = 1\n',
         "pools[0].probe.domains['https://api.example.com'].timout", "unknown key: did you mean 'timeout'?"),
        (POOL + "[exporter.prometheus]\n", "exporter", "unknown key: did you mean 'exporters'?"),
        (POOL + "[pools.probe]\ncolour = 'blue'\n", "pools[0].probe.colour", "unknown key"),
        ('[[pools]]\nname = "api"\ndomains = ["ftp://files.example.com"]\n', "pools[0].domains[0]",
         "unsupported scheme 'ftp' (expected http or https, e.g. 'https://api.example.com')"),
        ('[[pools]]\nname = "api"\ndomains = ["https://api.example.com:99999"]\n', "pools[0].domains[0]",
         "port 99999 out of range (0 to 65535)"),
        ('[[pools]]\nname = "api"\ndomains = ["https://api.example.com/v1"]\n', "pools[0].domains[0]",
         "only scheme, host and port are allowed"),
        ('[[pools]]\nname = "api"\ndomains = []\n', "pools[0].domains",
         "must not be empty: a pool needs at least one domain, such as 'https://api.example.com'"),
        ("pools = []\n", "pools", "must not be empty: the agent needs at least one [[pools]] table"),
        ('[[pools]]\nname = ""\ndomains = ["https://api.example.com"]\n', "pools[0].name", "must not be empty"),
        (POOL + '[exporters.prometheus]\nlisten = "127.0.0.1:99999"\n', "exporters.prometheus.listen",
         "port 99999 out of range (0 to 65535)"),
        (POOL + '[exporters.otlp]\nendpoint = "grpc://127.0.0.1:4317"\n', "exporters.otlp.endpoint",
         "unsupported scheme 'grpc' (expected http or https, e.g. 'http://127.0.0.1:4318')"),
    ],
    ids=["misspelt-key", "misspelt-nested-key", "misspelt-table", "no-close-key", "ftp", "port",
         "path", "empty-pool", "no-pools", "empty-name", "listen-port", "otlp-scheme"],
)
def test_errors_say_what_was_meant(tmp_path: Path, text: str, path: str, message: str) -> None:
    """A misspelt key gets the closest key as a suggestion, a wrong scheme, an out-of-range port
    and an empty list are named as such, word for word, and nothing else is reported."""
    assert _errors(tmp_path, text) == {path: message}


def _files(tmp_path: Path) -> dict[str, Path]:
    """A file of each kind an agent.toml names, each broken."""
    files = {"raw_key": ("raw.key", b"a raw secret"), "override": ("override.toml", b"= ="),
             "ca": ("ca.pem", b"not pem"), "a_file": ("a-file", b""),
             "history": ("history.sqlite", b"this is not a database at all" * 100)}
    for name, content in files.values():
        (tmp_path / name).write_bytes(content)
    return {key: tmp_path / name for key, (name, _) in files.items()}


BROKEN_FILES = [
    ('ca_file = "ca.pem"\n' + POOL, "ca_file",
     "{ca}: not a PEM bundle of CA certificates (NO_CERTIFICATE_OR_CRL_FOUND)"),
    (POOL + '[control]\nsigning_key_file = "raw.key"\n', "control.signing_key_file",
     "{raw_key}: not a JWK (not JSON (Expecting value: line 1 column 1 (char 0))): a raw secret is not "
     "accepted; the key file format is one JWK (RFC 7517) JSON object; make one with "
     "`failover-agent control keygen`"),
    (POOL + '[control]\nsigning_key_file = "key.bin"\noverride_file = "override.toml"\n',
     "control.override_file", "{override}: not valid TOML: Invalid statement (at line 1, column 1)"),
    (POOL + '[control]\nsigning_key_file = "key.bin"\noutput_file = "a-file/out/control.jws"\n',
     "control.output_file", "{a_file}/out/control.jws: cannot create it: {a_file} is not a folder"),
    (POOL + '[status]\nhistory_path = "history.sqlite"\n', "status.history_path",
     "status history file {history}: cannot open it: the file is not a SQLite database (or is corrupt)"),
]


@pytest.mark.parametrize(("text", "key", "message"), BROKEN_FILES,
                         ids=["ca-file", "key-not-jwk", "override", "output-folder", "history"])
def test_check_config_loads_every_file_the_config_names(tmp_path: Path, text: str, key: str,
                                                        message: str) -> None:
    """A key file that is not a JWK, a broken override file, CA bundle or history file, and an
    output file whose folder cannot be made: check-config names each, exits 2, and creates or
    changes no file."""
    from click.testing import CliRunner
    from failover_agent.cli import main

    files = _files(tmp_path)
    config = _write(tmp_path, text)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    run = CliRunner().invoke(main, ["check-config", str(config)])
    expected = message.format(**{name: str(path) for name, path in files.items()})
    assert (run.exit_code, run.output.splitlines()) == (2, [f"{config}: 1 error(s)", f"{key}: {expected}"])
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_run_with_a_key_file_that_is_not_a_jwk_prints_the_error_and_exits_2(tmp_path: Path) -> None:
    """`run` reports the key file as check-config does, on stderr, with exit status 2 and no traceback."""
    from click.testing import CliRunner
    from failover_agent.cli import main

    files = _files(tmp_path)
    text, key, message = BROKEN_FILES[1]
    config = _write(tmp_path, text)
    run = CliRunner().invoke(main, ["run", str(config)])
    assert isinstance(run.exception, SystemExit) and run.exit_code == 2
    assert run.output.splitlines() == [f"{config}: 1 error(s)", f"  {key}: {message.format(**files)}"]


MAINTENANCE_CONFIG = POOL + '[control]\nsigning_key_file = "key.bin"\nmaintenance_file = "maintenance.jws"\n'


def _maintenance_file(tmp_path: Path, kind: str) -> bytes:
    """A maintenance file of ``kind``: good, signed by another key, a control document, or a bad payload."""
    from failover_agent.maintenance import Window
    from failover_agent.maintenance_file import TYP, sign_windows
    from joserfc import jws

    from pytest_failover.control import ControlDocument, load_key

    key = load_key(tmp_path / "key.bin")
    window = Window(pool="api", domains=frozenset({"https://api.example.com"}), start=0, end=2e9, source="m-1")
    if kind == "good":
        return sign_windows([window], 1, key)
    if kind == "other-key":
        return sign_windows([window], 1, generate_key("HS256"))
    if kind == "control-document":
        return ControlDocument.sign(version=1, pools={}, expires_in=60, key=key)
    assert kind == "bad-payload"
    body = b'{"version": "1", "windows": []}'
    return jws.serialize_compact({"alg": key.alg, "typ": TYP}, body, key.jose_key(private=True),
                                 registry=key.jws_registry()).encode()


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("other-key", "not signed with "),
        ("control-document", "typ is 'failover-control+jwt', not 'failover-maintenance+jwt': not a maintenance file"),
        ("bad-payload", "malformed payload: version must be an integer and windows a list"),
    ],
)
def test_check_config_verifies_the_maintenance_file(tmp_path: Path, kind: str, why: str) -> None:
    """A maintenance file that does not verify with the signing key, is another kind of JWS or
    does not parse is an error at control.maintenance_file; check-config changes no file."""
    from click.testing import CliRunner
    from failover_agent.cli import main

    config = _write(tmp_path, MAINTENANCE_CONFIG)
    path = tmp_path / "maintenance.jws"
    path.write_bytes(_maintenance_file(tmp_path, kind))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    run = CliRunner().invoke(main, ["check-config", str(config)])
    assert run.exit_code == 2 and run.output.splitlines()[0] == f"{config}: 1 error(s)", run.output
    (line,) = run.output.splitlines()[1:]
    prefix, suffix = f"control.maintenance_file: {path}: {why}", "; move it aside to start with no run-time windows"
    assert line.startswith(prefix) and line.endswith(suffix), line
    if kind != "other-key":  # the other key's message quotes joserfc's; the rest is word for word
        assert line == prefix + suffix
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_a_good_maintenance_file_passes_and_run_refuses_a_bad_one(tmp_path: Path) -> None:
    """check-config takes a file the key signed; `run` with a control document there exits 2
    with the error on stderr, no traceback."""
    from click.testing import CliRunner
    from failover_agent.cli import main

    config = _write(tmp_path, MAINTENANCE_CONFIG)
    path = tmp_path / "maintenance.jws"
    path.write_bytes(_maintenance_file(tmp_path, "good"))
    ok = CliRunner().invoke(main, ["check-config", str(config)])
    assert ok.exit_code == 0, ok.output
    path.write_bytes(_maintenance_file(tmp_path, "control-document"))
    run = CliRunner().invoke(main, ["run", str(config)])
    assert isinstance(run.exception, SystemExit) and run.exit_code == 2
    assert run.stdout == "" and "Traceback" not in run.output
    assert run.stderr.splitlines() == [
        f"{config}: 1 error(s)",
        f"  control.maintenance_file: {path}: typ is 'failover-control+jwt', not 'failover-maintenance+jwt': "
        "not a maintenance file; move it aside to start with no run-time windows"]


def test_files_the_agent_creates_may_be_absent(tmp_path: Path) -> None:
    """An override file, an output file and a history file that do not exist yet are fine, and
    check-config creates none of them (nor their folders)."""
    config = _write(tmp_path, POOL + '[control]\nsigning_key_file = "key.bin"\noverride_file = "o.toml"\n'
                    'output_file = "out/control.jws"\n[status]\nhistory_path = "state/history.sqlite"\n')
    assert load_config(config).control is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.toml", "key.bin"]


SLO_POOLS = '[[pools]]\nname = "api"\ndomains = ["https://api.example.com", "https://api2.example.com"]\n'


def test_slos_of_a_pool_and_of_a_domain_load_with_their_defaults(tmp_path: Path) -> None:
    """A pool's SLO measures availability, a domain's its probes; names and window default."""
    config = load_config(_write(tmp_path, SLO_POOLS + (
        '[[slo]]\npool = "api"\nobjective = 99.9\n'
        '[[slo]]\npool = "api"\ndomain = "https://api2.example.com"\nobjective = 99\nwindow = "4w"\n'
        '[[slo]]\nname = "api-probe"\npool = "api"\nindicator = "probe"\ndomain = "https://api.example.com"\n'
        'objective = 99.95\n')))
    assert [(s.label, s.kind, s.objective, s.window) for s in config.slo] == [
        ("api", "availability", 99.9, "30d"),
        ("api/api2.example.com:443", "probe", 99.0, "4w"),
        ("api-probe", "probe", 99.95, "30d"),
    ]


@pytest.mark.parametrize(
    ("text", "path", "message"),
    [
        ('[[slo]]\npool = "api"\nobjectiv = 99.9\nobjective = 99.9\n', "slo[0].objectiv",
         "unknown key: did you mean 'objective'?"),
        ('[[slo]]\npool = "api"\nobjective = 100\n', "slo[0].objective",
         "100 is not a percentage strictly between 0 and 100, such as 99.9"),
        ('[[slo]]\npool = "api"\nobjective = 0\n', "slo[0].objective",
         "0 is not a percentage strictly between 0 and 100, such as 99.9"),
        ('[[slo]]\npool = "api"\nobjective = "99.9"\n', "slo[0].objective", "Input should be a valid number"),
        ('[[slo]]\npool = "api"\nobjective = 90\n', "slo[0]",
         "objective 90 leaves an error budget of 10 %: the 14.4x burn that pages would be an error ratio "
         "of 144 %, which cannot happen; use an objective above 93.06"),
        ('[[slo]]\npool = "api"\nobjective = 99.9\nwindow = "30 days"\n', "slo[0].window",
         "slo.window takes one whole number of h (hours), d (days) or w (weeks), such as '30d', '28d' or '4w': "
         "not '30 days'"),
        ('[[slo]]\npool = "api"\nobjective = 99.9\nwindow = "72h"\n', "slo[0].window",
         "'72h' is not longer than 3d, the long window of the slowest burn-rate alert (1x over 3d); "
         "use e.g. '30d' or '28d'"),
        ('[[slo]]\npool = "apl"\nobjective = 99.9\n', "", "slo[0].pool: no pool named 'apl': did you mean 'api'?"),
        ('[[slo]]\npool = "web"\nobjective = 99.9\n', "", "slo[0].pool: no pool named 'web': the pools are 'api'"),
        ('[[slo]]\npool = "api"\ndomain = "https://api3.example.com"\nobjective = 99.9\n', "",
         "slo[0].domain: 'https://api3.example.com' is not a domain of pool 'api' "
         "(https://api.example.com, https://api2.example.com)"),
        ('[[slo]]\npool = "api"\nindicator = "probe"\nobjective = 99.9\n', "slo[0]",
         "indicator 'probe' is a domain's probe success: set domain (one of the pool's)"),
        ('[[slo]]\npool = "api"\nindicator = "availability"\ndomain = "https://api.example.com"\nobjective = 99.9\n',
         "slo[0]", "indicator 'availability' is the whole pool's: remove domain, or use indicator 'probe' "
         "for the domain's probes"),
        ('[[slo]]\npool = "api"\nindicator = "latency"\nobjective = 99.9\n', "slo[0].indicator",
         "Input should be 'availability' or 'probe'"),
        ('[[slo]]\npool = "api"\nobjective = 99.9\n[[slo]]\npool = "api"\nobjective = 99\n', "",
         "slo names must be unique: api (set name on all but one)"),
        ('[[slo]]\nname = "api slo"\npool = "api"\nobjective = 99.9\n', "slo[0].name",
         "'api slo': use letters, digits and _ . : / - (it becomes the 'slo' label)"),
    ],
    ids=["misspelt-key", "objective-100", "objective-0", "objective-string", "objective-too-low",
         "window-format", "window-short", "pool-misspelt", "pool-unknown", "domain-not-in-pool",
         "probe-without-domain", "availability-with-domain", "indicator-unknown", "names-twice", "name-chars"],
)
def test_slo_errors_say_what_is_wrong(tmp_path: Path, text: str, path: str, message: str) -> None:
    """Each mistake in an [[slo]] table is one error, at its path, saying what would be right."""
    assert _errors(tmp_path, SLO_POOLS + text) == {path: message}
