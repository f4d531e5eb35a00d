"""The README's promises, checked by a new user who has read only the README and the
pages it links to (never the package's code).

Run with ``.venv/bin/python -m pytest -q -n 0 tests/readme_user`` after the README's
set-up (``make demo``, then ``pip install -e '.[dev]'`` for pytest).

Every target is on loopback: the README's fake domains (the simulator), or small HTTP
servers this module starts on 127.0.0.1. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import http.server
import importlib.metadata
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis
import requests

from pytest_failover import AsyncFailoverTransport, FailoverTransport, Policy, Pool, faults
from pytest_failover.integrations.requests import FailoverAdapter
from pytest_failover.plugin import FakeDomainsFixture
from pytest_failover.shared import RedisHealth
from pytest_failover.simulator import FakeDomains
from pytest_failover.telemetry_capture import FailoverTelemetry

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
VENV_BIN = REPO / ".venv" / "bin"
# The commands live next to the interpreter running this suite (.venv/bin, says the README).
BIN = Path(sys.executable).parent
AGENT = str(BIN / "failover-agent")
PRIMARY, BACKUP = "https://api.example.com", "https://api2.example.com"

PROCESS_TIMEOUT = 60.0  # no command of this suite may take longer than this


# --------------------------------------------------------------------------- helpers


def fenced_blocks(markdown: str, language: str) -> list[tuple[str, str]]:
    """Each ```language block of the page with the heading it sits under."""
    blocks: list[tuple[str, str]] = []
    heading = ""
    lines = markdown.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#") and not line.startswith("#!"):
            heading = line.strip("# \n")
        if line.rstrip("\n") == f"```{language}":
            body: list[str] = []
            i += 1
            while i < len(lines) and lines[i].rstrip("\n") != "```":
                body.append(lines[i])
                i += 1
            blocks.append((heading, "".join(body)))
        i += 1
    return blocks


def file_block(markdown: str, name: str) -> str:
    """The block the page marks with ``<!-- file: NAME -->``."""
    match = re.search(rf"<!-- file: {re.escape(name)} -->\n```\w*\n(.*?)```", markdown, re.S)
    assert match, f"no block marked 'file: {name}'"
    return match.group(1)


