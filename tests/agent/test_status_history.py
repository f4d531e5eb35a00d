"""The status history: uptime maths, the bars' ring, the SQLite file (restarts, retention, row
cap, corrupt and unreadable files) and the recorder that falls back to memory."""

from __future__ import annotations

import asyncio
import logging
import re
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from agent_support import config, cors_handler, eventually, fake_domains, running
from failover_agent.checks.result import ProbeResult
from failover_agent.config import parse_config
from failover_agent.state import AgentState, ControlStatus, DomainStatus, PoolStatus
from failover_agent.status.history import BARS, Counts, History, Key, Sample, Series
from failover_agent.status.recorder import Recorder, probe_label
from failover_agent.status.store import SCHEMA_VERSION, HistoryFile, HistoryFileError, Row

from pytest_failover.simulator import FakeDomains

__all__ = ["fake_domains"]

A = "https://api.example.com"
B = "https://api2.example.com"
T0 = 1_700_000_000.0 - 1_700_000_000.0 % 3600  # the start of an hour


def test_counts_ratio_over_whole_slots() -> None:
    """Uptime is successes over results in the current slot and the ones before it, no further."""
    counts = Counts(60, 60.0)
    for minute in range(60):  # one result a minute, the first 15 minutes failed
        counts.add(T0 + minute * 60 + 5, ok=int(minute >= 15))
    assert counts.ratio(T0 + 59 * 60, 60) == pytest.approx(45 / 60)
    assert counts.ratio(T0 + 59 * 60, 30) == 1.0
    assert counts.ratio(T0 + 69 * 60, 60) == pytest.approx(45 / 50)  # 10 minutes later: 10 fewer failures
    assert counts.ratio(T0 + 500 * 60, 60) is None  # nothing in the window


