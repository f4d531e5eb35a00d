"""The uploader's protocol and input rules, against the simulator's TusServer without sockets."""

from __future__ import annotations

import asyncio
import base64
import io
import os
from pathlib import Path

import httpx
import pytest

from pytest_failover.simulator import TusServer, TusStorage
from pytest_failover.uploads import (
    AsyncTusUpload,
    TusProtocolError,
    TusUpload,
    UploadFailedError,
    UploadNotFoundError,
)

from .inprocess import Interceptor, transport

URL = "https://api.example.com/files/"


def _client(
    storage: TusStorage, intercept: Interceptor | None = None
) -> tuple[httpx.Client, list[httpx.Request]]:
    mock, seen = transport(TusServer(storage), intercept)
    return httpx.Client(transport=mock), seen


def test_requests_follow_tus_1_0() -> None:
    """Creation, then PATCH chunks at the acknowledged offset, every request with Tus-Resumable."""
    storage = TusStorage()
    client, seen = _client(storage)
    data = os.urandom(10_000)

    url = TusUpload(client, URL, data, chunk_size=4096, metadata={"filename": "a b.txt", "raw": b"\x00"}).upload()

    assert storage.content(url) == data
    assert [r.method for r in seen] == ["POST", "PATCH", "PATCH", "PATCH"]
    create, *patches = seen
    assert all(r.headers["Tus-Resumable"] == "1.0.0" for r in seen)
    assert create.headers["Upload-Length"] == "10000"
    assert create.headers["Upload-Metadata"] == f"filename {base64.b64encode(b'a b.txt').decode()},raw AA=="
    assert create.headers["Idempotency-Key"]  # so the transport may send the creation again
    assert [r.headers["Upload-Offset"] for r in patches] == ["0", "4096", "8192"]
    assert {r.headers["Content-Type"] for r in patches} == {"application/offset+octet-stream"}
    assert [len(r.content) for r in patches] == [4096, 4096, 1808]
    assert all(r.extensions["failover"] == {"idempotent": False} for r in patches)


def test_an_empty_upload_is_only_created() -> None:
    """Zero bytes: the POST makes a complete upload, and no PATCH follows."""
    storage = TusStorage()
    client, seen = _client(storage)
    url = TusUpload(client, URL, b"").upload()
    assert [r.method for r in seen] == ["POST"]
    found = storage.get(url)
    assert found is not None and found.complete


def test_a_conflict_asks_head_and_goes_on_from_the_stored_offset() -> None:
    """A 409 (the chunk was stored though its answer was lost) costs a HEAD, not a resend."""
    storage = TusStorage()
    lost: list[int] = []

    def lose_second_answer(request: httpx.Request) -> httpx.Response | None:
        if request.method == "PATCH" and request.headers["Upload-Offset"] == "4096" and not lost:
            lost.append(1)
            upload_id = request.url.path.rsplit("/", 1)[1]
            storage.append(upload_id, 4096, request.read())  # stored, then the answer is lost
            raise httpx.ReadError("connection reset", request=request)
        return None

    client, seen = _client(storage, lose_second_answer)
    data = os.urandom(12_288)
    upload = TusUpload(client, URL, data, chunk_size=4096)
    url = upload.upload()

    assert storage.content(url) == data
    assert [(r.method, r.headers.get("Upload-Offset")) for r in seen[1:]] == [
        ("PATCH", "0"), ("PATCH", "4096"), ("HEAD", None), ("PATCH", "8192"),
    ]
    assert upload.resumes == 1


def test_chunks_that_keep_failing_give_up_after_the_retries() -> None:
    """``retries`` failed chunks in a row are recovered from; one more is UploadFailedError."""
    storage = TusStorage()

    def always_503(request: httpx.Request) -> httpx.Response | None:
        return httpx.Response(503) if request.method == "PATCH" else None

    client, seen = _client(storage, always_503)
    upload = TusUpload(client, URL, b"x" * 100, retries=2)
    with pytest.raises(UploadFailedError, match="3 chunks in a row failed at offset 0") as caught:
        upload.upload()
    assert [r.method for r in seen] == ["POST", "PATCH", "HEAD", "PATCH", "HEAD", "PATCH"]
    assert caught.value.url == upload.url and caught.value.offset == 0


