"""The uploads' tests run on the plugin's own ``fake_domains`` fixture, as a downstream suite would."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import httpx
import pytest

from pytest_failover import AsyncFailoverTransport, FailoverTransport, Policy, Pool
from pytest_failover._plugin_domains import FakeDomainsFixture
from pytest_failover.telemetry_capture import FailoverTelemetry
from pytest_failover.uploads import AsyncTusUpload, TusUpload

PRIMARY = "api.example.com"
BACKUP = "api2.example.com"
CREATE_URL = f"https://{PRIMARY}/files/"
MIB = 1024 * 1024
CHUNK = 256 * 1024


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Uploads:
    """Runs an upload through a failover client of one kind, sync or async, with one call."""

    def __init__(self, kind: str, telemetry: FailoverTelemetry) -> None:
        self.kind = kind
        self.telemetry = telemetry
        self.last: TusUpload | AsyncTusUpload | None = None

    def _providers(self) -> dict[str, Any]:
        return {
            "tracer_provider": self.telemetry.tracer_provider,
            "meter_provider": self.telemetry.meter_provider,
        }

    def run(
        self,
        data: Any,
        *,
        domains: tuple[str, ...] = (PRIMARY, BACKUP),
        policy: Policy | None = None,
        create_url: str = CREATE_URL,
        **kwargs: Any,
    ) -> str:
        """Upload ``data`` (``TusUpload`` keywords in ``kwargs``); returns the upload URL."""
        pools = [Pool("files", [f"https://{host}" for host in domains])]
        if self.kind == "sync":
            transport = FailoverTransport(pools, policy, **self._providers())
            with httpx.Client(transport=transport) as client:
                upload = TusUpload(client, create_url, data, **kwargs, **self._providers())
                self.last = upload
                return upload.upload()

        async def run_async() -> str:
            transport = AsyncFailoverTransport(pools, policy, **self._providers())
            async with httpx.AsyncClient(transport=transport) as client:
                upload = AsyncTusUpload(client, create_url, data, **kwargs, **self._providers())
                self.last = upload
                return await upload.upload()

        return asyncio.run(run_async())


@pytest.fixture(params=["sync", "async"])
def uploads(request: pytest.FixtureRequest, failover_telemetry: FailoverTelemetry) -> Uploads:
    """One test body for TusUpload and AsyncTusUpload (the plugin's telemetry capture)."""
    return Uploads(request.param, failover_telemetry)


@pytest.fixture
def fd(fake_domains: FakeDomainsFixture) -> FakeDomainsFixture:
    """The plugin's fake domains (servers for the session, a clean slate per test)."""
    return fake_domains
