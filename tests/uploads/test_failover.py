"""Uploads over real sockets that lose their primary mid-upload and finish on the backup."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_failover import faults, semconv
from pytest_failover._plugin_domains import FakeDomainsFixture
from pytest_failover.faults import Fault
from pytest_failover.simulator import TusServer, TusStorage
from pytest_failover.uploads import UploadNotFoundError

from .conftest import BACKUP, CHUNK, MIB, PRIMARY, Uploads, sha256

SIZE = 8 * MIB
FAIL_AT = 2 * MIB  # the primary fails once this much is acknowledged

FAULTS = {
    "reset": faults.reset(),
    "refused": faults.refused(),
    "503": faults.status(503),
}


def _shared(fd: FakeDomainsFixture) -> TusStorage:
    storage = TusStorage()
    fd.add(PRIMARY, TusServer(storage))
    fd.add(BACKUP, TusServer(storage))
    return storage


def _fail_primary_at(
    fd: FakeDomainsFixture, offset: int, fault: Fault
) -> tuple[Callable[[int, int], None], list[int]]:
    """An ``on_progress`` that gives the primary ``fault`` once ``offset`` bytes are stored."""
    seen: list[int] = []

    def progress(stored: int, length: int) -> None:
        assert length == SIZE
        seen.append(stored)
        if stored >= offset and isinstance(fd.domain(PRIMARY).fault, faults.Healthy):
            fd.fail(PRIMARY, fault)

    return progress, seen


def _received(fd: FakeDomainsFixture, host: str) -> int:
    return sum(len(request.body) for request in fd.requests(host))


@pytest.mark.parametrize("fault", list(FAULTS.values()), ids=list(FAULTS))
def test_an_upload_survives_the_primary_failing_mid_upload(
    fd: FakeDomainsFixture, uploads: Uploads, fault: Fault
) -> None:
    """8 MiB in 256 KiB chunks: the primary fails at 2 MiB, the backup stores the rest,
    the file is intact, and the servers received at most the file plus one chunk."""
    storage = _shared(fd)
    data = os.urandom(SIZE)
    progress, seen = _fail_primary_at(fd, FAIL_AT, fault)

    url = uploads.run(data, chunk_size=CHUNK, on_progress=progress)

    assert url.startswith(f"https://{PRIMARY}/files/")
    assert sha256(storage.content(url)) == sha256(data)
    received = _received(fd, PRIMARY) + _received(fd, BACKUP)
    assert SIZE <= received <= SIZE + CHUNK, received
    assert seen == sorted(seen) and seen[-1] == SIZE  # progress only grows, to the end
    assert uploads.last is not None and uploads.last.offset == SIZE
    patches = [r for r in fd.requests() if r.method == "PATCH"]
    primary_failed = [
        a for a in uploads.telemetry.attempts(domain=f"https://{PRIMARY}") if a.method == "PATCH" and a.failed
    ]
    assert primary_failed
    # the upload went on, and finished, on the backup
    assert patches[-1].host == BACKUP
    after_fault = [r for r in patches if int(r.headers["upload-offset"]) > FAIL_AT + CHUNK]
    assert after_fault and {r.host for r in after_fault} == {BACKUP}
    assert _received(fd, BACKUP) >= SIZE - FAIL_AT - 2 * CHUNK


def test_the_upload_asks_head_on_the_backup_after_a_chunk_failed_there(
    fd: FakeDomainsFixture, uploads: Uploads
) -> None:
    """A PATCH that failed after its bytes left is not re-sent blindly: HEAD on the backup first."""
    _shared(fd)
    progress, _ = _fail_primary_at(fd, FAIL_AT, faults.status(503))
    uploads.run(os.urandom(SIZE), chunk_size=CHUNK, on_progress=progress)

    heads = [r for r in fd.requests() if r.method == "HEAD"]
    assert [r.host for r in heads] == [BACKUP]
    assert uploads.last is not None and uploads.last.resumes == 1
    # the backup's first PATCH starts at the offset the HEAD reported, not before it
    backup_patches = [r for r in fd.requests(BACKUP) if r.method == "PATCH"]
    first = int(backup_patches[0].headers["upload-offset"])
    assert first >= FAIL_AT and first % CHUNK == 0


def test_a_refused_primary_moves_the_same_patch_to_the_backup_at_once(
    fd: FakeDomainsFixture, uploads: Uploads
) -> None:
    """A failure before any byte left needs no HEAD: the transport sends that PATCH to the backup."""
    _shared(fd)
    progress, _ = _fail_primary_at(fd, FAIL_AT, faults.refused())
    uploads.run(os.urandom(SIZE), chunk_size=CHUNK, on_progress=progress)

    assert [r for r in fd.requests() if r.method == "HEAD"] == []
    assert uploads.last is not None and uploads.last.resumes == 0
    assert _received(fd, PRIMARY) == FAIL_AT  # nothing reached it after the fault


def test_a_backup_without_the_shared_storage_is_a_clear_error(
    fd: FakeDomainsFixture, uploads: Uploads
) -> None:
    """The backup's own storage says 404 for the upload: UploadNotFoundError, no restart from 0."""
    fd.add(PRIMARY, TusServer(TusStorage()))
    backup = TusStorage()
    fd.add(BACKUP, TusServer(backup))
    progress, _ = _fail_primary_at(fd, FAIL_AT, faults.status(503))

    with pytest.raises(UploadNotFoundError) as caught:
        uploads.run(os.urandom(SIZE), chunk_size=CHUNK, on_progress=progress)

    error = caught.value
    assert error.status == 404
    assert error.domain == f"https://{BACKUP}"
    assert error.offset >= FAIL_AT and error.url is not None and error.url.startswith(f"https://{PRIMARY}/")
    assert "share the upload storage" in str(error)
    assert backup.uploads() == []  # nothing was created, nor sent from byte 0, on the backup
    assert [r.method for r in fd.requests(BACKUP)] == ["HEAD"]