def test_counts_ring_reuses_slots_and_drops_older_results() -> None:
    """A slot a lap later starts from zero; a result older than its slot's lap is dropped."""
    counts = Counts(3, 60.0)
    counts.add(T0, ok=0)
    counts.add(T0 + 180, ok=1)  # same slot index, next lap
    counts.add(T0 + 1, ok=0)  # late, belongs to the overwritten lap
    assert list(counts.slots()) == [((T0 + 180) // 60, 1, 1)]


def test_counts_ring_moving_on_forgets_only_what_left_the_window() -> None:
    """Moving to a later slot drops the slots that fell out of the ring and keeps the rest;
    a late result within the ring still counts in its own slot."""
    counts = Counts(3, 60.0)
    counts.add(T0, ok=1)
    counts.add(T0 + 60, ok=0)
    counts.add(T0 + 240, ok=1)  # minute 4: minutes 0 and 1 leave the ring, 2 and 3 had nothing
    counts.add(T0 + 150, ok=0)  # minute 2, late but inside the ring
    first = int(T0 // 60)
    assert list(counts.slots()) == [(first + 2, 0, 1), (first + 4, 1, 1)]
    assert counts.ratio(T0 + 240, 3) == pytest.approx(1 / 2)
    assert counts.ratio(T0 + 180, 2) == 0.0  # seen from minute 3: only minute 2 is in its window
    counts.add(T0 + 10_000, ok=1)  # far later: the whole ring starts afresh
    assert list(counts.slots()) == [(int((T0 + 10_000) // 60), 1, 1)]


def test_counts_past_a_byte_a_slot_stay_exact() -> None:
    """A slot holding more results than its type can (255 in a byte, 65,535 in two) is
    widened, and counts on exactly, restored totals of millions included."""
    counts = Counts(3, 60.0)
    for i in range(600):  # ten a second for a minute, every third one failed
        counts.add(T0 + i / 10, ok=int(i % 3 != 0))
    assert list(counts.slots()) == [(T0 // 60, 400, 600)]
    counts.add(T0 + 60, ok=3_000_000, total=4_000_000)  # the next minute, restored from the file
    assert counts.ratio(T0 + 60, 2) == pytest.approx(3_000_400 / 4_000_600)
    counts.add(T0 + 10_000, ok=1)  # a fresh ring counts on from one byte a slot
    assert list(counts.slots()) == [((T0 + 10_000) // 60, 1, 1)]


def test_a_series_keeps_each_results_label_among_hundreds() -> None:
    """Labels are kept as indices of a shared table: past 255 distinct labels each result still
    shows its own."""
    s = Series()
    labels = [f"label-{n}" for n in range(300)]
    for n, label in enumerate(labels):
        s.add(Sample(T0 + n, True, 0.01, label))
    assert [sample.label for sample in s.samples()] == labels[-BARS:]


def _rounded(window: tuple[float | None, float | None]) -> tuple[float | None, float | None]:
    """A window's (ratio, covered) with the ratio rounded, to compare with a fraction."""
    ratio, covered = window
    return (None if ratio is None else round(ratio, 9), covered)


def test_series_uptime_windows_and_streaks() -> None:
    """1 h, 24 h and 7 d uptime, and "down since" the first failure of the current streak."""
    s = Series()
    for i in range(48):  # one result an hour for two days: up, except hours 40..45
        s.add(Sample(T0 + i * 3600, not 40 <= i <= 45, 0.01, ""))
    now = T0 + 47 * 3600 + 1
    up = s.uptime(now)
    assert up["1h"] == (1.0, None)  # the whole window is covered: no "over ..."
    assert _rounded(up["24h"]) == (round(18 / 24, 9), None)
    assert _rounded(up["7d"]) == (round(42 / 48, 9), 47 * 3600 + 1)  # two days of the seven
    assert s.up is True and s.since == T0 + 46 * 3600
    s.add(Sample(now + 10, False, 0.5, "dns_error"))
    s.add(Sample(now + 20, False, 0.5, "dns_error"))
    described = s.describe(now + 20)
    assert described["down_since"] == now + 10 and described["up"] is False


def test_uptime_is_read_over_the_time_its_results_cover() -> None:
    """19 s of results give the 1 h window its figure "over 19 s", and the 24 h and 7 d windows
    none (they would repeat it); each longer window gets a figure once results predate the
    shorter one, over the time they cover."""
    s = Series()
    assert s.uptime(T0) == {"1h": (None, None), "24h": (None, None), "7d": (None, None)}
    for i, ok in enumerate([True, False, True, False, False]):  # 2 of 5, from T0 + 100 to T0 + 119
        s.add(Sample(T0 + 100 + i * 4.75, ok, 0.01, ""))
    assert s.uptime(T0 + 119) == {"1h": (0.4, 19.0), "24h": (None, None), "7d": (None, None)}
    assert s.describe(T0 + 119)["covered"] == {"1h": 19.0, "24h": None, "7d": None}
    for minute in range(2, 150):  # one good result a minute for about two and a half hours
        s.add(Sample(T0 + minute * 60, True, 0.01, ""))
    now = T0 + 149 * 60
    up = s.uptime(now)
    assert up["1h"] == (1.0, None)
    assert _rounded(up["24h"]) == (round(150 / 153, 9), now - (T0 + 100))
    assert up["7d"] == (None, None)
    s.add(Sample(T0 + 30 * 3600, True, 0.01, ""))  # a day later: 7 d has more than 24 h to say
    assert _rounded(s.uptime(T0 + 30 * 3600)["7d"]) == (round(151 / 154, 9), 30 * 3600 - 100)


def test_the_control_version_is_a_time_when_the_writer_made_it_one() -> None:
    """The agent numbers documents by their signing time in ms: /status.json says which time; a
    hand-signed version 8 is a plain number."""
    state = AgentState(location="test")
    state.control = ControlStatus(version=1_796_424_345_782, issued_at=1_796_424_345.782)
    control = state.as_dict()["control"]
    assert isinstance(control, dict) and control["version_time"] == pytest.approx(1_796_424_345.782)
    state.control = ControlStatus(version=8, issued_at=1_796_424_345.0)
    control = state.as_dict()["control"]
    assert isinstance(control, dict) and (control["version"], control["version_time"]) == (8, None)


def test_series_keeps_the_last_bars_oldest_first() -> None:
    """The ring holds the last BARS results in order, whatever came before."""
    s = Series()
    for i in range(BARS + 25):
        s.add(Sample(T0 + i, i % 2 == 0, i / 1000, str(i)))
    samples = s.samples()
    assert len(samples) == BARS
    assert [x.label for x in samples] == [str(i) for i in range(25, BARS + 25)]
    last = BARS + 24
    newest = samples[-1]
    assert (newest.at, newest.ok, newest.label) == (T0 + last, last % 2 == 0, str(last))
    assert newest.latency == pytest.approx(last / 1000, rel=1e-6)  # kept as float32


def test_history_forgets_removed_checks() -> None:
    h = History()
    h.add(("api", A), Sample(T0, True, 0.1, "200"))
    h.add(("api", B), Sample(T0, True, 0.1, "200"))
    h.keep_only([("api", B)])
    assert ("api", A) not in h and ("api", B) in h and len(h) == 1


def test_probe_label_names_what_happened() -> None:
    assert probe_label(ProbeResult(True, 200, None, 0.1), pool_probe=False) == "200"
    assert probe_label(ProbeResult(False, 503, "503", 0.1), pool_probe=False) == "503"
    assert probe_label(ProbeResult(False, None, "dns_error", 0.1), pool_probe=False) == "dns_error"
    assert probe_label(ProbeResult(True, 200, None, 0.1, served_by=B, attempts=2), pool_probe=True) == B


# --- the file --------------------------------------------------------------------------


def _rows(n: int, start: float, every: float = 1.0, domain: str = A) -> list[Row]:
    return [(start + i * every, "api", domain, int(i % 4 != 0), 0.01 * i, "200", 1) for i in range(n)]


def test_file_survives_a_restart(tmp_path: Path) -> None:
    """What one process wrote, the next one reads: bars, counts and streaks."""
    path = tmp_path / "sub" / "history.sqlite"
    now = T0 + 3000
    f = HistoryFile(path, retention_days=7, max_rows=10_000)
    assert f.open(now).rows == 0
    f.write(_rows(120, now - 120), {("api", A): (True, now - 500)}, now)
    f.close()
    again = HistoryFile(path, retention_days=7, max_rows=10_000)
    loaded = again.open(now)
    again.close()
    assert loaded.rows == 120
    recent = loaded.recent[("api", A)]
    assert len(recent) == BARS and recent[-1].at == now - 1 and recent[0].at == now - BARS
    assert sum(total for _, _, _, total in loaded.minutes) == 120
    assert sum(ok for _, _, ok, _ in loaded.hours) == 90  # one in four failed
    assert loaded.streaks == {("api", A): (True, now - 500)}


def test_file_retention_and_row_cap(tmp_path: Path) -> None:
    """Rows older than the retention go, then the oldest rows beyond max_rows."""
    path = tmp_path / "history.sqlite"
    now = T0 + 10 * 86400
    f = HistoryFile(path, retention_days=1, max_rows=1000)
    f.open(now)
    f.write(_rows(10, now - 3 * 86400), {}, now)  # older than a day: gone at the next pass
    f.write(_rows(1500, now - 1500), {}, now + 61)  # 61 s later: the next prune pass runs
    f.close()
    db = sqlite3.connect(path)
    count, oldest = db.execute("SELECT count(*), min(at) FROM results").fetchone()
    (counted,) = db.execute("SELECT sum(total) FROM hours").fetchone()
    db.close()
    assert count == 1000 and oldest == now - 1000
    assert counted == 1500  # the hour counts outlive the row cap (not the retention): uptime stays right


NOT_A_DATABASE = r"the file is not a SQLite database \(or is corrupt\)"


def _foreign_database(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    db.execute("INSERT INTO users VALUES (1, 'someone')")
    db.commit()
    db.close()


def _ours_missing_a_column(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE results (check_id INTEGER, at REAL)")
    db.commit()
    db.close()


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda path: path.write_bytes(b"this is not a database at all" * 100), NOT_A_DATABASE),
        (lambda path: path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4080), f"({NOT_A_DATABASE}|database disk image is malformed)"),
        (_foreign_database, r"it holds tables of another program \(users\)"),
        (_ours_missing_a_column, "its table results lacks the columns label, latency, ok"),
    ],
    ids=["garbage", "damaged", "foreign", "missing-columns"],
)
def test_a_corrupt_or_foreign_file_is_moved_aside_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, make: Callable[[Path], object], why: str
) -> None:
    """Garbage, a SQLite header over garbage, another program's database, or ours missing
    columns: the file is renamed ``<name>.<UTC time>.corrupt``, bytes untouched, with one warning
    naming both files and the problem; a new history starts and works."""
    path = tmp_path / "history.sqlite"
    make(path)
    before = path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="failover_agent.status"):
        f = HistoryFile(path, retention_days=7, max_rows=1000)
        assert f.open(T0).rows == 0
    [aside] = [p for p in tmp_path.iterdir() if p.name.endswith(".corrupt")]
    assert re.fullmatch(r"history\.sqlite\.\d{8}T\d{6}Z\.corrupt", aside.name)
    assert aside.read_bytes() == before  # the operator's to inspect
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert re.fullmatch(rf"status history file {re.escape(str(path))}: {why}; moved aside to {re.escape(aside.name)}, "
                        "a new history starts", record.getMessage()), record.getMessage()
    f.write(_rows(3, T0), {}, T0)
    f.close()
    assert HistoryFile(path, retention_days=7, max_rows=1000).open(T0 + 1).rows == 3  # the new file keeps it


def test_a_newer_agents_file_is_refused_and_kept(tmp_path: Path) -> None:
    """Not corrupt: a newer failover-agent's. It stays as it is, and the error says so."""
    path = tmp_path / "history.sqlite"
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()
    with pytest.raises(HistoryFileError, match="schema version 99 was written by a newer failover-agent"):
        HistoryFile(path, retention_days=7, max_rows=1000).open(T0)
    assert [p.name for p in tmp_path.iterdir()] == ["history.sqlite"]


def test_unreadable_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(HistoryFileError, match=r"history file .*: cannot open it: unable to open database file"):
        HistoryFile(tmp_path, retention_days=7, max_rows=1000).open(T0)  # a directory


def test_maintenance_results_are_kept_as_bars_but_never_counted(tmp_path: Path) -> None:
    """A result written as not counted (during a maintenance window) comes back in the bars,
    with its label, but adds nothing to the minute or hour counts nor to the uptime's coverage."""
    path = tmp_path / "history.sqlite"
    now = T0 + 3000
    f = HistoryFile(path, retention_days=7, max_rows=10_000)
    f.open(now)
    f.write([(now - 30, "api", A, 0, 0.5, "maintenance dns_error", 0),
             (now - 20, "api", A, 0, 0.5, "maintenance dns_error", 0),
             (now - 10, "api", A, 1, 0.01, "200", 1)], {}, now)
    f.close()
    again = HistoryFile(path, retention_days=7, max_rows=10_000)
    loaded = again.open(now)
    again.close()
    assert [(s.at, s.ok, s.label) for s in loaded.recent[("api", A)]] == [
        (now - 30, False, "maintenance dns_error"), (now - 20, False, "maintenance dns_error"), (now - 10, True, "200")]
    assert [(ok, total) for _, _, ok, total in loaded.minutes] == [(1, 1)]
    assert [(ok, total) for _, _, ok, total in loaded.hours] == [(1, 1)]
    assert loaded.first == {("api", A): now - 10}


_VERSION_1 = """
CREATE TABLE checks (id INTEGER PRIMARY KEY, pool TEXT NOT NULL, domain TEXT NOT NULL, up INTEGER, since REAL,
    UNIQUE (pool, domain));
CREATE TABLE results (check_id INTEGER NOT NULL, at REAL NOT NULL, ok INTEGER NOT NULL, latency REAL NOT NULL,
    label TEXT NOT NULL);
CREATE INDEX results_check_at ON results (check_id, at);
CREATE TABLE hours (check_id INTEGER NOT NULL, hour INTEGER NOT NULL, ok INTEGER NOT NULL, total INTEGER NOT NULL,
    PRIMARY KEY (check_id, hour)) WITHOUT ROWID;
INSERT INTO checks VALUES (1, 'api', 'https://api.example.com', 1, 0);
PRAGMA user_version = 1;
"""


def test_a_version_1_file_is_upgraded_in_place(tmp_path: Path) -> None:
    """A file written by the agent before maintenance results were kept opens: its results
    stay, all counted, and new ones (counted or not) are written beside them."""
    path = tmp_path / "history.sqlite"
    now = T0 + 3000
    db = sqlite3.connect(path)
    db.executescript(_VERSION_1)
    db.executemany("INSERT INTO results VALUES (1, ?, ?, 0.01, '200')", [(now - 100, 1), (now - 90, 0)])
    db.execute("INSERT INTO hours VALUES (1, ?, 1, 2)", (int(now // 3600),))
    db.commit()
    db.close()
    f = HistoryFile(path, retention_days=7, max_rows=10_000)
    loaded = f.open(now)
    assert loaded.rows == 2 and loaded.first == {("api", A): now - 100}
    assert [(ok, total) for _, _, ok, total in loaded.minutes] == [(1, 2)]
    f.write([(now - 5, "api", A, 0, 0.5, "maintenance dns_error", 0)], {}, now)
    f.close()
    db = sqlite3.connect(path)
    version = db.execute("PRAGMA user_version").fetchone()[0]
    rows = db.execute("SELECT at, label, counted FROM results ORDER BY at").fetchall()
    hours = db.execute("SELECT ok, total FROM hours").fetchall()
    db.close()
    assert version == SCHEMA_VERSION == 2
    assert rows == [(now - 100, "200", 1), (now - 90, "200", 1), (now - 5, "maintenance dns_error", 0)]
    assert hours == [(1, 2)]  # the maintenance result adds nothing to the uptime


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 9")
    db.close()
    with pytest.raises(HistoryFileError, match="schema version 9 was written by a newer failover-agent"):
        HistoryFile(path, retention_days=7, max_rows=1000).open(T0)


# --- the recorder ----------------------------------------------------------------------


def _state() -> AgentState:
    state = AgentState(location="test")
    state.pools["api"] = PoolStatus("api", A, "api.example.com", (A, B))
    for url in (A, B):
        state.domains[("api", url)] = DomainStatus("api", url, url[8:], is_primary=url == A)
    return state


@asynccontextmanager
async def recording(state: AgentState, history: Path | None,
                    in_maintenance: Callable[[Key, float], bool] = lambda _key, _at: False) -> AsyncIterator[Recorder]:
    """A started recorder of ``state``, its history file at ``history`` (or none)."""
    pool: dict[str, object] = {"name": "api", "domains": [A, B], "probe": {"interval": 0.2, "timeout": 0.1}}
    data: dict[str, object] = {"pools": [pool]}
    if history is not None:
        data["status"] = {"history_path": history}
    cfg = parse_config(data)
    rec = Recorder(lambda: state, lambda: cfg, in_maintenance=in_maintenance)
    await rec.start()
    try:
        yield rec
    finally:
        await rec.aclose()


def _probed(rec: Recorder, state: AgentState, url: str, result: ProbeResult) -> None:
    """What the agent's check does: store the result in ``state``, then call the hook."""
    if url:
        state.domains[("api", url)].record(result)
    else:
        state.pools["api"].last = result
    rec.on_result(("api", url), result)


async def test_recorder_records_each_result_and_survives_restart(tmp_path: Path) -> None:
    """Each result the hook hands over is recorded; a second recorder on the same file sees them."""
    now = time.time()  # the recorder prunes by its clock
    path = tmp_path / "history.sqlite"
    state = _state()
    async with recording(state, path) as rec:
        assert rec.backend == "sqlite" and rec.error is None
        _probed(rec, state, A, ProbeResult(True, 200, None, 0.02, at=now))
        _probed(rec, state, "", ProbeResult(True, 200, None, 0.03, at=now, served_by=A, attempts=1))
        _probed(rec, state, A, ProbeResult(False, None, "dns_error", 0.5, at=now + 1))
        series = rec.history.get(("api", A))
        assert series is not None and [s.ok for s in series.samples()] == [True, False]
    async with recording(_state(), path) as again:
        series = again.history.get(("api", A))
        assert series is not None
        assert [s.ok for s in series.samples()] == [True, False]
        assert series.up is False and series.since == now + 1
        assert series.first == now  # the coverage of the uptime, exact across the restart
        pool = again.history.get(("api", ""))
        assert pool is not None and pool.samples()[0].label == A


async def test_a_maintenance_window_is_still_marked_after_a_restart(tmp_path: Path) -> None:
    """Results during a window are bars labelled ``maintenance``; after a restart they still
    are, and the uptime still leaves them out (100 % though the domain failed in the window)."""
    now = time.time()
    path = tmp_path / "history.sqlite"
    window = (now + 1, now + 3)
    state = _state()
    async with recording(state, path, in_maintenance=lambda key, at: key == ("api", A)
                         and window[0] <= at < window[1]) as rec:
        _probed(rec, state, A, ProbeResult(True, 200, None, 0.02, at=now))
        _probed(rec, state, A, ProbeResult(False, None, "dns_error", 0.5, at=now + 1))
        _probed(rec, state, A, ProbeResult(False, None, "dns_error", 0.5, at=now + 2))
        _probed(rec, state, A, ProbeResult(True, 200, None, 0.02, at=now + 3))
        before = rec.history.get(("api", A))
        assert before is not None
        marked = [s.label for s in before.samples()]
        assert before.uptime(now + 3)["1h"][0] == 1.0
    async with recording(_state(), path) as again:  # the window is over: no maintenance callback needed
        series = again.history.get(("api", A))
        assert series is not None
        assert [s.label for s in series.samples()] == marked == ["200", "maintenance dns_error",
                                                                 "maintenance dns_error", "200"]
        assert series.uptime(now + 3)["1h"][0] == 1.0
        assert series.describe(now + 3)["uptime"] == {"1h": 1.0, "24h": None, "7d": None}


async def test_recorder_follows_a_reload(tmp_path: Path) -> None:
    """A reload replaces the state: the recorder reads the new one and forgets removed checks."""
    now = time.time()
    holder = [_state()]
    rec = Recorder(lambda: holder[0], lambda: parse_config({"pools": [{"name": "api", "domains": [A, B]}]}))
    await rec.start()
    try:
        _probed(rec, holder[0], B, ProbeResult(True, 200, None, 0.02, at=now))
        assert rec.history.get(("api", B)) is not None
        reloaded = _state()
        del reloaded.domains[("api", B)]
        holder[0] = reloaded
        _probed(rec, reloaded, A, ProbeResult(True, 200, None, 0.02, at=now + 1))
        assert rec.history.get(("api", B)) is None and rec.history.get(("api", A)) is not None
    finally:
        await rec.aclose()


async def test_recorder_without_path_keeps_memory_only(tmp_path: Path) -> None:
    state = _state()
    async with recording(state, None) as rec:
        _probed(rec, state, B, ProbeResult(True, 200, None, 0.02, at=T0))
        assert rec.history.get(("api", B)) is not None and rec.backend == "memory"
        assert rec.describe()["path"] is None
    assert await asyncio.to_thread(lambda: list(tmp_path.iterdir())) == []  # no file made


async def test_a_corrupt_file_is_moved_aside_and_recording_goes_on_in_a_new_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A corrupt file: one warning, moved aside; the recorder writes to a new file."""
    path = tmp_path / "history.sqlite"
    path.write_bytes(b"garbage" * 1000)
    state = _state()
    with caplog.at_level(logging.WARNING, logger="failover_agent.status"):
        async with recording(state, path) as rec:
            assert rec.backend == "sqlite" and rec.error is None
            _probed(rec, state, A, ProbeResult(True, 200, None, 0.02, at=T0))
            assert rec.history.get(("api", A)) is not None
    [record] = caplog.records
    assert record.levelno == logging.WARNING and "moved aside" in record.getMessage()
    assert HistoryFile(path, retention_days=7, max_rows=1000).open(T0 + 1).rows == 1  # the new file has it


async def test_an_unreadable_file_logs_an_error_and_falls_back_to_memory(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A path that cannot be opened at all (here: a directory) is logged once as an error, not
    moved; recording carries on in memory."""
    path = tmp_path / "history.sqlite"
    path.mkdir()
    state = _state()
    with caplog.at_level(logging.WARNING, logger="failover_agent.status"):
        async with recording(state, path) as rec:
            assert rec.backend == "memory"
            assert rec.error is not None and "unable to open database file" in rec.error
            _probed(rec, state, A, ProbeResult(True, 200, None, 0.02, at=T0))
            assert rec.history.get(("api", A)) is not None
            assert rec.describe()["error"] == rec.error
    assert [r.getMessage() for r in caplog.records] == [
        f"{rec.error}; the status history is kept in memory only from now on"]
    assert path.is_dir()


async def test_a_failed_write_falls_back_to_memory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The file breaking while the agent runs (here: its table dropped) is logged, then memory only."""
    path = tmp_path / "history.sqlite"
    state = _state()
    async with recording(state, path) as rec:
        db = sqlite3.connect(path)
        db.execute("DROP TABLE results")
        db.commit()
        db.close()
        _probed(rec, state, A, ProbeResult(True, 200, None, 0.02, at=T0))
        with caplog.at_level(logging.ERROR, logger="failover_agent.status"):
            rec._flush()  # one write now, without waiting a second for the tick
            for _ in range(100):
                if rec.backend == "memory":
                    break
                await asyncio.sleep(0.01)
        assert rec.backend == "memory"
        assert rec.error is not None and "cannot write to it: no such table: results" in rec.error
        assert any("kept in memory only" in r.getMessage() for r in caplog.records)


# --- the agent's result hook -----------------------------------------------------------


async def test_the_agent_hands_each_result_to_its_listeners_and_to_the_status_history(
    fake_domains: FakeDomains, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every pinned probe and pool probe calls Agent.on_result once with the result it stored;
    the status page's recorder is one listener (its bars are those results), and a listener
    that raises is logged without keeping the others from hearing."""
    fake_domains.add("api.example.com", cors_handler())
    fake_domains.add("api2.example.com", cors_handler())
    heard: list[tuple[tuple[str, str], ProbeResult]] = []

    def broken(key: tuple[str, str], result: ProbeResult) -> None:
        raise RuntimeError("listener bug")

    cfg = config(fake_domains, tmp_path, [A, B], readiness={"enabled": False})
    with caplog.at_level(logging.ERROR, logger="failover_agent"):
        async with running(cfg) as agent:
            agent.result_listeners[:0] = [broken, lambda key, result: heard.append((key, result))]
            primary = agent.state.domains[("api", A)]
            await eventually(lambda: primary.consecutive_successes >= 3)
            assert agent.address is not None
            async with httpx.AsyncClient(trust_env=False) as client:
                doc = (await client.get("http://{}:{}/status.json".format(*agent.address))).json()
            heard_a = [result for key, result in heard if key == ("api", A)]
            assert heard_a and heard_a[-1] is primary.last
            assert all(r.success for r in heard_a)
            assert any(key == ("api", "") and r is agent.state.pools["api"].last for key, r in heard)
            assert {key for key, _ in heard} <= {("api", A), ("api", B), ("api", "")}
            bars = doc["pools"]["api"]["domains"][A]["history"]["results"]
            heard_at = {r.at for r in heard_a}
            assert heard_at <= {bar[0] for bar in bars}  # the recorder heard them too
    assert any("result listener" in r.getMessage() and "listener bug" in (r.exc_text or "")
               for r in caplog.records)
