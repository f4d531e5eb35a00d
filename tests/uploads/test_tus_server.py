"""The simulator's tus server: what it answers, and storage that fake domains share."""

from __future__ import annotations

import httpx
import pytest

from pytest_failover import faults
from pytest_failover._plugin_domains import FakeDomainsFixture
from pytest_failover.simulator import TusServer, TusStorage

from .conftest import BACKUP, PRIMARY
from .inprocess import transport

TUS = {"Tus-Resumable": "1.0.0"}
PATCH = {**TUS, "Content-Type": "application/offset+octet-stream"}


@pytest.fixture
def client() -> httpx.Client:
    mock, _ = transport(TusServer(TusStorage(max_size=1000)))
    return httpx.Client(transport=mock, base_url="https://api.example.com")


def _create(client: httpx.Client, length: int = 10, **headers: str) -> str:
    response = client.post("/files/", headers={**TUS, "Upload-Length": str(length), **headers})
    assert response.status_code == 201, response.text
    return response.headers["Location"]


def test_an_upload_is_created_appended_and_reported(client: httpx.Client) -> None:
    """POST 201 + Location, PATCH 204 + the new offset, HEAD the offset, length and metadata."""
    location = _create(client, 10, **{"Upload-Metadata": "name aGk=,empty"})
    assert location.startswith("https://api.example.com/files/")
    patched = client.patch(location, content=b"01234", headers={**PATCH, "Upload-Offset": "0"})
    assert patched.status_code == 204 and patched.headers["Upload-Offset"] == "5"
    head = client.head(location, headers=TUS)
    assert head.status_code == 200
    assert (head.headers["Upload-Offset"], head.headers["Upload-Length"]) == ("5", "10")
    assert head.headers["Upload-Metadata"] == "name aGk=,empty"
    assert head.headers["Cache-Control"] == "no-store"
    assert head.headers["Tus-Resumable"] == "1.0.0"


@pytest.mark.parametrize(
    ("offset", "body", "headers", "status"),
    [
        ("3", b"x", PATCH, 409),  # not the stored offset
        ("0", b"x" * 11, PATCH, 400),  # past Upload-Length
        ("0", b"x", {**TUS, "Content-Type": "application/octet-stream"}, 415),
        ("zero", b"x", PATCH, 400),
        ("0", b"x", {"Content-Type": "application/offset+octet-stream"}, 412),  # no Tus-Resumable
    ],
    ids=["conflict", "too-long", "content-type", "bad-offset", "no-tus-resumable"],
)
def test_a_patch_outside_the_protocol_is_refused(
    client: httpx.Client, offset: str, body: bytes, headers: dict[str, str], status: int
) -> None:
    """Each wrong PATCH gets the status tus 1.0 gives it, and nothing is stored."""
    location = _create(client)
    response = client.patch(location, content=body, headers={**headers, "Upload-Offset": offset})
    assert response.status_code == status, response.text
    assert client.head(location, headers=TUS).headers["Upload-Offset"] == "0"


def test_creation_is_checked(client: httpx.Client) -> None:
    """Upload-Length is required and bounded by Tus-Max-Size; metadata must be base64."""
    assert client.post("/files/", headers=TUS).status_code == 400
    assert client.post("/files/", headers={**TUS, "Upload-Length": "1001"}).status_code == 413
    bad = client.post("/files/", headers={**TUS, "Upload-Length": "1", "Upload-Metadata": "k !!"})
    assert bad.status_code == 400 and "Upload-Metadata" in bad.text
    assert client.post("/elsewhere/", headers={**TUS, "Upload-Length": "1"}).status_code == 404


def test_options_delete_and_unknown_uploads(client: httpx.Client) -> None:
    """OPTIONS announces version and extensions; DELETE removes; an unknown upload is 404."""
    options = client.options("/files/")
    assert options.status_code == 204
    assert options.headers["Tus-Version"] == "1.0.0"
    assert options.headers["Tus-Extension"] == "creation,termination"
    assert options.headers["Tus-Max-Size"] == "1000"
    location = _create(client)
    assert client.delete(location, headers=TUS).status_code == 204
    assert client.head(location, headers=TUS).status_code == 404
    assert client.patch(location, content=b"x", headers={**PATCH, "Upload-Offset": "0"}).status_code == 404


def test_bad_server_arguments_are_clear_errors() -> None:
    """The storage and the path are checked when the server is made."""
    with pytest.raises(TypeError, match="storage must be a TusStorage"):
        TusServer({})  # type: ignore[arg-type]  # the wrong type is the test
    with pytest.raises(ValueError, match="absolute URL path"):
        TusServer(path="files")
    with pytest.raises(ValueError, match="max_size"):
        TusStorage(max_size=-1)


def test_fake_domains_share_storage_over_real_sockets(fake_domains: FakeDomainsFixture) -> None:
    """An upload made on the primary is seen by a backup with the same storage, 404 elsewhere,
    and the simulator's faults strike a tus server like any handler."""
    shared = TusStorage()
    fake_domains.add(PRIMARY, TusServer(shared))
    fake_domains.add(BACKUP, TusServer(shared))
    fake_domains.add("api-eu.example.com", TusServer())
    with httpx.Client() as client:
        created = client.post(f"https://{PRIMARY}/files/", headers={**TUS, "Upload-Length": "4"})
        location = created.headers["Location"]
        upload_id = location.rsplit("/", 1)[1]
        on_backup = client.patch(
            f"https://{BACKUP}/files/{upload_id}", content=b"abcd", headers={**PATCH, "Upload-Offset": "0"}
        )
        elsewhere = client.head(f"https://api-eu.example.com/files/{upload_id}", headers=TUS)
        fake_domains.fail(BACKUP, faults.status(503))
        failing = client.head(f"https://{BACKUP}/files/{upload_id}", headers=TUS)
    assert location.startswith(f"https://{PRIMARY}/files/")
    assert on_backup.status_code == 204 and shared.content(location) == b"abcd"
    assert elsewhere.status_code == 404
    assert failing.status_code == 503