def user_env() -> dict[str, str]:
    """The environment of a fresh shell that has run ``source .venv/bin/activate``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "COV_", "OTEL_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(BIN.parent)
    return env


def run(
    args: list[str], cwd: Path, *, stdin: str | bytes | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command as a user types it; output is text, stderr kept apart."""
    data = stdin.decode() if isinstance(stdin, bytes) else stdin
    return subprocess.run(
        args,
        cwd=cwd,
        env=user_env(),
        input=data,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


class Background:
    """A long-running command (the demo, the agent): output to a file, stopped at the end."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.log = cwd / "output.log"
        self._out = self.log.open("wb")
        self.proc = subprocess.Popen(
            args, cwd=cwd, env=user_env(), stdout=self._out, stderr=subprocess.STDOUT
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def base_url(self, timeout: float = 30.0) -> str:
        found: list[str] = []

        def listening() -> bool:
            assert self.proc.poll() is None, f"exited early:\n{self.output()}"
            match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", self.output())
            if match:
                found.append(match.group(1))
            return bool(found)

        wait_for(listening, timeout, "the 'listening on' line")
        return found[0]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self._out.close()


class HealthHandler(http.server.BaseHTTPRequestHandler):
    """A loopback origin for the agent to probe: 200 {"status": "ok"} everywhere."""

    def do_GET(self) -> None:
        body = b'{"status": "ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def loopback_origins() -> Iterator[list[str]]:
    """Two healthy HTTP origins on 127.0.0.1, for `failover-agent run`."""
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), HealthHandler) for _ in range(2)]
    threads = [
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        for s in servers
    ]
    for thread in threads:
        thread.start()
    try:
        yield [f"http://127.0.0.1:{s.server_address[1]}" for s in servers]
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


# --------------------------------------------------------------------- set-up


def test_setup_commands_are_in_venv_bin_and_activate_puts_them_on_the_path(tmp_path: Path) -> None:
    """'The commands are installed in `.venv/bin`' and `source .venv/bin/activate` puts them on the PATH."""
    assert (VENV_BIN / "failover-agent").is_file(), (
        "run `make demo` first, as the README's set-up says"
    )
    script = "source .venv/bin/activate && command -v failover-agent && failover-agent --version"
    env = {"HOME": str(tmp_path), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == str(VENV_BIN / "failover-agent")
    assert result.stdout.splitlines()[1].startswith("failover-agent ")


def test_version_option_and_python_dash_m(tmp_path: Path) -> None:
    """`failover-agent --version` (and `-V`) print the package version; `python -m failover_agent` is the same."""
    version = importlib.metadata.version("pytest-failover")
    for args in (
        [AGENT, "--version"],
        [AGENT, "-V"],
        [sys.executable, "-m", "failover_agent", "--version"],
    ):
        result = run(args, tmp_path)
        assert result.returncode == 0, result.stderr
        assert version in result.stdout


# ------------------------------------------------------------------ install


INSTALL_EXTRAS = {  # README, Install: each extra and what it says it brings
    "httpx": {"httpx"},
    "simulator": {"trustme"},
    "control": {"joserfc", "cryptography"},
    "requests": {"requests"},
    "aiohttp": {"aiohttp"},
    "httpx2": {"httpx2"},
    "redis": {"redis"},
    "resolve": {"dnspython"},
    "agent": set(),
    "dev": set(),
}


def _requirements(extra: str | None) -> set[str]:
    """The distribution names the installed pytest-failover requires for an extra (None: always)."""
    names: set[str] = set()
    for requirement in importlib.metadata.requires("pytest-failover") or []:
        marker = requirement.partition(";")[2]
        in_extra = re.search(r"extra\s*==\s*['\"]([\w-]+)['\"]", marker)
        if (in_extra.group(1) if in_extra else None) == extra:
            name = re.match(r"[A-Za-z0-9._-]+", requirement)
            assert name
            names.add(name.group(0).lower().replace("_", "-"))
    return names


def test_every_extra_of_the_install_lines_exists() -> None:
    lines = re.findall(r"pip install (?:-e )?'?(?:\.|pytest-failover)\[([\w,]+)\]'?", README)
    named = {extra for line in lines for extra in line.split(",")}
    assert named == set(INSTALL_EXTRAS), named
    provided = set(importlib.metadata.metadata("pytest-failover").get_all("Provides-Extra") or [])
    assert named <= provided
    for extra, brings in INSTALL_EXTRAS.items():
        assert brings <= _requirements(extra), extra


def test_the_library_needs_only_opentelemetry_api() -> None:
    """'The library needs only `opentelemetry-api` (plus its semantic-convention constants);
    every HTTP library is an extra.'"""
    assert _requirements(None) == {
        "opentelemetry-api",
        "opentelemetry-semantic-conventions",
    }


def test_python_3_11_or_newer_is_enough() -> None:
    """Set-up: 'with only `python3` (3.11 or newer) and `make`'."""
    requires = importlib.metadata.metadata("pytest-failover")["Requires-Python"]
    assert requires.replace(" ", "") == ">=3.11"


def test_the_names_the_readme_uses_can_be_imported() -> None:
    """`Policy(hedging=Hedging())`, `Policy(slow_calls=SlowCalls(threshold=0.5))`, `RedisHealth`, `FailoverMiddleware`."""
    import pytest_failover

    for name in ("Policy", "Hedging", "SlowCalls", "TimeOrder", "AsyncFailoverTransport"):
        assert hasattr(pytest_failover, name), name
    pytest_failover.Policy(hedging=pytest_failover.Hedging())
    pytest_failover.Policy(slow_calls=pytest_failover.SlowCalls(threshold=0.5))
    from pytest_failover.integrations.aiohttp import FailoverMiddleware  # the linked page's import
    from pytest_failover.shared import RedisHealth  # the linked page's import

    assert callable(FailoverMiddleware) and callable(RedisHealth)


def test_the_agent_extra_has_the_simulator_and_control() -> None:
    """'+ the agent (with [simulator] and [control])'."""
    assert _requirements("simulator") | _requirements("control") <= _requirements("agent")


def test_the_plugin_is_registered_without_configuration() -> None:
    """'With the package installed, the pytest plugin is active' (plugin page: the `pytest11` entry point)."""
    plugins = [
        ep
        for ep in importlib.metadata.entry_points(group="pytest11")
        if ep.dist and ep.dist.name == "pytest-failover"
    ]
    assert [ep.value for ep in plugins] == ["pytest_failover.plugin"]


# ------------------------------------------------------------------ the README's links


def _slug(heading: str) -> str:
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def test_every_link_of_the_readme_leads_somewhere() -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    local = [link for link in links if not link.startswith(("http://", "https://"))]
    assert local, "the README links no page"
    for link in local:
        path, _, anchor = link.partition("#")
        target = REPO / path if path else REPO / "README.md"
        assert target.exists(), link
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(encoding="utf-8"), re.M)
            assert anchor in {_slug(h) for h in headings}, link


