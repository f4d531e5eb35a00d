"""What the agent serves at /control.json verifies with a stock JOSE library and the key file, and nothing else."""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from failover_agent.config import AgentConfig, parse_config
from failover_agent.control_writer import ControlWriter
from failover_agent.server import start_server
from failover_agent.state import AgentState
from joserfc import jws
from joserfc.errors import BadSignatureError, JoseError, SecurityWarning
from joserfc.jwk import OctKey, OKPKey

from pytest_failover import FailoverTransport, Pool
from pytest_failover.control import ControlPoller, generate_key, load_key, save_key

API = ["https://api.example.com", "https://api2.example.com"]


@contextmanager
def quiet() -> Iterator[None]:
    """Silence joserfc's note that RFC 9864 renamed EdDSA (the name every library still verifies)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)
        yield


@dataclass
class _ServedAgent:
    """Just enough of the agent for its HTTP listener: the config and the latest document."""

    config: AgentConfig
    writer: ControlWriter
    state: AgentState

    def control_document(self) -> bytes | None:
        return self.state.control.document if self.state.control is not None else None


@asynccontextmanager
async def agent_serving(tmp_path: Path, alg: str) -> AsyncIterator[tuple[str, Path]]:
    """The agent's own listener serving a document its ControlWriter signed; yields the URL and the reader's key file."""
    key = generate_key(alg, kid=f"{alg.lower()}-test")
    save_key(tmp_path / "control.key", key, private=True)
    reader = tmp_path / "control.key"
    if alg == "EdDSA":
        reader = save_key(tmp_path / "control.pub.jwk", key.public(), private=False)
    config = parse_config(
        {
            "pools": [{"name": "api", "domains": API}],
            "control": {"signing_key_file": tmp_path / "control.key", "interval": 1.0, "expires_in": 60.0},
        }
    )
    assert config.control is not None
    state = AgentState(location="test")
    writer = ControlWriter(config.control, config.pools)
    writer.update(state)
    served = _ServedAgent(config, writer, state)
    runner, (host, port) = await start_server(cast(Any, served), "127.0.0.1:0")  # the listener reads only these
    try:
        yield f"http://{host}:{port}/control.json", reader
    finally:
        await runner.cleanup()


async def fetch(url: str) -> bytes:
    """The body at ``url``, with no project code involved."""
    async with httpx.AsyncClient(trust_env=False) as client:
        response = await client.get(url)
    assert response.status_code == 200
    return response.content


async def test_the_document_is_served_as_application_jose(tmp_path: Path) -> None:
    """/control.json is a JWS compact serialization, so it is served as RFC 7515's
    application/jose (not JSON: json.load fails on it), never cached."""
    async with agent_serving(tmp_path, "HS256") as (url, _), httpx.AsyncClient(trust_env=False) as client:
        response = await client.get(url)
    assert response.status_code == 200
    assert (response.headers["content-type"], response.headers["cache-control"]) == ("application/jose", "no-store")
    assert response.content.count(b".") == 2 and not response.content.startswith(b"{")


@pytest.mark.parametrize("alg", ["EdDSA", "HS256"])
async def test_joserfc_alone_verifies_the_served_document(tmp_path: Path, alg: str) -> None:
    """joserfc, given only the key file's JSON, verifies /control.json and reads the documented claims."""
    async with agent_serving(tmp_path, alg) as (url, key_file):
        raw = await fetch(url)
    jwk = json.loads(key_file.read_text())
    key: OKPKey | OctKey = OKPKey.import_key(jwk) if alg == "EdDSA" else OctKey.import_key(jwk)
    with quiet():
        token = jws.deserialize_compact(raw, key, algorithms=[alg])
    assert token.headers() == {"alg": alg, "kid": jwk["kid"], "typ": "failover-control+jwt"}
    claims = json.loads(token.payload)
    assert set(claims) == {"exp", "iat", "pools", "version"}
    assert claims["pools"] == {"api": {"disabled": []}}
    assert claims["iat"] <= time.time() < claims["exp"]
    # ... and nothing else verifies it: another key of the kind, or the other algorithm
    stranger = generate_key(alg)
    other = stranger.public() if alg == "EdDSA" else stranger
    with pytest.raises(BadSignatureError), quiet():
        jws.deserialize_compact(raw, other.jose_key(private=False), algorithms=[alg])
    confused: OKPKey | OctKey = (
        OctKey.import_key(key_file.read_bytes()) if alg == "EdDSA" else generate_key("EdDSA").jose_key(private=False)
    )
    with pytest.raises(JoseError), quiet():
        jws.deserialize_compact(raw, confused, algorithms=["HS256" if alg == "EdDSA" else "EdDSA"])


@pytest.mark.parametrize("alg", ["EdDSA", "HS256"])
async def test_pyjwt_verifies_the_served_document(tmp_path: Path, alg: str) -> None:
    """PyJWT, if installed, verifies /control.json with the key file's JWK and checks exp and iat itself."""
    jwt = pytest.importorskip("jwt")  # not a dependency: only run where it happens to be installed
    async with agent_serving(tmp_path, alg) as (url, key_file):
        raw = await fetch(url)
    key = jwt.PyJWK(json.loads(key_file.read_text()))
    claims = jwt.decode(raw, key.key, algorithms=[alg], options={"require": ["exp", "iat"]})
    assert claims["pools"] == {"api": {"disabled": []}}
    assert jwt.get_unverified_header(raw)["typ"] == "failover-control+jwt"


async def test_the_poller_applies_the_served_document_with_the_same_key_file(tmp_path: Path) -> None:
    """A client given the agent's key file (HS256: the very same file) applies what the agent serves."""
    async with agent_serving(tmp_path, "HS256") as (url, key_file):
        transport = FailoverTransport([Pool("api", API)])
        poller = ControlPoller(url, transport, key=load_key(key_file))
        try:
            assert await poller.poll_once_async() is True
            assert await asyncio.to_thread(poller.poll_once) is False  # the same document: unchanged
        finally:
            await poller.aclose()
            poller.stop()
    assert poller.last_error is None
    assert transport.state().control_version == poller.version
