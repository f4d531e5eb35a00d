import httpx
import pytest

from pytest_failover import FailoverTransport, Pool
from pytest_failover.plugin import FakeDomainsFixture
from pytest_failover.telemetry_capture import FailoverTelemetry


@pytest.mark.outage("api.example.com", "dns_nxdomain")
def test_survives_primary_dns_outage(
    fake_domains: FakeDomainsFixture, failover_telemetry: FailoverTelemetry
) -> None:
    fake_domains.add("api2.example.com")
    pool = Pool("api", ["https://api.example.com", "https://api2.example.com"])
    with httpx.Client(transport=FailoverTransport([pool])) as client:
        assert client.get("https://api.example.com/v1/rooms").json()["domain"] == "api2.example.com"
    assert [a.error_type for a in failover_telemetry.attempts()] == ["dns_error", None]
