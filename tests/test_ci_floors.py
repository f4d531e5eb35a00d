"""CI's run at the dependency floors (``.ci/floors.py``) pins what ``pyproject.toml`` declares."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _floors() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ci_floors", ROOT / ".ci" / "floors.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_floor_of_the_extras_is_pinned_and_the_sdk_pins_the_api() -> None:
    """Every ``>=`` of the library's extras is pinned at its floor (one with a ceiling too),
    the SDK's among them, and the test tools keep their specs from the dev extra."""
    floors = _floors()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = floors.constraints(project)
    assert {"httpx==0.27", "httpx2==2.12", "urllib3==2.0.2", "aiohttp==3.14", "apscheduler==3.11"} <= set(pins)
    assert "opentelemetry-sdk==1.45.2" in pins
    assert len(floors.tools(project)) == len(floors.TOOLS)


def test_two_floors_for_one_name_stop_the_run() -> None:
    floors = _floors()
    extras: dict[str, list[str]] = {extra: [] for extra in floors.EXTRAS}
    extras["httpx"], extras["aiohttp"] = ["httpx>=0.27"], ["httpx>=0.28"]
    project = {"optional-dependencies": extras}
    with pytest.raises(SystemExit, match=r"two floors for httpx: 0\.27 and 0\.28"):
        floors.constraints(project)


def test_a_tool_the_dev_extra_no_longer_lists_stops_the_run() -> None:
    floors = _floors()
    with pytest.raises(SystemExit, match="no longer lists"):
        floors.tools({"optional-dependencies": {"dev": ["pytest>=8"]}})


def test_the_otel_floor_run_pins_the_package_s_own_floors_and_the_api_s_release() -> None:
    """The second run: the API and semantic conventions at the package's floors, the SDK and
    the OTLP exporter of that API's release, the simulator's other dependencies as specified."""
    floors = _floors()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = floors.otel_floor(project)
    assert {"opentelemetry-api==1.33", "opentelemetry-semantic-conventions==0.54b0", "opentelemetry-sdk==1.33",
            "opentelemetry-exporter-otlp-proto-http==1.33", "trustme>=1.2", "h11>=0.16"} == set(pins)
    assert not set(floors.OTEL_EXTRAS) & {"agent", "simulator"}  # (their SDK floors are 1.45)
    assert all((ROOT / test).exists() for test in floors.OTEL_TESTS)


def test_a_package_dependency_with_no_floor_stops_the_otel_run() -> None:
    floors = _floors()
    project = {"dependencies": ["opentelemetry-api"], "optional-dependencies": {"simulator": []}}
    with pytest.raises(SystemExit, match="has no floor"):
        floors.otel_floor(project)


@pytest.mark.parametrize("argv", [["--bulid"], ["--build", "--build"], ["tests"]])
def test_an_unknown_argument_stops_the_run_before_anything_is_built(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``.ci/run`` passes ``--build`` or nothing; anything else is a usage error, and no venv
    is touched."""
    floors = _floors()
    built: list[Path] = []
    monkeypatch.setattr(floors, "build", lambda venv, *args: built.append(venv))
    with pytest.raises(SystemExit, match=r"usage: floors\.py \[--build\]"):
        floors.main(argv)
    assert built == []


def test_build_alone_builds_both_venvs_and_runs_no_test(monkeypatch: pytest.MonkeyPatch) -> None:
    floors = _floors()
    built: list[Path] = []
    ran: list[Path] = []
    monkeypatch.setattr(floors, "build", lambda venv, *args: built.append(venv))

    def run(venv: Path, tests: tuple[str, ...]) -> int:
        ran.append(venv)
        return 0

    monkeypatch.setattr(floors, "run", run)
    assert floors.main(["--build"]) == 0
    assert built == [floors.VENV, floors.OTEL_VENV] and ran == []
    assert floors.main([]) == 0
    assert ran == [floors.VENV, floors.OTEL_VENV]


def test_both_runs_go_on_when_the_first_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure at the extras' floors still lets the OpenTelemetry floor run, and fails the whole."""
    floors = _floors()
    ran: list[Path] = []
    monkeypatch.setattr(floors, "build", lambda venv, *args: None)

    def run(venv: Path, tests: tuple[str, ...]) -> int:
        ran.append(venv)
        return 1 if venv == floors.VENV else 0

    monkeypatch.setattr(floors, "run", run)
    assert floors.main([]) == 1
    assert ran == [floors.VENV, floors.OTEL_VENV]
