"""docs/agent.md documents every configuration key and every metric the agent emits."""

from __future__ import annotations

from pathlib import Path

from failover_agent.config import AgentConfig
from failover_agent.metrics import METRIC_NAMES
from pydantic import BaseModel

DOC = (Path(__file__).resolve().parents[2] / "docs" / "agent.md").read_text()


def _keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, field in model.model_fields.items():
        path = prefix + name + ("[]" if name == "pools" else "")
        out.append(path)
        for arg in (field.annotation, *getattr(field.annotation, "__args__", ())):
            for inner in (arg, *getattr(arg, "__args__", ())):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    out.extend(_keys(inner, path + "."))
    return sorted(set(out))


def test_every_config_key_is_in_the_reference_table() -> None:
    """Each key has its own row, or is listed in its parent's row (``{base, cap, ...}``)."""
    rows = [line for line in DOC[DOC.index("### Reference"):].splitlines() if line.startswith("| `")]
    missing = []
    for full in _keys(AgentConfig):
        # Per-domain probe overrides take the pool's probe keys, documented once.
        key = full.replace("probe.domains.", "probe.").removesuffix("[]")
        parts = key.split(".")
        leaf = parts[-1]
        ancestors = [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]
        if any(f"`{key}`" in row for row in rows):
            continue
        if any(f"`{a}" in row and leaf in row for a in ancestors for row in rows):
            continue
        missing.append(full)
    assert not missing, f"undocumented config keys: {missing}"


def test_every_metric_is_documented() -> None:
    missing = [name for name in METRIC_NAMES if f"`{name}`" not in DOC]
    assert not missing, f"undocumented metrics: {missing}"
