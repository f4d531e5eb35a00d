"""The sticky-domain file driven directly: hostile files, atomic writes, crash leftovers."""

from __future__ import annotations

import json
import logging
import os
import random
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from pytest_failover._sticky import LEFTOVER_AGE, MAX_BYTES, StickyFile

T = TypeVar("T")
posix_only = pytest.mark.skipif(os.name != "posix", reason="FIFOs, symlinks and SIGKILL are POSIX")
VALID = {"version": 1, "pools": {"api": "https://api2.example.com"}}


def within(seconds: float, call: Callable[[], T]) -> T:
    """Run ``call`` in a daemon thread and fail the test if it has not returned in time."""
    result: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds} s"
    if errors:
        raise errors[0]
    return result[0]


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "pytest_failover" and r.levelno == logging.WARNING
    ]


def load_ignored(path: Path, caplog: pytest.LogCaptureFixture) -> str:
    """Load ``path`` (bounded in time), check it was ignored with one warning, return that warning."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pytest_failover"):
        assert within(5, StickyFile(path).load) == {}
    found = warnings_of(caplog)
    assert len(found) == 1, found
    assert found[0].startswith(f"ignoring sticky-domain file {path}: ")
    return found[0]


def leftovers(folder: Path, target: str = "sticky.json") -> list[Path]:
    return sorted(folder.glob(f".{target}.failover-*.tmp"))


def age(path: Path, seconds: float) -> None:
    """Make ``path`` look ``seconds`` old."""
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


# -- the ordinary path -------------------------------------------------------------


def test_a_saved_mapping_loads_back_and_merges(tmp_path: Path) -> None:
    """``save`` writes the documented format atomically; a new instance loads it; later saves merge."""
    path = tmp_path / "sticky.json"
    first = StickyFile(path)
    assert first.load() == {}
    first.save({"api": "https://api2.example.com"})
    first.save({"cdn": "https://cdn1.example.com"})
    assert json.loads(path.read_text()) == {
        "version": 1,
        "pools": {"api": "https://api2.example.com", "cdn": "https://cdn1.example.com"},
    }
    assert StickyFile(path).load() == {
        "api": "https://api2.example.com",
        "cdn": "https://cdn1.example.com",
    }
    assert list(tmp_path.iterdir()) == [path]


def test_a_missing_file_or_folder_is_silent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No file (or no folder) is the normal first start: ``{}`` and no warning."""
    with caplog.at_level(logging.WARNING, logger="pytest_failover"):
        assert StickyFile(tmp_path / "sticky.json").load() == {}
        assert StickyFile(tmp_path / "absent" / "sticky.json").load() == {}
    assert warnings_of(caplog) == []


def test_an_unchanged_mapping_is_not_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saving what is already on disk opens no file."""
    path = tmp_path / "sticky.json"
    path.write_text(json.dumps(VALID))
    sticky = StickyFile(path)
    assert sticky.load() == VALID["pools"]
    opened: list[str] = []
    real_open = os.open

    def recording_open(file: str, flags: int, mode: int = 0o777) -> int:
        opened.append(file)
        return real_open(file, flags, mode)

    monkeypatch.setattr(os, "open", recording_open)
    sticky.save({"api": "https://api2.example.com"})
    assert opened == []


def test_the_temporary_file_is_named_after_the_target_and_fsynced_before_replace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write goes to ``.<name>.failover-<random>.tmp`` beside the target, is fsynced, then replaced."""
    path = tmp_path / "sticky.json"
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(
            ("fsync", os.readlink(f"/proc/self/fd/{fd}") if sys.platform == "linux" else "?")
        )
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append(("replace", src))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    StickyFile(path).save({"api": "https://api2.example.com"})
    kinds = [kind for kind, _ in events]
    assert kinds.index("fsync") < kinds.index("replace")
    tmp = Path(next(p for kind, p in events if kind == "replace"))
    assert tmp.parent == tmp_path
    assert tmp.name.startswith(".sticky.json.failover-") and tmp.name.endswith(".tmp")
    if sys.platform == "linux":
        assert Path(events[0][1]) == tmp.resolve()
    assert json.loads(path.read_text())["pools"] == {"api": "https://api2.example.com"}


