"""The library at its dependency floors: install each extra's oldest allowed version, then
run the tests that lean on those dependencies' APIs.

``pyproject.toml`` is the one home of every floor: each ``name>=X`` of the library's extras
becomes the pip constraint ``name==X``. The package's own dependencies, the OpenTelemetry
API and semantic conventions, are not pinned there: the SDK's floor (the agent's and the
simulator's, 1.45) pins them itself, above the API's own floor (1.33), which the library
alone needs, and one install cannot hold both. The test tools come from the ``dev`` extra,
each with its spec there, at their newest (the rest of ``dev`` needs newer httpx and httpx2
than the floors).

So a second run, in ``.venv-otel-floor``, holds the library's own floors: the OpenTelemetry
API and semantic conventions at theirs, under an application's SDK and OTLP exporter of the
API's release (an application that pinned its OpenTelemetry then), with the client's extras
at their newest, and runs the tests that read the client's spans and metrics
(:data:`OTEL_TESTS`). The simulator's other dependencies come with their specs; the agent,
whose Prometheus exporter needs the newer SDK, is left out.

Run by ``.ci/run``: ``python3 .ci/floors.py --build`` builds ``.venv-floors`` and
``.venv-otel-floor`` (kept between runs, rebuilt when ``pyproject.toml`` or this file
changes) while ``make`` installs ``.venv`` and type-checks; after ``make test``,
``python3 .ci/floors.py`` runs their tests with ``CI`` set, where a skipped test fails the
run. Sessions 30 and 31 found eight floors that did not
hold, by hand; this keeps them holding.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-floors"
EXTRAS = ("control", "httpx", "httpx2", "requests", "aiohttp", "resolve", "redis", "simulator", "agent")
TOOLS = ("pytest", "pytest-xdist", "pytest-asyncio", "hypothesis", "trio", "uvloop", "requests[socks]", "httpx-retries",
         "selenium")
TESTS = (
    "tests/client/test_transport.py",
    "tests/client/test_integrations.py",
    "tests/client/test_native_errors.py",
    "tests/client/test_front_end_conversion.py",
    "tests/client/test_requests_adapter.py",
    "tests/client/test_aiohttp_session.py",
    "tests/client/test_httpx2.py",
    "tests/client/test_malformed_answers.py",
    "tests/resolve",
    "tests/control",
    "tests/shared",
    "tests/agent",
)
OTEL_VENV = ROOT / ".venv-otel-floor"
OTEL_EXTRAS = ("control", "httpx", "httpx2", "requests", "aiohttp", "resolve", "redis")
OTEL_TESTS = (
    "tests/client/test_telemetry.py",
    "tests/client/test_breaker_gauge.py",
    "tests/client/test_steering_telemetry.py",
    "tests/client/test_lane.py",
    "tests/client/test_forget.py",
    "tests/client/test_sharing.py",
    "tests/resolve/test_metrics.py",
    "tests/plugin/test_telemetry_fixture.py",
)
_OTEL = "opentelemetry-"
_FLOOR = re.compile(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*>=\s*([^,;\s]+)(\s*,\s*<[^,;\s]+)?$")
_NAME = re.compile(r"^([A-Za-z0-9_.-]+(?:\[[^\]]*\])?)")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def constraints(project: dict[str, object]) -> list[str]:
    """``name==X`` for each ``name>=X`` of :data:`EXTRAS` (an extra of the package itself,
    such as ``pytest-failover[control]``, is left to pip)."""
    extras = project["optional-dependencies"]
    assert isinstance(extras, dict)
    pins: dict[str, str] = {}
    for extra in EXTRAS:
        for spec in extras[extra]:
            found = _FLOOR.match(spec.split(";")[0].strip())
            if found is None:
                continue
            name, floor = _canonical(found.group(1)), found.group(3)
            if pins.setdefault(name, floor) != floor:
                raise SystemExit(f"pyproject.toml: two floors for {name}: {pins[name]} and {floor}")
    return [f"{name}=={floor}" for name, floor in sorted(pins.items())]


def otel_floor(project: dict[str, object]) -> list[str]:
    """The pins and requirements of :data:`OTEL_VENV` besides the package: the package's own
    dependencies at their floors, the SDK and the OTLP exporter of the API's release, and the
    simulator's other dependencies with their specs."""
    dependencies = project["dependencies"]
    extras = project["optional-dependencies"]
    assert isinstance(dependencies, list) and isinstance(extras, dict)
    pins = {}
    for spec in dependencies:
        found = _FLOOR.match(spec.split("#")[0].strip())
        if found is None:
            raise SystemExit(f"pyproject.toml: the dependency {spec!r} has no floor")
        pins[_canonical(found.group(1))] = found.group(3)
    api = pins.get(f"{_OTEL}api")
    if api is None:
        raise SystemExit("pyproject.toml: the package no longer depends on opentelemetry-api: update .ci/floors.py")
    release = [f"{_OTEL}sdk=={api}", f"{_OTEL}exporter-otlp-proto-http=={api}"]
    others = [spec.split("#")[0].strip() for spec in extras["simulator"] if not spec.startswith(_OTEL)]
    return [f"{name}=={floor}" for name, floor in sorted(pins.items())] + release + others


