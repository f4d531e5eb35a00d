"""The README is a short front page: the two commands, the install lines, links that resolve,
and a tour whose shell lines work in a fresh shell exactly as printed."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from failover_agent.slo import ALERT_NAME

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_BYTES = 15_000

_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _anchors(page: Path) -> set[str]:
    """The heading anchors of a Markdown page, as GitHub and MkDocs both spell them."""
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    anchors = set()
    for title in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M):
        plain = re.sub(r"[^\w\- ]", "", title.replace("`", "").lower()).strip()
        anchors.add(re.sub(r"[ -]+", "-", plain))
    return anchors



def test_ci_runs_the_oldest_python_the_package_declares(in_ci: bool) -> None:
    """The floor of ``requires-python`` is the Python the README names and the one CI runs the
    suite on: a floor no run tests is a promise nobody keeps (3.10 was declared while the
    resolvers and the agent did not import there)."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    floor = re.fullmatch(r">=\s*3\.(\d+)", declared)
    assert floor is not None, f"requires-python: {declared!r} is not a plain floor"
    minor = int(floor.group(1))
    assert f"`python3` (3.{minor} or newer)" in README.read_text(encoding="utf-8")
    if in_ci:
        assert sys.version_info[:2] == (3, minor), (
            f"CI runs Python {sys.version.split()[0]}, the package declares {declared}: run CI on 3.{minor}, or "
            "raise the floor"
        )

def test_readme_is_a_front_page_of_at_most_15_kb() -> None:
    """The README stays small: the reference lives in docs/."""
    size = README.stat().st_size
    assert size <= MAX_BYTES, f"README.md is {size} bytes; move detail into docs/ (limit {MAX_BYTES})"


def test_readme_opens_with_the_two_commands_and_the_makefile_has_them() -> None:
    """`make demo` and `make test` come first, and are real Makefile targets."""
    head = README.read_text(encoding="utf-8")[:2500]
    assert "make demo" in head and "make test" in head
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "\ndemo:" in makefile and "\ntest:" in makefile


def test_readme_links_resolve() -> None:
    """Every relative link names an existing file, and every #anchor a heading of it."""
    text = _FENCE.sub("", README.read_text(encoding="utf-8"))
    targets = [m["target"] for m in _LINK.finditer(text)]
    assert any(t.startswith("docs/") for t in targets), "the README links into docs/"
    broken = []
    for target in targets:
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        page = ROOT / path if path else README
        if not page.exists():
            broken.append(f"{target}: no such file")
        elif anchor and anchor not in _anchors(page):
            broken.append(f"{target}: no heading #{anchor} in {path or 'README.md'}")
    assert not broken, "broken links in README.md:\n" + "\n".join(broken)


def test_readme_install_lines_name_every_extra() -> None:
    """Each optional extra of pyproject.toml (but dev) has its install line, and no other."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    documented = set(re.findall(r"pip install 'pytest-failover\[(\w+)\]'", README.read_text(encoding="utf-8")))
    assert documented == set(extras) - {"dev"}


def _section(text: str, title: str) -> str:
    """The body of the ``## title`` section: up to the next heading of level 2."""
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.M | re.S)


def test_install_covers_a_clone_and_says_where_releases_come_from() -> None:
    """From a clone, `pip install -e '.[extra]'` is given next to the release lines, and the
    README says where releases are published."""
    install = _section(README.read_text(encoding="utf-8"), "Install")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    editable = re.findall(r"^pip install -e '\.\[([\w,]+)\]'", "".join(_blocks(install, "sh")), re.M)
    assert {"simulator", "dev"} <= {e for line in editable for e in line.split(",")} <= set(extras)
    assert "PyPI" in install and "](CHANGELOG.md)" in install


def test_readme_states_what_users_get_not_internal_targets() -> None:
    """The figures say what a user gets; targets met or missed belong on the benchmark page."""
    text = README.read_text(encoding="utf-8")
    internal = re.findall(r"[^\n]*(?:\btarget [\d.]+x|not met|seed schedule|runs vary)[^\n]*", text)
    assert not internal, internal


# --- make demo and make test install what each needs ---------------------------------------


def _make_dry_run(venv: Path, target: str) -> list[str]:
    """The commands ``make TARGET`` would run with the virtual environment at ``venv``."""
    make = shutil.which("make")
    assert make is not None, "make is not on PATH: the README's two commands need it"
    result = subprocess.run([make, "-n", f"VENV={venv}", target], cwd=ROOT, capture_output=True,
                            text=True, timeout=30, check=True)
    return [line for line in result.stdout.splitlines() if " pip install " in line]


def test_make_demo_installs_the_agent_and_the_simulator_only(tmp_path: Path) -> None:
    """On a fresh clone `make demo` installs `.[agent,simulator]`, not the development toolchain."""
    assert _make_dry_run(tmp_path / "venv", "demo") == [
        f"{tmp_path}/venv/bin/python -m pip install --quiet --upgrade pip",
        f"{tmp_path}/venv/bin/python -m pip install --quiet -e '.[agent,simulator]'",
    ]