# ------------------------------------------------------------- tour, step 2: the transport


def test_tour_transport_example_fails_over_to_the_backup() -> None:
    """Tour step 2, as printed, as a test."""
    pool = Pool("api", [PRIMARY, BACKUP])
    with FakeDomains() as fake:
        fake.add("api.example.com")
        fake.add("api2.example.com")
        fake.fail("api.example.com", faults.dns_nxdomain())

        with httpx.Client(transport=FailoverTransport([pool])) as client:
            response = client.get("https://api.example.com/v1/rooms")

        assert response.json()["domain"] == "api2.example.com"
        result = response.extensions["failover"]
        assert [(a.domain, a.error_type) for a in result.attempts] == [
            (PRIMARY, "dns_error"),
            (BACKUP, None),
        ]


def test_async_transport_is_the_async_client_twin() -> None:
    """'`AsyncFailoverTransport` is the `httpx.AsyncClient` twin.'"""

    async def main() -> httpx.Response:
        pool = Pool("api", [PRIMARY, BACKUP])
        async with httpx.AsyncClient(transport=AsyncFailoverTransport([pool])) as client:
            return await client.get("https://api.example.com/v1/rooms")

    with FakeDomains() as fake:
        fake.add("api.example.com")
        fake.add("api2.example.com")
        fake.fail("api.example.com", faults.dns_nxdomain())
        response = asyncio.run(main())
    assert response.json()["domain"] == "api2.example.com"
    assert [a.error_type for a in response.extensions["failover"].attempts] == ["dns_error", None]


def test_requests_adapter_example_fails_over_on_an_expired_certificate() -> None:
    """'requests and aiohttp': `session.mount("https://", FailoverAdapter([pool]))`, the result is `response.failover`."""
    with FakeDomains() as fd, requests.Session() as session:
        fd.add("api.example.com")
        fd.add("api2.example.com")
        fd.fail("api.example.com", faults.tls_expired())
        session.mount("https://", FailoverAdapter([Pool("api", [PRIMARY, BACKUP])]))
        response = session.get("https://api.example.com/v1/rooms")
    assert response.failover.domain == BACKUP  # type: ignore[attr-defined]  # the README's attribute
    assert response.json()["domain"] == "api2.example.com"