def test_a_failed_write_leaves_no_temporary_file_and_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """If the replace fails, the temporary file is removed, one warning is logged, and the next save tries again."""
    path = tmp_path / "sticky.json"
    sticky = StickyFile(path)
    real_replace = os.replace

    def broken(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with caplog.at_level(logging.WARNING, logger="pytest_failover"):
        sticky.save({"api": "https://api2.example.com"})
    assert len(warnings_of(caplog)) == 1 and "could not persist" in warnings_of(caplog)[0]
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(os, "replace", real_replace)
    sticky.save({"api": "https://api2.example.com"})
    assert json.loads(path.read_text())["pools"] == {"api": "https://api2.example.com"}


# -- off the event loop: a background writer, coalesced ------------------------------------

SLOW = 0.3  # seconds a slow disk's fsync takes, in these tests


def slow_fsync(monkeypatch: pytest.MonkeyPatch, calls: list[str]) -> None:
    """Every ``os.fsync`` takes ``SLOW`` seconds; ``calls`` gets the name of each caller's thread."""
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        calls.append(threading.current_thread().name)
        time.sleep(SLOW)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_a_background_save_returns_at_once_and_a_burst_costs_one_more_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``save(wait=False)`` returns before the slow write; saves during it are coalesced
    into one write of the newest mapping; ``flush`` waits for it; a ``save`` that waits,
    during a background write, returns once the file holds its mapping too."""
    path = tmp_path / "sticky.json"
    sticky = StickyFile(path)
    calls: list[str] = []
    slow_fsync(monkeypatch, calls)
    replaced: list[str] = []
    real_replace = os.replace

    def replace(src: str, dst: str) -> None:
        replaced.append(json.loads(Path(src).read_text())["pools"]["api"])
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    started = time.monotonic()
    sticky.save({"api": "https://api1.example.com"}, wait=False)
    assert time.monotonic() - started < SLOW / 3
    while not calls and time.monotonic() - started < 5:  # the first write is under way
        time.sleep(0.001)
    for n in (2, 3, 4):
        sticky.save({"api": f"https://api{n}.example.com"}, wait=False)
    assert sticky.flush(10)
    assert replaced == ["https://api1.example.com", "https://api4.example.com"]
    assert json.loads(path.read_text())["pools"] == {"api": "https://api4.example.com"}
    assert calls and set(calls) == {"pytest-failover sticky writer"}
    calls.clear()
    sticky.save({"api": "https://api5.example.com"}, wait=False)
    while not calls and time.monotonic() - started < 5:  # that write is under way
        time.sleep(0.001)
    sticky.save({"cdn": "https://cdn1.example.com"})  # waits: the file holds both when it returns
    assert json.loads(path.read_text())["pools"] == {"api": "https://api5.example.com", "cdn": "https://cdn1.example.com"}
    assert sticky.flush(0)


def test_a_slow_disk_does_not_stall_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The primary fails, the async transport moves to the backup and persists it; with an
    fsync of 0.3 s, another task on the loop still ticks every few milliseconds. The same
    probe run around an inline save on the loop sees the stall (the probe can fail)."""
    import asyncio

    import httpx

    from pytest_failover import AsyncFailoverTransport, Policy, Pool

    primary, backup = "http://a.test", "http://b.test"

    async def handle(request: httpx.Request) -> httpx.Response:
        if request.url.host == "a.test":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, text=str(request.url.host))

    path = tmp_path / "sticky.json"
    policy = Policy(sticky_path=str(path), breaker_threshold=1)
    calls: list[str] = []
    slow_fsync(monkeypatch, calls)

    async def longest_stall(during: Callable[[], object]) -> float:
        """The longest gap between ticks of a 5 ms ticker while ``during`` runs (and 0.1 s after)."""
        gaps: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            last = time.monotonic()
            while not done.is_set():
                await asyncio.sleep(0.005)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0.02)
        result = during()
        if asyncio.iscoroutine(result):
            await result
        await asyncio.sleep(0.1)
        done.set()
        await task
        return max(gaps)

    async def scenario() -> tuple[float, float, str]:
        transport = AsyncFailoverTransport([Pool("api", [primary, backup])], policy, httpx.MockTransport(handle))
        async with httpx.AsyncClient(transport=transport) as client:

            async def request() -> None:
                assert (await client.get(f"{primary}/x")).text == "b.test"

            stall = await longest_stall(request)
            assert calls, "the write did not happen yet: the test proved nothing"
        on_disk = json.loads(path.read_text())["pools"]["api"]  # the client closed the transport: flushed
        inline = await longest_stall(lambda: StickyFile(tmp_path / "inline.json").save({"api": backup}))
        return stall, inline, on_disk

    stall, inline, on_disk = asyncio.run(scenario())
    assert stall < SLOW / 3, stall
    assert inline >= SLOW, inline
    assert on_disk == backup
    assert "pytest-failover sticky writer" in calls


