import httpx
import pytest

from pytest_failover import FailoverTransport, Pool


@pytest.mark.outage("api.example.com", "dns_nxdomain")
def test_survives_primary_dns_outage(fake_domains, failover_telemetry):
    fake_domains.add("api2.example.com")
    pool = Pool("api", ["https://api.example.com", "https://api2.example.com"])
    with httpx.Client(transport=FailoverTransport([pool])) as client:
        assert client.get("https://api.example.com/v1/rooms").json()["domain"] == "api2.example.com"
    assert [a.error_type for a in failover_telemetry.attempts()] == ["dns_error", None]