def test_upload_again_after_an_error_resumes_with_head() -> None:
    """After every domain failed, calling upload() again asks HEAD and sends only the rest."""
    storage = TusStorage()
    down = [False]
    struck: list[bool] = []

    def outage(request: httpx.Request) -> httpx.Response | None:
        if request.method == "PATCH" and request.headers["Upload-Offset"] == "200" and not struck:
            struck.append(True)
            down[0] = True  # the whole pool goes down, until the test says otherwise
        if down[0]:
            raise httpx.ConnectError("refused", request=request)
        return None

    client, seen = _client(storage, outage)
    data = os.urandom(500)
    upload = TusUpload(client, URL, data, chunk_size=100, retries=1)
    with pytest.raises(UploadFailedError, match=r"asking for its offset \(HEAD\) failed") as caught:
        upload.upload()
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert caught.value.offset == 200 == upload.offset
    down[0] = False
    seen.clear()

    assert upload.upload() == caught.value.url
    assert storage.content(caught.value.url) == data
    assert [(r.method, r.headers.get("Upload-Offset")) for r in seen] == [
        ("HEAD", None), ("PATCH", "200"), ("PATCH", "300"), ("PATCH", "400"),
    ]


def test_an_upload_made_earlier_resumes_from_its_url() -> None:
    """``upload_url=`` starts with HEAD and never creates a second upload."""
    storage = TusStorage()
    data = os.urandom(300)
    made = storage.create(len(data))
    storage.append(made.id, 0, data[:120])
    client, seen = _client(storage)
    progress: list[tuple[int, int]] = []

    url = TusUpload(
        client, URL, data, chunk_size=100, upload_url=URL + made.id, on_progress=lambda o, n: progress.append((o, n))
    ).upload()

    assert url == URL + made.id and storage.content(url) == data
    assert [r.method for r in seen] == ["HEAD", "PATCH", "PATCH"]
    assert progress == [(120, 300), (220, 300), (300, 300)]


@pytest.mark.parametrize("status", [404, 410])
def test_an_unknown_upload_is_upload_not_found(status: int) -> None:
    """404/410 for the upload URL: a clear error, no new upload from byte 0."""
    storage = TusStorage()

    def gone(request: httpx.Request) -> httpx.Response | None:
        return httpx.Response(status) if request.method == "HEAD" else None

    client, seen = _client(storage, gone)
    with pytest.raises(UploadNotFoundError, match="must share the upload storage") as caught:
        TusUpload(client, URL, b"abc", upload_url=URL + "feed").upload()
    assert caught.value.status == status and caught.value.offset == 0
    assert [r.method for r in seen] == ["HEAD"]