@pytest.fixture
def loopback_redis(tmp_path: Path) -> Iterator[str]:
    """A throw-away redis-server on 127.0.0.1 (no persistence), for `shared=RedisHealth(...)`."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen(
        args, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url, socket_timeout=1.0)

        def answers() -> bool:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        wait_for(answers, 10.0, "redis-server to answer PING")
        client.close()
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_a_breaker_opened_by_one_worker_opens_in_all(loopback_redis: str) -> None:
    """'the workers share domain health: a breaker opened by one opens in all' (extra `redis`)."""
    pools = [Pool("api", [PRIMARY, BACKUP])]
    policy = Policy(breaker_threshold=1)
    with FakeDomains() as fake:
        fake.add("api.example.com")
        fake.add("api2.example.com")
        fake.fail("api.example.com", "refused")
        # built inside the block, so their TLS contexts trust the fake domains
        worker1 = FailoverTransport(pools, policy, shared=RedisHealth(loopback_redis))
        worker2 = FailoverTransport(pools, policy, shared=RedisHealth(loopback_redis))
        alone = FailoverTransport(pools, policy)  # no shared=: hears nothing
        try:

            def connected(transport: FailoverTransport) -> bool:
                shared = transport.state().shared
                return shared is not None and shared.state == "connected"

            wait_for(
                lambda: connected(worker1) and connected(worker2), 10.0, "both workers on Redis"
            )
            with httpx.Client(transport=worker1) as client:
                first = client.get("https://api.example.com/v1/rooms")
            assert [a.domain for a in first.extensions["failover"].attempts] == [PRIMARY, BACKUP]
            assert worker1.state().pools["api"].domain(PRIMARY).breaker == "open"

            wait_for(
                lambda: worker2.state().pools["api"].domain(PRIMARY).breaker == "open",
                10.0,
                "worker 2 to hear of the open breaker",
            )
            with httpx.Client(transport=worker2) as client:
                second = client.get("https://api.example.com/v1/rooms")
            assert [a.domain for a in second.extensions["failover"].attempts] == [BACKUP]
            assert alone.state().pools["api"].domain(PRIMARY).breaker == "closed"
        finally:
            for transport in (worker1, worker2, alone):
                transport.close()


# ---------------------------------------------------------- tour, step 3: the pytest plugin


@pytest.mark.outage("api.example.com", "refused")
def test_rooms_survive_a_dead_primary(
    fake_domains: FakeDomainsFixture, failover_telemetry: FailoverTelemetry
) -> None:
    """Tour step 3, as printed, in this very suite (the plugin is active without configuration)."""
    fake_domains.add("api2.example.com")
    pool = Pool("api", [PRIMARY, BACKUP])
    with httpx.Client(transport=FailoverTransport([pool])) as client:
        assert client.get("https://api.example.com/v1/rooms").status_code == 200
    assert len(fake_domains.requests("api2.example.com")) == 1
    assert [a.error_type for a in failover_telemetry.attempts()] == ["connection_refused", None]


DOWNSTREAM_MARKER_MISTAKES = """
import pytest


@pytest.mark.outage("api.example.com", "dns_nxdomian")
def test_misspelt_fault():
    pass  # a setup error: the body never runs


@pytest.mark.outage("https://api.example.com", "refused")
def test_url_instead_of_hostname():
    pass  # a setup error: the body never runs


@pytest.mark.outage("api.exmaple.com", "refused")
def test_outage_never_exercised():
    pass
"""


def test_marker_mistakes_are_explained_in_a_downstream_suite(tmp_path: Path) -> None:
    """Plugin page: a wrong marker is a setup error naming the fix; an unexercised outage errors at teardown."""
    (tmp_path / "test_mistakes.py").write_text(DOWNSTREAM_MARKER_MISTAKES)
    result = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rE"], tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "unknown fault 'dns_nxdomian'. Did you mean 'dns_nxdomain'?" in out
    assert "give the hostname, not a URL" in out
    assert re.search(r"ERROR .*test_outage_never_exercised", out), out
    assert "api.exmaple.com" in out
    assert re.search(r"\b3 errors?\b", out), out


def test_every_fault_the_error_message_offers_is_documented() -> None:
    """Simulator page: `faults.by_name("<name>", ...)`; a misspelt name is `faults.UnknownFaultError` (with a suggestion)."""
    with pytest.raises(faults.UnknownFaultError) as caught:
        faults.by_name("dns_nxdomian")
    message = str(caught.value)
    assert "Did you mean 'dns_nxdomain'?" in message
    known = re.search(r"Known faults: ([\w, ]+)", message)
    assert known, message
    simulator_md = (REPO / "docs" / "simulator.md").read_text(encoding="utf-8")
    table = simulator_md[simulator_md.index("## Faults") : simulator_md.index("## Keep-alive")]
    documented = set(re.findall(r"^\| `(\w+)\(", table, re.M))
    assert {n.strip() for n in known.group(1).split(",")} <= documented


def test_docs_block_first_plugin_test_passes_in_a_downstream_suite(tmp_path: Path) -> None:
    """Tour step 3's block, copied as printed into a fresh project, passes with plain `pytest`."""
    [(_, block)] = [
        (h, b) for h, b in fenced_blocks(README, "python") if "@pytest.mark.outage" in b
    ]
    (tmp_path / "test_rooms.py").write_text(block)
    result = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


