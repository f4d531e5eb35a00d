"""The example stack: Prometheus scrape configs, Collector config, Grafana provisioning, compose."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import DASHBOARDS

STACK = DASHBOARDS / "stack"
PROVISIONING = DASHBOARDS / "provisioning"
AGENT_DEFAULT_LISTEN = "127.0.0.1:9464"  # failover-agent demo --listen default


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", ["prometheus.yml", "prometheus-collector.yml"])
def test_promtool_check_config(name: str, promtool: str) -> None:
    """`promtool check config` accepts the scrape config and the rules it loads (the alerts, the
    demo's SLO rules)."""
    result = subprocess.run(
        [promtool, "check", "config", name], cwd=STACK, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 2 rule files found" in result.stdout + result.stderr


def _targets(config: dict[str, Any]) -> dict[str, list[str]]:
    return {
        job["job_name"]: [t for static in job["static_configs"] for t in static["targets"]]
        for job in config["scrape_configs"]
    }


def test_scrape_configs_point_at_the_agent_and_the_collector() -> None:
    """Direct scraping targets the agent's default listener; the other config the Collector's exporter."""
    direct = load(STACK / "prometheus.yml")
    assert _targets(direct) == {"failover-agent": [AGENT_DEFAULT_LISTEN]}
    assert (STACK / direct["rule_files"][0]).resolve() == DASHBOARDS / "alerts.yml"
    collector = load(STACK / "otel-collector.yaml")
    via = load(STACK / "prometheus-collector.yml")
    assert _targets(via) == {"otel-collector": [collector["exporters"]["prometheus"]["endpoint"]]}


def test_collector_config_receives_otlp_and_exports_prometheus() -> None:
    """OTLP gRPC and HTTP in on loopback, Prometheus exporter out; every pipeline names defined parts."""
    config = load(STACK / "otel-collector.yaml")
    protocols = config["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"] == "127.0.0.1:4317"
    assert protocols["http"]["endpoint"] == "127.0.0.1:4318"
    assert config["exporters"]["prometheus"]["endpoint"].startswith("127.0.0.1:")
    pipelines = config["service"]["pipelines"]
    assert pipelines["metrics"]["exporters"] == ["prometheus"]
    for name, pipeline in pipelines.items():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in config[kind], f"pipeline {name}: {kind[:-1]} {component} is not defined"


def test_grafana_provisioning_matches_the_compose_mounts() -> None:
    """The file provider reads where compose mounts dashboards/; the data source is Prometheus."""
    providers = load(PROVISIONING / "dashboards" / "failover.yaml")
    assert providers["apiVersion"] == 1
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    datasources = load(PROVISIONING / "datasources" / "prometheus.yaml")
    (source,) = datasources["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://localhost:9090"

    compose = load(STACK / "compose.yaml")["services"]
    grafana_mounts = dict(volume.rsplit(":", 1)[0].split(":", 1) for volume in compose["grafana"]["volumes"])
    mounted = {target: (STACK / source_dir).resolve() for source_dir, target in grafana_mounts.items()}
    assert mounted[provider["options"]["path"]] == DASHBOARDS
    assert mounted["/etc/grafana/provisioning"] == PROVISIONING
    assert "--web.listen-address=127.0.0.1:9090" in compose["prometheus"]["command"]
    for name in ("failover-overview.json", "backup-readiness.json"):
        assert (DASHBOARDS / name).exists()