def test_a_head_with_fewer_bytes_than_acknowledged_stops_the_upload() -> None:
    """A domain reporting fewer bytes than were acknowledged has other storage: no silent resend."""
    storage = TusStorage()
    failed = [False]

    def forget(request: httpx.Request) -> httpx.Response | None:
        if request.method == "PATCH" and request.headers["Upload-Offset"] == "200" and not failed[0]:
            failed[0] = True
            return httpx.Response(503)
        if request.method == "HEAD":
            return httpx.Response(200, headers={"Upload-Offset": "100", "Upload-Length": "400"})
        return None

    client, _ = _client(storage, forget)
    with pytest.raises(TusProtocolError, match="fewer than the 200 already acknowledged") as caught:
        TusUpload(client, URL, os.urandom(400), chunk_size=100).upload()
    assert caught.value.offset == 200


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        (httpx.Response(201), "without a Location header"),
        (httpx.Response(413, text="too big"), "413: too big"),
        (httpx.Response(200, headers={"Upload-Offset": "999"}), "Upload-Offset '999'"),
        (httpx.Response(400, text="bad offset"), "PATCH .* at 0: 400: bad offset"),
    ],
    ids=["no-location", "creation-refused", "offset-past-chunk", "patch-refused"],
)
def test_answers_outside_the_protocol_are_protocol_errors(answer: httpx.Response, match: str) -> None:
    """A refusal or a malformed answer is a TusProtocolError naming what came back."""
    storage = TusStorage()
    method = "PATCH" if answer.status_code in (200, 400) else "POST"

    def reply(request: httpx.Request) -> httpx.Response | None:
        return answer if request.method == method else None

    client, _ = _client(storage, reply)
    with pytest.raises(TusProtocolError, match=match) as caught:
        TusUpload(client, URL, b"0123456789", chunk_size=4).upload()
    assert caught.value.status == answer.status_code


def test_the_async_twin_speaks_the_same_protocol() -> None:
    """AsyncTusUpload sends the same requests as TusUpload for the same data."""
    storage = TusStorage()
    seen: list[httpx.Request] = []

    async def run() -> str:
        mock, sent = transport(TusServer(storage))
        async with httpx.AsyncClient(transport=mock) as client:
            url = await AsyncTusUpload(client, URL, io.BytesIO(b"a" * 9000), chunk_size=4000).upload()
        seen.extend(sent)
        return url

    url = asyncio.run(run())
    assert storage.content(url) == b"a" * 9000
    assert [(r.method, r.headers.get("Upload-Offset")) for r in seen] == [
        ("POST", None), ("PATCH", "0"), ("PATCH", "4000"), ("PATCH", "8000"),
    ]


# --------------------------------------------------------------------------- inputs


def test_data_may_be_bytes_a_path_or_a_seekable_file(tmp_path: Path) -> None:
    """bytearray, memoryview, str and Path, and an open file from its current position."""
    storage = TusStorage()
    client, _ = _client(storage)
    path = tmp_path / "f.bin"
    path.write_bytes(b"0123456789")
    with path.open("rb") as file:
        file.seek(4)
        sources: list[object] = [bytearray(b"0123456789"), memoryview(b"0123456789"), str(path), path, file]
        results = [storage.content(TusUpload(client, URL, s, chunk_size=3).upload()) for s in sources]  # type: ignore[arg-type]  # the object list holds each accepted kind
    assert results == [b"0123456789"] * 4 + [b"456789"]


def test_bad_inputs_are_clear_errors(tmp_path: Path) -> None:
    """Each wrong argument raises before anything is sent, naming what is wrong."""
    client, seen = _client(TusStorage())
    text = tmp_path / "t.txt"
    text.write_text("hi")
    with pytest.raises(TypeError, match="data must be bytes, a path"):
        TusUpload(client, URL, 42)  # type: ignore[arg-type]  # the wrong type is the test
    with pytest.raises(FileNotFoundError):
        TusUpload(client, URL, tmp_path / "missing.bin")
    with pytest.raises(ValueError, match="is not a regular file"):
        TusUpload(client, URL, tmp_path)
    with text.open() as opened, pytest.raises(TypeError, match="open it with 'rb'"):
        TusUpload(client, URL, opened)  # type: ignore[arg-type]  # a text file is the test
    read_end, write_end = os.pipe()
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe, pytest.raises(ValueError, match="must be seekable"):
        TusUpload(client, URL, pipe)
    for chunk, error in ((0, ValueError), (True, TypeError), (1.5, TypeError)):
        with pytest.raises(error, match="chunk_size"):
            TusUpload(client, URL, b"x", chunk_size=chunk)  # type: ignore[arg-type]  # wrong on purpose
    for key in ("", "a b", "a,b", "é"):
        with pytest.raises(ValueError, match="metadata key"):
            TusUpload(client, URL, b"x", metadata={key: "v"})
    with pytest.raises(TypeError, match=r"metadata\['k'\] must be str or bytes"):
        TusUpload(client, URL, b"x", metadata={"k": 1})  # type: ignore[dict-item]  # wrong on purpose
    with pytest.raises(ValueError, match="absolute http"):
        TusUpload(client, "/files/", b"x")
    with pytest.raises(ValueError, match="retries"):
        TusUpload(client, URL, b"x", retries=-1)
    with pytest.raises(TypeError, match="on_progress must be callable"):
        TusUpload(client, URL, b"x", on_progress="print")  # type: ignore[arg-type]  # wrong on purpose
    with pytest.raises(TypeError, match=r"use AsyncTusUpload for an httpx\.AsyncClient"):
        TusUpload(httpx.AsyncClient(), URL, b"x")  # type: ignore[arg-type]  # wrong on purpose
    with pytest.raises(TypeError, match=r"AsyncTusUpload needs an httpx\.AsyncClient"):
        AsyncTusUpload(client, URL, b"x")  # type: ignore[arg-type]  # wrong on purpose
    assert seen == []


