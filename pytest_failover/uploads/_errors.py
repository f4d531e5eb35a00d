"""The uploader's exceptions.

::

    TusError                      .url (None before creation), .offset (bytes the server has)
     ├── TusProtocolError         the server refused or broke the protocol (.status)
     │    └── UploadNotFoundError 404/410 for the upload URL: the domain that answered does
     │                            not share the upload storage (or the upload expired)
     └── UploadFailedError        every domain failed, or too many chunks failed in a row;
                                  the last error is chained as ``__cause__``

Each carries what is needed to resume later: ``TusUpload(..., upload_url=err.url)``, or
call ``upload()`` again on the same object (it asks ``HEAD`` first).
"""

from __future__ import annotations

__all__ = ["TusError", "TusProtocolError", "UploadFailedError", "UploadNotFoundError"]


class TusError(Exception):
    """Base class: the upload stopped. ``url`` and ``offset`` say where it stands."""

    def __init__(self, message: str, *, url: str | None, offset: int) -> None:
        super().__init__(message)
        self.url = url
        self.offset = offset


class TusProtocolError(TusError):
    """The server's answer refused the upload or did not follow tus 1.0."""

    def __init__(self, message: str, *, url: str | None, offset: int, status: int | None) -> None:
        super().__init__(message, url=url, offset=offset)
        self.status = status


class UploadNotFoundError(TusProtocolError):
    """The domain that answered does not know the upload (404 or 410).

    Across a failover this means the backup does not share the upload storage: the
    uploader does not silently start again from byte 0.
    """

    def __init__(
        self, message: str, *, url: str | None, offset: int, status: int, domain: str | None
    ) -> None:
        super().__init__(message, url=url, offset=offset, status=status)
        self.domain = domain


class UploadFailedError(TusError):
    """The upload could not go on: every domain failed, or chunks kept failing."""
