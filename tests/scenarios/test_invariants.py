"""A rolling outage across three domains: every kind of fault, changing under load."""

from __future__ import annotations

import pytest

from benchmarks.scenarios._clients import Client
from benchmarks.scenarios._run import Env
from benchmarks.scenarios._scenarios import SMALL, rolling

from ._support import explain, invariants

# Timed against the targets: run by themselves, after the rest (see tests/conftest.py)
pytestmark = pytest.mark.alone


def test_only_the_library_s_errors_escape_and_every_attempt_is_accounted_for(env: Env, client: Client) -> None:
    """Through refused, NXDOMAIN, 503 and recovering domains, nothing but the client library's
    own errors reaches the caller, and the attempts the client reports are the ones the
    network layer under it sent and the servers saw."""
    outcome = rolling(env, client, sizes=SMALL).outcome
    problems = invariants(outcome)
    assert not problems, explain(outcome, problems)