_EXITS_AT_ONCE = """
import os, sys, time
from pytest_failover._sticky import StickyFile

real_fsync = os.fsync
os.fsync = lambda fd: (time.sleep(0.3), real_fsync(fd))[1]
StickyFile(sys.argv[1]).save({"api": "https://api2.example.com"}, wait=False)
"""


def test_a_pending_background_write_completes_before_the_interpreter_exits(tmp_path: Path) -> None:
    """The writer thread is not a daemon: a process that exits right after handing over a
    slow write still leaves the file written."""
    path = tmp_path / "sticky.json"
    subprocess.run([sys.executable, "-c", _EXITS_AT_ONCE, str(path)], check=True, timeout=30)
    assert json.loads(path.read_text())["pools"] == {"api": "https://api2.example.com"}


# -- hostile files: ignored with one warning, promptly --------------------------------


def test_deeply_nested_json_is_ignored_not_a_recursion_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Nesting deep enough to exhaust the recursion limit is one warning, not a ``RecursionError``."""
    path = tmp_path / "sticky.json"
    path.write_text("[" * 30_000 + "]" * 30_000)
    assert path.stat().st_size <= MAX_BYTES
    assert "RecursionError" in load_ignored(path, caplog)
    path.write_text('{"version": 1, "pools": {"api": ' + "[" * 20_000 + "]" * 20_000 + "}}")
    assert "RecursionError" in load_ignored(path, caplog)


@posix_only
def test_a_fifo_at_the_path_returns_promptly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A FIFO with no writer does not block loading; it is ignored with one warning."""
    path = tmp_path / "sticky.json"
    os.mkfifo(path)
    assert "not a regular file" in load_ignored(path, caplog)


@posix_only
def test_a_symlink_to_a_fifo_returns_promptly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A symlink is followed, and a FIFO behind it is ignored like one at the path."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    path = tmp_path / "sticky.json"
    path.symlink_to(fifo)
    assert "not a regular file" in load_ignored(path, caplog)


@posix_only
def test_a_symlink_to_a_regular_file_is_followed(tmp_path: Path) -> None:
    """A symlink to a good file loads that file."""
    real = tmp_path / "real.json"
    real.write_text(json.dumps(VALID))
    path = tmp_path / "sticky.json"
    path.symlink_to(real)
    assert StickyFile(path).load() == VALID["pools"]


@posix_only
def test_a_device_at_the_path_is_not_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A character device (``/dev/zero`` never ends) is ignored without being read."""
    path = tmp_path / "sticky.json"
    path.symlink_to("/dev/zero")
    assert "not a regular file" in load_ignored(path, caplog)


def test_a_directory_at_the_path_is_ignored_and_not_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory at the path: loading warns once, saving warns once and leaves no temporary file."""
    path = tmp_path / "sticky.json"
    path.mkdir()
    assert "not a regular file" in load_ignored(path, caplog)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pytest_failover"):
        StickyFile(path).save({"api": "https://api2.example.com"})
    assert len(warnings_of(caplog)) == 1
    assert leftovers(tmp_path) == [] and path.is_dir()


def test_an_oversized_file_is_ignored_and_one_at_the_bound_is_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file over 64 KiB is ignored even if valid; a valid one of exactly 64 KiB loads."""
    path = tmp_path / "sticky.json"
    text = json.dumps(VALID)
    path.write_text(text + " " * (MAX_BYTES - len(text)))
    assert path.stat().st_size == MAX_BYTES
    assert StickyFile(path).load() == VALID["pools"]
    path.write_text(text + " " * (MAX_BYTES + 1 - len(text)))
    assert "larger than" in load_ignored(path, caplog)


def test_binary_garbage_is_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Bytes that are not UTF-8 JSON are one warning."""
    path = tmp_path / "sticky.json"
    path.write_bytes(bytes(range(256)) * 4)
    assert "not JSON" in load_ignored(path, caplog)