def tools(project: dict[str, object]) -> list[str]:
    """:data:`TOOLS`, each with its spec from the ``dev`` extra."""
    extras = project["optional-dependencies"]
    assert isinstance(extras, dict)
    specs = {}
    for spec in extras["dev"]:
        found = _NAME.match(spec)
        if found is not None:
            specs[found.group(1)] = spec.split("#")[0].strip()
    missing = [tool for tool in TOOLS if tool not in specs]
    if missing:
        raise SystemExit(f"pyproject.toml: the dev extra no longer lists {missing}: update .ci/floors.py")
    return [specs[tool] for tool in TOOLS]


def build(venv: Path, pins: list[str], requirements: list[str], digest: str) -> None:
    """Build ``venv`` (unless its stamp says it holds ``digest``'s install) with ``pins`` as
    constraints and ``requirements`` installed."""
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if not (stamp.exists() and stamp.read_text() == digest):
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pinned = venv / "constraints.txt"
        pinned.write_text("\n".join(pins) + "\n")
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", str(pinned),
             *requirements],
            check=True,
        )  # fmt: skip
        stamp.write_text(digest)


def run(venv: Path, tests: tuple[str, ...]) -> int:
    """Run ``tests`` in the built ``venv``."""
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"], check=True,
                   stdout=(venv / "installed.txt").open("w"))  # fmt: skip
    env = {**os.environ, "CI": "true"}
    command = [str(python), "-m", "pytest", "-n", "2", "-q", "-m", "not alone", "-p", "no:cacheprovider", *tests]
    return subprocess.run(command, cwd=ROOT, env=env).returncode


def main(argv: list[str]) -> int:
    """Build both venvs, then run their tests; with ``--build``, only build them (``.ci/run``
    builds them beside the main install and its type check, before any test runs)."""
    if argv not in ([], ["--build"]):
        raise SystemExit(f"usage: {Path(__file__).name} [--build]")
    pyproject = (ROOT / "pyproject.toml").read_bytes()
    project = tomllib.loads(pyproject.decode())["project"]
    digest = hashlib.sha256(pyproject + Path(__file__).read_bytes()).hexdigest()
    tested = tools(project)
    build(VENV, constraints(project), ["-e", f"{ROOT}[{','.join(EXTRAS)}]", *tested], digest)
    pins = otel_floor(project)
    build(OTEL_VENV, pins, ["-e", f"{ROOT}[{','.join(OTEL_EXTRAS)}]", *pins, *tested], digest)
    if argv:
        return 0
    floors = run(VENV, TESTS)
    otel = run(OTEL_VENV, OTEL_TESTS)
    return floors or otel


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
