"""Resumable uploads (tus 1.0) that survive a failover: ``TusUpload`` and ``AsyncTusUpload``.

    import httpx
    from pytest_failover import FailoverTransport, Pool
    from pytest_failover.uploads import TusUpload

    transport = FailoverTransport([Pool("files", ["https://api.example.com", "https://api2.example.com"])])
    with httpx.Client(transport=transport) as client:
        url = TusUpload(client, "https://api.example.com/files/", "video.mp4",
                        chunk_size=4 * 1024 * 1024).upload()

The protocol is https://tus.io/protocols/resumable-upload (1.0.0, with the ``creation``
extension): ``POST`` creates the upload, ``PATCH`` appends a chunk at ``Upload-Offset``,
``HEAD`` says how many bytes the server has. No ``OPTIONS`` request is made: a server
without the creation extension answers the ``POST`` with an error, which says so.

**How it survives a failover.** The rules are in ``_protocol.py``; in short, a chunk is
never sent twice blindly. When a ``PATCH`` fails after bytes left (a reset, a timeout,
a 503), the failover transport does not resend it (a ``PATCH`` is not idempotent, and
the uploader says so per request); the uploader asks ``HEAD`` through the transport,
which goes to the next domain of the pool, and sends the next chunk from the offset
that domain reports. A failure before any byte left (DNS, refused, TLS) moves the same
``PATCH`` to the next domain at once. So the servers receive at most the file plus the
chunk in flight when a failure struck.

**The domains of the pool must share the upload storage** (one bucket, one database,
one tusd data store behind every domain): the upload URL one domain created has to
mean the same upload on the next. A backup that does not share it answers ``404`` (or
``410``) for the URL: that is ``UploadNotFoundError``, never a silent restart from byte
0. A backup that reports fewer bytes than were already acknowledged is a
``TusProtocolError`` for the same reason.

**Stickiness keeps it on the backup.** With the policy's default ``sticky=True`` a domain
that failed stays behind the one that works for a cooldown, so one failure costs one
chunk. With ``sticky=False`` the preferred domain is tried again until its breaker
opens, so up to ``breaker_threshold - 1`` further chunks may be lost there.

**Telemetry.** A ``failover.upload`` span per ``upload()`` call, a
``failover.upload.chunk`` child span per ``PATCH`` (the transport's request spans nest
under them), a ``failover.upload.resumed`` event per ``HEAD`` recovery, and the
``failover.upload.bytes`` counter of acknowledged bytes by pool and domain. Progress
also goes to ``on_progress(offset, length)``.

**Why not tuspy.** ``tuspy`` (the tus project's Python client, 1.1) sends every request
with module-level ``requests.post/head/patch`` calls, and its async uploader opens an
``aiohttp.ClientSession`` per request: there is no way to hand it an ``httpx.Client``,
so it cannot go through a ``FailoverTransport`` at all. Its own recovery (``retries``,
0 by default) sleeps ``retry_delay`` (30 s) before asking ``HEAD``, on the same URL;
and it brings ``requests``, ``aiohttp`` and ``tinydb``. The protocol is small enough to speak here,
over the caller's httpx client, sans-I/O so the sync and async uploads share it.
"""

from ._errors import TusError, TusProtocolError, UploadFailedError, UploadNotFoundError
from ._protocol import TUS_VERSION
from ._upload import DEFAULT_CHUNK_SIZE, AsyncTusUpload, Progress, TusUpload

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "TUS_VERSION",
    "AsyncTusUpload",
    "Progress",
    "TusError",
    "TusProtocolError",
    "TusUpload",
    "UploadFailedError",
    "UploadNotFoundError",
]