# ------------------------------------------------- every Python block of the README, as printed


SCRIPT_BLOCKS = [(h, b) for h, b in fenced_blocks(README, "python") if "@pytest.mark" not in b]


@pytest.mark.parametrize(
    ("heading", "block"), SCRIPT_BLOCKS, ids=[_slug(h) for h, _ in SCRIPT_BLOCKS]
)
def test_readme_python_block_runs_as_printed_in_a_clean_process(
    heading: str, block: str, tmp_path: Path
) -> None:
    """Each example is self-contained: copied into a file and run with `python`, it passes its asserts."""
    script = tmp_path / "example.py"
    script.write_text(block)
    result = run([sys.executable, str(script)], tmp_path)
    assert result.returncode == 0, f"{heading}:\n{result.stderr}"


def test_the_readme_shows_every_feature_it_names_with_a_block() -> None:
    """Guard for the test above: the README's examples are all still there."""
    headings = {h for h, _ in SCRIPT_BLOCKS}
    assert headings == {
        "A five-minute tour",
        "Traffic steering",
        "Slow domains",
        "Resumable uploads",
        "requests and aiohttp",
    }


# ----------------------------------------------------- tour, step 4: the agent's configuration


def test_check_config_accepts_the_readme_agent_toml_via_the_tour_shell_line(tmp_path: Path) -> None:
    """Tour step 4's first shell line, exactly as printed, in a fresh shell after `source .venv/bin/activate`."""
    (tmp_path / "agent.toml").write_text(file_block(README, "agent.toml"))
    [shell] = [b for h, b in fenced_blocks(README, "sh") if "check-config" in b]
    line = next(x for x in shell.splitlines() if x.startswith("failover-agent check-config"))
    command = line.partition("#")[0].strip()
    script = f"source {VENV_BIN}/activate && {command}"
    env = {"HOME": str(tmp_path), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout


def test_check_config_reports_every_error_with_its_path(tmp_path: Path) -> None:
    """'every error with its path, e.g. pools[0].domains[1]'; the agent page's 'did you mean' example, word for word."""
    config = file_block(README, "agent.toml")
    config = config.replace('"https://api2.example.com"]', '"ftp://api2.example.com"]')
    config = config.replace("interval = 15.0", "intervall = 15.0")
    (tmp_path / "agent.toml").write_text(config)
    result = run([AGENT, "check-config", "agent.toml"], tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert re.search(r"^pools\[0\]\.domains\[1\]: ", out, re.M), out
    assert "pools[0].probe.intervall: unknown key: did you mean 'interval'?" in out.splitlines()
    assert "unsupported scheme 'ftp'" in out

    (tmp_path / "empty.toml").write_text('[[pools]]\nname = "api"\ndomains = []\n')
    empty = run([AGENT, "check-config", "empty.toml"], tmp_path)
    assert empty.returncode == 2
    assert re.search(r"^pools\[0\]\.domains: ", empty.stdout + empty.stderr, re.M)
    assert "List should have" not in empty.stdout + empty.stderr  # not pydantic's raw wording


def test_check_config_loads_the_key_file_and_refuses_a_raw_secret(tmp_path: Path) -> None:
    """Agent page: check-config loads every file it names; a raw secret is refused, pointing to `control keygen`."""
    (tmp_path / "control.key").write_text("correct horse battery staple\n")
    config = file_block(README, "agent.toml") + '\n[control]\nsigning_key_file = "control.key"\n'
    (tmp_path / "agent.toml").write_text(config)
    result = run([AGENT, "check-config", "agent.toml"], tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "control.signing_key_file" in out and "failover-agent control keygen" in out

    (tmp_path / "control.key").unlink()  # keygen never overwrites a key (it asks for --force)
    assert run([AGENT, "control", "keygen", "--out", "control.key"], tmp_path).returncode == 0
    ok = run([AGENT, "check-config", "agent.toml"], tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_run_usage_errors_are_one_line_with_exit_2(tmp_path: Path) -> None:
    """Agent page: the `--listen 127.0.0.1:99999` error word for word; `run` without a FILE points to the demo."""
    (tmp_path / "agent.toml").write_text(file_block(README, "agent.toml"))
    bad_port = run([AGENT, "run", "--listen", "127.0.0.1:99999", "agent.toml"], tmp_path)
    assert bad_port.returncode == 2
    assert bad_port.stderr.strip() == (
        "Error: Invalid value for '--listen': '127.0.0.1:99999': port 99999 out of range (0 to 65535)"
        " (see 'failover-agent run --help')"
    )
    no_file = run([AGENT, "run"], tmp_path)
    assert no_file.returncode == 2
    assert len(no_file.stderr.strip().splitlines()) == 1 and "failover-agent demo" in no_file.stderr
    assert "Traceback" not in bad_port.stderr + no_file.stderr


def test_run_on_a_taken_address_says_cannot_start_naming_it(
    tmp_path: Path, loopback_origins: list[str]
) -> None:
    """Agent page: 'An address that parses but cannot be listened on ... is logged as `cannot start: ...` and exits 1'."""
    (tmp_path / "agent.toml").write_text(
        f'[[pools]]\nname = "api"\ndomains = ["{loopback_origins[0]}"]\n'
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        result = run([AGENT, "run", "agent.toml", "--listen", address, "--plain"], tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert re.search(rf"cannot start: .*{re.escape(address)}", out), out
    assert "Traceback" not in out


def test_run_serves_metrics_status_json_and_the_status_page(
    tmp_path: Path, loopback_origins: list[str]
) -> None:
    """Tour step 4's `failover-agent run --config agent.toml`: '/metrics, /status.json and a status page'.

    The README's own file probes the real api.example.com, so this runs its shape against two
    loopback origins, on a free port instead of :9464; SIGTERM stops it with exit 0.
    """
    domains = ", ".join(f'"{url}"' for url in loopback_origins)
    (tmp_path / "agent.toml").write_text(
        f'location = "laptop"\n\n[[pools]]\nname = "api"\ndomains = [{domains}]\n\n'
        '[pools.probe]\npath = "/health"\ninterval = 1.0\ntimeout = 1.0\n'
    )
    assert run([AGENT, "check-config", "agent.toml"], tmp_path).returncode == 0
    agent = Background(
        [AGENT, "run", "--config", "agent.toml", "--listen", "127.0.0.1:0", "--plain"], tmp_path
    )
    try:
        base = agent.base_url()
        with httpx.Client(base_url=base, timeout=5.0) as client:

            def every_domain_up() -> bool:
                doc = client.get("/status.json").json()
                checks = doc["pools"]["api"]["domains"]
                return all(
                    ((checks.get(url) or {}).get("last") or {}).get("success") is True
                    for url in loopback_origins
                )

            wait_for(every_domain_up, 20.0, "both loopback domains up in /status.json")
            status = client.get("/status.json").json()
            assert status["location"] == "laptop"
            for url in loopback_origins:  # 'uptime over 1 h, 24 h and 7 d': seconds of data only
                history = status["pools"]["api"]["domains"][url]["history"]
                assert set(history["uptime"]) == {"1h", "24h", "7d"}
                assert history["uptime"]["1h"] == 1.0
                assert history["uptime"]["24h"] is None and history["uptime"]["7d"] is None
                assert 0 <= history["covered"]["1h"] < 60
                assert 1 <= len(history["results"]) <= 90
            metrics = client.get("/metrics")
            assert metrics.status_code == 200 and 'probe_location="laptop"' in metrics.text
            page = client.get("/")
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    finally:
        code = agent.stop()
    assert code == 0, agent.output()


# ------------------------------------------------------------- tour, step 1: the demo


def test_demo_serves_status_page_metrics_and_a_signed_control_document(tmp_path: Path) -> None:
    """Tour step 1: the status page, `/metrics`, and `/control.json`, 'a signed JWS, not JSON: the demo prints how to read it'.

    The printed command is run as printed (in an activated shell); `--duration` stops the demo.
    """
    if shutil.which("curl") is None:
        pytest.skip("the demo's printed command uses curl")
    # 8 s: twice what the requests below took from the start on a loaded machine (4 s at most)
    demo = Background(
        [AGENT, "demo", "--listen", "127.0.0.1:0", "--duration", "8", "--plain"], tmp_path
    )
    try:
        base = demo.base_url()
        with httpx.Client(base_url=base, timeout=5.0) as client:
            page = client.get("/")
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            assert client.get("/healthz").status_code == 200

            wait_for(
                lambda: client.get("/control.json").status_code == 200,
                8.0,
                "the first control document",
            )
            control = client.get("/control.json")
            assert control.headers["content-type"] == "application/jose"
            with pytest.raises(json.JSONDecodeError):
                json.loads(control.text)
            assert re.fullmatch(r"[\w-]+\.[\w-]+\.[\w-]+", control.text.strip())

            assert "failover_" in client.get("/metrics").text

        match = re.search(
            r"to read it: (curl -s \S+/control\.json \| failover-agent control verify - --key \S+)",
            demo.output(),
        )
        assert match, demo.output()
        read = subprocess.run(
            ["bash", "-c", f"source {VENV_BIN}/activate && {match.group(1)}"],
            cwd=tmp_path, env=user_env(), capture_output=True, text=True, timeout=PROCESS_TIMEOUT,
        )  # fmt: skip
        assert read.returncode == 0, read.stderr
        payload = json.loads(read.stdout)
        assert "api" in payload["pools"] and isinstance(payload["version"], int)

        wait_for(lambda: demo.proc.poll() is not None, 20.0, "the demo to stop after --duration")
    finally:
        code = demo.stop()
    assert code == 0, demo.output()


# ------------------------------------------------ control documents (the linked Remote control page)


def test_keygen_sign_verify_round_trip(tmp_path: Path) -> None:
    """Remote control page: keygen writes control.key and control.pub.jwk; sign, then verify prints the payload."""
    keygen = run(
        [AGENT, "control", "keygen", "--alg", "EdDSA", "--kid", "2026-11", "--out", "control.key"],
        tmp_path,
    )
    assert keygen.returncode == 0, keygen.stderr
    public = json.loads((tmp_path / "control.pub.jwk").read_text())
    assert (public["kty"], public["crv"], public["kid"]) == ("OKP", "Ed25519", "2026-11")
    assert "d" not in public
    assert (tmp_path / "control.key").stat().st_mode & 0o777 == 0o600

    (tmp_path / "doc.json").write_text(
        json.dumps({"version": 8, "pools": {"api": {"disabled": [PRIMARY]}}})
    )
    sign = run(
        [
            AGENT,
            "control",
            "sign",
            "doc.json",
            "--key",
            "control.key",
            "--expires-in",
            "3600",
            "--out",
            "control.jws",
        ],
        tmp_path,
    )
    assert sign.returncode == 0, sign.stderr
    verify = run([AGENT, "control", "verify", "control.jws", "--key", "control.pub.jwk"], tmp_path)
    assert verify.returncode == 0, verify.stderr
    payload = json.loads(verify.stdout)
    assert payload["version"] == 8 and payload["pools"] == {"api": {"disabled": [PRIMARY]}}

    signed = (tmp_path / "control.jws").read_bytes()
    swapped = b"B" if signed[-10:-9] == b"A" else b"A"  # one signature character changed
    tampered = signed[:-10] + swapped + signed[-9:]
    refused = run(
        [AGENT, "control", "verify", "-", "--key", "control.pub.jwk"], tmp_path, stdin=tampered
    )
    assert refused.returncode == 1


def test_quorum_print_query_shows_the_promql_of_the_docs(tmp_path: Path) -> None:
    """README: '`--print-query` shows the PromQL'; the linked page prints it for the defaults, word for word."""
    control_md = (REPO / "docs" / "control.md").read_text(encoding="utf-8")
    publisher = next(
        b for _, b in fenced_blocks(control_md, "toml") if b.startswith("# publisher.toml")
    )
    (tmp_path / "publisher.toml").write_text(publisher)
    assert run([AGENT, "control", "keygen", "--out", "control.key"], tmp_path).returncode == 0
    [console] = [b for _, b in fenced_blocks(control_md, "console") if "--print-query" in b]
    command, _, expected = console.partition("\n")
    assert command == "$ failover-agent control quorum publisher.toml --print-query"
    result = run([AGENT, "control", "quorum", "publisher.toml", "--print-query"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected
