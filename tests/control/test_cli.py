"""``failover-agent control keygen | sign | verify`` through click's CliRunner."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from failover_agent.cli import main

from pytest_failover.control import ControlDocument, load_key

from .conftest import NOW

DOC = {"version": 8, "pools": {"api": {"disabled": ["https://api.example.com"]}}}


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """A CliRunner working in an empty temporary directory."""
    monkeypatch.chdir(tmp_path)
    return CliRunner()


def test_control_is_a_command_group(runner: CliRunner) -> None:
    """``failover-agent control --help`` lists keygen, sign and verify."""
    result = runner.invoke(main, ["control", "--help"])
    assert result.exit_code == 0, result.output
    for name in ("keygen", "sign", "verify"):
        assert name in result.output


def test_keygen_eddsa_writes_both_files_and_prints_the_public_key(runner: CliRunner, tmp_path: Path) -> None:
    """EdDSA keygen writes control.key (0600) and control.pub.jwk, and prints the public JWK."""
    result = runner.invoke(main, ["control", "keygen", "--kid", "2026-11"])
    assert result.exit_code == 0, result.output
    private, public = load_key(tmp_path / "control.key"), load_key(tmp_path / "control.pub.jwk")
    assert private.can_sign and not public.can_sign
    assert public == private.public()
    assert private.kid == "2026-11"
    assert stat.S_IMODE(os.stat(tmp_path / "control.key").st_mode) == 0o600
    printed = json.loads(result.stdout)
    assert printed == json.loads((tmp_path / "control.pub.jwk").read_text())
    assert "d" not in printed
    assert "control.pub.jwk" in result.stderr


def test_keygen_hs256_writes_one_secret(runner: CliRunner, tmp_path: Path) -> None:
    """HS256 keygen writes one secret file, prints no secret, and says both sides need it."""
    result = runner.invoke(main, ["control", "keygen", "--alg", "HS256", "-o", "shared.key"])
    assert result.exit_code == 0, result.output
    key = load_key(tmp_path / "shared.key")
    assert key.alg == "HS256"
    assert result.stdout == ""
    assert "every client need this same file" in result.stderr
    assert not (tmp_path / "shared.pub.jwk").exists()


def test_keygen_keeps_existing_keys(runner: CliRunner, tmp_path: Path) -> None:
    """keygen refuses to replace a key file unless --force is given."""
    assert runner.invoke(main, ["control", "keygen"]).exit_code == 0
    before = (tmp_path / "control.key").read_bytes()
    result = runner.invoke(main, ["control", "keygen"])
    assert result.exit_code == 1
    assert "exists; pass --force" in result.output
    assert (tmp_path / "control.key").read_bytes() == before
    assert runner.invoke(main, ["control", "keygen", "--force"]).exit_code == 0
    assert (tmp_path / "control.key").read_bytes() != before


@pytest.mark.parametrize("alg", ["EdDSA", "HS256"])
def test_sign_then_verify_round_trip(runner: CliRunner, tmp_path: Path, alg: str) -> None:
    """A document signed with keygen's key verifies with the reader's key file and prints its payload."""
    assert runner.invoke(main, ["control", "keygen", "--alg", alg]).exit_code == 0
    reader = "control.pub.jwk" if alg == "EdDSA" else "control.key"
    (tmp_path / "doc.json").write_text(json.dumps(DOC))
    signed = runner.invoke(main, ["control", "sign", "doc.json", "--key", "control.key", "-o", "control.jws"])
    assert signed.exit_code == 0, signed.output
    raw = (tmp_path / "control.jws").read_bytes()
    assert raw.count(b".") == 2 and not raw.endswith(b"\n")
    doc = ControlDocument.parse(raw, key=load_key(tmp_path / reader))
    assert doc.version == 8 and doc.disabled["api"] == frozenset({"https://api.example.com"})
    assert doc.expires_at - doc.issued_at == 3600
    verified = runner.invoke(main, ["control", "verify", "control.jws", "--key", reader])
    assert verified.exit_code == 0, verified.output
    assert json.loads(verified.stdout) == doc.claims()


def test_sign_reads_stdin_writes_stdout_and_keeps_given_times(runner: CliRunner, tmp_path: Path) -> None:
    """'-' reads the document from stdin; iat and exp in it are kept; piped output is the exact JWS."""
    assert runner.invoke(main, ["control", "keygen", "--alg", "HS256"]).exit_code == 0
    document = json.dumps({**DOC, "iat": NOW, "exp": NOW + 90})
    signed = runner.invoke(main, ["control", "sign", "-", "--key", "control.key"], input=document)
    assert signed.exit_code == 0, signed.output
    doc = ControlDocument.parse(signed.stdout.encode(), key=load_key(tmp_path / "control.key"), now=NOW)
    assert (doc.issued_at, doc.expires_at) == (NOW, NOW + 90)
    verified = runner.invoke(
        main, ["control", "verify", "-", "--key", "control.key", "--now", str(NOW)], input=signed.stdout
    )
    assert verified.exit_code == 0, verified.output


def test_verify_explains_a_refusal(runner: CliRunner, tmp_path: Path) -> None:
    """A document another key (same kid) signed, an expired one, or a stray newline: exit 1 and the reason."""
    assert runner.invoke(main, ["control", "keygen", "-o", "a.key", "--kid", "k"]).exit_code == 0
    assert runner.invoke(main, ["control", "keygen", "-o", "b.key", "--kid", "k"]).exit_code == 0
    (tmp_path / "doc.json").write_text(json.dumps(DOC))
    assert runner.invoke(main, ["control", "sign", "doc.json", "-k", "a.key", "-o", "doc.jws"]).exit_code == 0
    cases = [
        (["--key", "b.pub.jwk"], "refused (bad_signature)"),
        (["--key", "a.pub.jwk", "--now", str(time.time() + 7200)], "refused (expired)"),
        (["--key", "b.pub.jwk", "--key", "a.pub.jwk"], None),  # a rotation: either key may have signed
    ]
    for options, words in cases:
        result = runner.invoke(main, ["control", "verify", "doc.jws", *options])
        if words is None:
            assert result.exit_code == 0, result.output
        else:
            assert result.exit_code == 1
            assert words in result.output
    (tmp_path / "nl.jws").write_bytes((tmp_path / "doc.jws").read_bytes() + b"\n")
    result = runner.invoke(main, ["control", "verify", "nl.jws", "--key", "a.pub.jwk"])
    assert result.exit_code == 1
    assert "refused (malformed)" in result.output and "trailing newline" in result.output


def test_verify_and_sign_refuse_bad_keys_and_documents(runner: CliRunner, tmp_path: Path) -> None:
    """A PEM key, a public key to sign with, or an invalid document each fail with a clear message."""
    assert runner.invoke(main, ["control", "keygen"]).exit_code == 0
    (tmp_path / "old.pem").write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    (tmp_path / "doc.json").write_text(json.dumps(DOC))
    (tmp_path / "bad.json").write_text(json.dumps({**DOC, "version": 2**63}))
    cases = [
        (["sign", "doc.json", "--key", "old.pem"], "PEM file, not a JWK"),
        (["sign", "doc.json", "--key", "control.pub.jwk"], "cannot sign"),
        (["sign", "bad.json", "--key", "control.key"], "(reason: out_of_range)"),
        (["sign", "control.key", "--key", "control.key"], "(reason: missing_field)"),
        (["verify", "doc.json", "--key", "control.key"], "refused (malformed)"),
    ]
    for args, words in cases:
        result = runner.invoke(main, ["control", *args])
        assert result.exit_code == 1, (args, result.output)
        assert words in result.output, (args, result.output)