def test_a_path_uploads_over_the_failover(fd: FakeDomainsFixture, uploads: Uploads, tmp_path: Path) -> None:
    """A file given by its path is read chunk by chunk (in a thread for the async upload)."""
    storage = _shared(fd)
    path = tmp_path / "video.bin"
    path.write_bytes(os.urandom(3 * MIB + 17))
    fd.fail(PRIMARY, faults.dns_nxdomain())

    url = uploads.run(path, chunk_size=CHUNK, metadata={"filename": "video.bin"})

    stored = storage.get(url)
    assert stored is not None and stored.complete
    assert sha256(storage.content(url)) == sha256(path.read_bytes())
    assert stored.metadata == {"filename": b"video.bin"}
    assert {r.host for r in fd.requests()} == {BACKUP}


def test_telemetry_shows_the_upload_its_chunks_and_the_resume(
    fd: FakeDomainsFixture, uploads: Uploads
) -> None:
    """One upload span, a chunk span per PATCH under it (the transport's spans under those),
    a resume event, and failover.upload.bytes summing to the file by domain."""
    _shared(fd)
    size = 2 * MIB
    stored: list[int] = []

    def progress(offset: int, length: int) -> None:
        stored.append(offset)
        if offset == MIB:
            fd.fail(PRIMARY, faults.status(503))

    uploads.run(os.urandom(size), chunk_size=CHUNK, on_progress=progress)

    spans = uploads.telemetry.spans()
    [upload] = [s for s in spans if s.name == semconv.UPLOAD_SPAN]
    chunks = [s for s in spans if s.name == semconv.UPLOAD_CHUNK_SPAN]
    patches = [r for r in fd.requests() if r.method == "PATCH"]
    assert len(chunks) == len(patches) == size // CHUNK + 1  # one chunk failed with 503
    assert upload.context is not None
    assert all(c.parent is not None and c.parent.span_id == upload.context.span_id for c in chunks)
    failed = [c for c in chunks if c.attributes and c.attributes.get(semconv.ERROR_TYPE) == "503"]
    assert len(failed) == 1 and failed[0].attributes is not None
    assert failed[0].attributes[semconv.FAILOVER_UPLOAD_OFFSET] == MIB
    assert upload.attributes is not None
    assert upload.attributes[semconv.FAILOVER_UPLOAD_SIZE] == size
    assert upload.attributes[semconv.FAILOVER_UPLOAD_OFFSET] == size
    assert upload.attributes[semconv.FAILOVER_UPLOAD_RESUMES] == 1
    [event] = [e for e in upload.events if e.name == semconv.EVENT_UPLOAD_RESUMED]
    assert event.attributes is not None
    assert event.attributes[semconv.FAILOVER_UPLOAD_OFFSET] == MIB
    assert event.attributes[semconv.FAILOVER_DOMAIN] == f"https://{BACKUP}"
    # the transport's request spans (creation, HEAD, each PATCH) nest under the upload's
    ours = {s.context.span_id for s in [upload, *chunks] if s.context is not None}
    requests = [s for s in spans if s.name.startswith(semconv.REQUEST_SPAN_PREFIX)]
    assert len(requests) == 1 + 1 + len(patches)
    assert all(s.parent is not None and s.parent.span_id in ours for s in requests)
    metric = uploads.telemetry.metric
    assert metric(semconv.FAILOVER_UPLOAD_BYTES) == size
    assert metric(semconv.FAILOVER_UPLOAD_BYTES, pool="files", domain=f"https://{PRIMARY}") == MIB
    assert metric(semconv.FAILOVER_UPLOAD_BYTES, pool="files", domain=f"https://{BACKUP}") == MIB
    assert stored[-1] == size