def test_a_nul_in_the_path_is_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A path the OS cannot take is one warning, not a ``ValueError``."""
    load_ignored(tmp_path / "sticky\0.json", caplog)


@pytest.mark.parametrize(
    "document",
    [
        "[]",
        '"sticky"',
        "null",
        "1e999999",
        "9" * 5000,
        '{"pools": {}}',
        '{"version": 2, "pools": {}}',
        '{"version": true, "pools": {}}',
        '{"version": 1.0, "pools": {}}',
        '{"version": "1", "pools": {}}',
        '{"version": 1}',
        '{"version": 1, "pools": []}',
        '{"version": 1, "pools": {"api": 1}}',
        '{"version": 1, "pools": {"api": null}}',
        '{"version": 1, "pools": {"api": ["https://a"]}}',
        '{"version": 1, "pools": {"api": "https://a"',
    ],
)
def test_wrong_shapes_and_types_are_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, document: str
) -> None:
    """Anything but ``{"version": 1, "pools": {str: str}}`` is one warning and ``{}``."""
    path = tmp_path / "sticky.json"
    path.write_text(document)
    load_ignored(path, caplog)


def test_a_corrupt_file_is_replaced_by_the_next_save(tmp_path: Path) -> None:
    """After an ignored file, the next save writes a good one over it."""
    path = tmp_path / "sticky.json"
    path.write_text("{not json")
    sticky = StickyFile(path)
    assert sticky.load() == {}
    sticky.save({"api": "https://api2.example.com"})
    assert StickyFile(path).load() == {"api": "https://api2.example.com"}


# -- crash leftovers ------------------------------------------------------------------


def test_old_leftovers_of_this_target_are_removed_and_everything_else_is_kept(
    tmp_path: Path,
) -> None:
    """``load`` removes this target's temporary files older than the bound, and nothing else."""
    old = tmp_path / ".sticky.json.failover-0123456789abcdef.tmp"
    fresh = tmp_path / ".sticky.json.failover-fedcba9876543210.tmp"
    other_target = tmp_path / ".other.json.failover-0123456789abcdef.tmp"
    legacy_old = tmp_path / ".failover-ab_c12z9"
    legacy_fresh = tmp_path / ".failover-zz_c12z9"
    not_legacy = tmp_path / ".failover-notes.txt"
    unrelated = tmp_path / "sticky.json.failover-1.tmp"
    for path in (old, fresh, other_target, legacy_old, legacy_fresh, not_legacy, unrelated):
        path.write_text("{")
    folder_lookalike = tmp_path / ".sticky.json.failover-dir.tmp"
    folder_lookalike.mkdir()
    for path in (old, other_target, legacy_old, not_legacy, unrelated, folder_lookalike):
        age(path, LEFTOVER_AGE + 60)
    age(fresh, LEFTOVER_AGE / 2)
    StickyFile(tmp_path / "sticky.json").load()
    assert not old.exists() and not legacy_old.exists()
    for kept in (fresh, other_target, legacy_fresh, not_legacy, unrelated, folder_lookalike):
        assert kept.exists(), kept


@posix_only
def test_a_symlink_named_like_a_leftover_is_not_followed_or_removed(tmp_path: Path) -> None:
    """Only regular files are leftovers; a symlink with that name (and its target) stays."""
    target = tmp_path / "precious"
    target.write_text("keep")
    link = tmp_path / ".sticky.json.failover-0123456789abcdef.tmp"
    link.symlink_to(target)
    age(link, LEFTOVER_AGE + 60)
    StickyFile(tmp_path / "sticky.json").load()
    assert link.is_symlink() and target.read_text() == "keep"


_WRITER = """
import sys
from pytest_failover._sticky import StickyFile

sticky = StickyFile(sys.argv[1])
sticky.load()
i = 0
while True:
    sticky.save({"api": "https://api%d.example.com" % (i % 3), "n": str(i)})
    if i == 0:
        print("ready", flush=True)
    i += 1
"""


@posix_only
def test_kill_9_during_writes_never_corrupts_and_the_next_start_cleans_up(tmp_path: Path) -> None:
    """Writers killed with SIGKILL mid-write leave a valid file, and the next start removes their leftovers once old."""
    path = tmp_path / "sticky.json"
    rng = random.Random(9)
    seen: set[str] = set()
    deadline = time.monotonic() + 90
    rounds = 0
    while rounds < 20 or (not seen and rounds < 60):
        assert time.monotonic() < deadline, f"only {rounds} rounds in time"
        writer = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert writer.stdout is not None
            ready, _, _ = select.select([writer.stdout], [], [], 30)
            assert ready and writer.stdout.readline() == "ready\n"
            time.sleep(rng.uniform(0, 0.02))
        finally:
            writer.kill()
            writer.wait(timeout=30)
            if writer.stdout is not None:
                writer.stdout.close()
        rounds += 1
        document = json.loads(path.read_bytes())
        assert document["version"] == 1 and set(document["pools"]) == {"api", "n"}
        seen.update(p.name for p in leftovers(tmp_path))
    assert seen, "no write was ever interrupted: the test proved nothing"
    remaining = leftovers(tmp_path)
    for leftover in remaining:
        age(leftover, LEFTOVER_AGE + 1)
    loaded = StickyFile(path).load()
    assert set(loaded) == {"api", "n"}
    assert leftovers(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sticky.json"]