def test_make_test_after_make_demo_installs_the_development_extra(tmp_path: Path) -> None:
    """The demo's install does not satisfy the tests' stamp: `make test` after `make demo`
    installs `.[dev]`; once both are installed neither target installs anything."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch(mode=0o755)
    (venv / ".installed-demo").touch()
    assert _make_dry_run(venv, "demo") == []
    assert _make_dry_run(venv, "test") == [f"{venv}/bin/python -m pip install --quiet -e '.[dev]'"]
    (venv / ".installed").touch()
    assert _make_dry_run(venv, "test") == []


# --- the tour, in a fresh shell -------------------------------------------------------------

#: Loaded by the agent's Python through PYTHONPATH: the tour's hosts become loopback fake
#: domains and every other host is blocked, so the agent the tour starts reaches no network.
_SITE_FENCE = """\
import os

from pytest_failover.simulator import FakeDomains

_FAKE = FakeDomains(block_unknown_hosts=True).__enter__()
for _host in os.environ["TOUR_FAKE_HOSTS"].split():
    _FAKE.add(_host)
"""
TOUR_LISTEN = ("127.0.0.1", 9464)  # the agent's default listener, which the tour points at
TOUR_SECONDS = 60.0


def _tour() -> tuple[list[str], str]:
    """The shell lines of the set-up and the tour, as printed (but ``make``), and agent.toml."""
    text = README.read_text(encoding="utf-8")
    lines = [
        line
        for title in ("Set-up", "A five-minute tour")
        for block in _blocks(_section(text, title), "sh")
        for line in block.splitlines()
        # `make demo` runs until Ctrl-C and `make test` is this suite: both are run by CI
        if line.strip() and not line.startswith("make ")
    ]
    toml = re.search(r"<!-- file: agent.toml -->\n```toml\n(.*?)^```", text, re.M | re.S)
    assert toml is not None, "the tour's agent.toml"
    return lines, toml[1]


def test_tour_names_its_commands_and_writes_the_config() -> None:
    """The tour activates .venv before its first command, then checks agent.toml, writes its
    SLO's rules and runs it; agent.toml has an SLO and a maintenance window."""
    lines, toml = _tour()
    assert lines[0].split("#")[0].split() == ["source", ".venv/bin/activate"]
    assert [line.split("#")[0].split()[:2] for line in lines[1:]] == [
        ["failover-agent", "check-config"], ["failover-agent", "rules"], ["failover-agent", "run"]]
    config = tomllib.loads(toml)
    assert config["slo"] and config["maintenance"]


@pytest.fixture
def tour_shell(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """The tour's lines running in a new bash with a bare PATH, in a directory that holds
    ``.venv`` (this one) and the tour's agent.toml; stopped by its process group."""
    lines, toml = _tour()
    (tmp_path / "agent.toml").write_text(toml, encoding="utf-8")
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    site = tmp_path / "fence"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SITE_FENCE, encoding="utf-8")
    hosts = {httpx.URL(url).host for pool in tomllib.loads(toml)["pools"] for url in pool["domains"]}
    with socket.socket() as probe:  # the tour's agent listens on the default port
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(TOUR_LISTEN)
        except OSError as exc:
            pytest.fail(f"{TOUR_LISTEN}: {exc}: the tour's `failover-agent run` listens there; stop what does")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "PYTHONPATH": str(site), "TOUR_FAKE_HOSTS": " ".join(sorted(hosts))}
    shell = subprocess.Popen(
        ["bash", "--noprofile", "--norc", "-e", "-c", "\n".join(lines)], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        yield shell, tmp_path
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
        shell.wait(10)


def test_tour_runs_in_a_fresh_shell_as_printed(tour_shell: tuple[subprocess.Popen[str], Path]) -> None:
    """In a new shell, the set-up's and the tour's lines run as printed: the config checks out,
    the agent serves /healthz on the port the tour names, and Ctrl-C stops it cleanly."""
    shell, folder = tour_shell
    deadline = time.monotonic() + TOUR_SECONDS
    url = f"http://{TOUR_LISTEN[0]}:{TOUR_LISTEN[1]}/healthz"
    healthy = False
    while not healthy and shell.poll() is None and time.monotonic() < deadline:
        try:
            healthy = httpx.get(url, timeout=1.0).status_code == 200
        except httpx.TransportError:
            time.sleep(0.2)
    if healthy:
        os.killpg(shell.pid, signal.SIGINT)  # Ctrl-C in the terminal
    try:
        output, _ = shell.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(shell.pid, signal.SIGKILL)
        output, _ = shell.communicate(timeout=10)
    assert healthy, f"the agent never answered {url} (exit {shell.returncode}):\n{output}"
    assert "agent.toml: OK (1 pool(s), 2 domain(s), location 'laptop')" in output, output
    assert shell.returncode == 0, output
    rules = (folder / "slo.yml").read_text(encoding="utf-8")  # the rules line wrote them
    assert f"alert: {ALERT_NAME}" in rules and "failover:slo_configured" in rules