def test_a_file_that_changes_during_the_upload_is_an_error(tmp_path: Path) -> None:
    """A path that shrank between construction and upload() is refused, not sent short."""
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 100)
    client, seen = _client(TusStorage())
    upload = TusUpload(client, URL, path)
    path.write_bytes(b"x" * 10)
    with pytest.raises(ValueError, match="holds 10 bytes now, not the 100"):
        upload.upload()
    assert seen == []


@pytest.mark.parametrize("side", ["sync", "async"])
def test_a_failed_chunk_leaves_nothing_to_the_cyclic_collector(side: str) -> None:
    """An upload whose chunk failed with a transport error (kept as the cause of a later
    ``UploadFailedError``) and then went on, one whose chunks kept failing, and one whose
    ``HEAD`` failed too: the uploads, their plans and the errors are freed by reference
    counting alone, in sync and in async."""
    from client.garbage import left_for_the_collector  # tests/client: a package on the rootdir path

    from pytest_failover.uploads._protocol import UploadPlan

    hit: list[bool] = []

    def flaky(request: httpx.Request) -> httpx.Response | None:
        if request.method == "PATCH" and request.headers["Upload-Offset"] == "100" and not hit:
            hit.append(True)
            raise httpx.ReadError("reset", request=request)
        return None

    def refusing(methods: tuple[str, ...]) -> Interceptor:
        def intercept(request: httpx.Request) -> httpx.Response | None:
            if request.method in methods:
                raise httpx.ConnectError("refused", request=request)
            return None

        return intercept

    cases: list[tuple[Interceptor, bool]] = [
        (flaky, True), (refusing(("PATCH",)), False), (refusing(("PATCH", "HEAD")), False),
    ]
    data = os.urandom(300)

    def run_sync() -> None:
        hit.clear()
        for intercept, succeeds in cases:
            client, _ = _client(TusStorage(), intercept)
            upload = TusUpload(client, URL, data, chunk_size=100, retries=1)
            if succeeds:
                assert upload.upload()
            else:
                with pytest.raises(UploadFailedError):
                    upload.upload()

    async def run_async() -> None:
        hit.clear()
        for intercept, succeeds in cases:
            mock, _ = transport(TusServer(TusStorage()), intercept)
            async with httpx.AsyncClient(transport=mock) as client:
                upload = AsyncTusUpload(client, URL, data, chunk_size=100, retries=1)
                if succeeds:
                    assert await upload.upload()
                else:
                    with pytest.raises(UploadFailedError):
                        await upload.upload()

    run = run_sync if side == "sync" else lambda: asyncio.run(run_async())
    assert left_for_the_collector(run, (TusUpload, AsyncTusUpload, UploadPlan, BaseException)) == []
