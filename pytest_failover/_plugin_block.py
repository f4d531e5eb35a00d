"""``--failover-block-unknown-hosts``: a test can never reach the internet by accident.

With the option (or ini ``failover_block_unknown_hosts = true``), every test runs
inside the session's fake-domain interception with ``block_unknown_hosts`` on,
whether it uses ``fake_domains`` or not: a lookup of, or a connect to, any host
that is neither a registered fake domain nor loopback raises
``pytest_failover.simulator.BlockedHostError``. That error is deliberately not
an ``OSError``, so clients do not turn it into an ordinary connection error and
a failover client does not quietly move on. Because application code may still
swallow it, the test also errors at teardown, listing what it tried to reach.

Clients that resolve behind the socket module's back (aiohttp with aiodns,
uvloop) raise ``UnsupportedClientError`` instead of reaching the network.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ._plugin_domains import SessionDomains

__all__ = ["UnknownHostBlocker"]


class UnknownHostBlocker:
    """A plugin object registered by ``pytest_configure`` when the option is on."""

    def __init__(self, session_domains: Callable[[], SessionDomains]) -> None:
        self._session_domains = session_domains

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        self._session_domains().begin_test()
        return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, None, None]:
        session = self._session_domains()
        try:
            return (yield)
        finally:
            blocked = session.blocked
            session.end_test()
            if blocked:
                tried = "\n".join(f"  {what}" for what in dict.fromkeys(blocked))
                pytest.fail(
                    f"{item.nodeid} tried to reach hosts that --failover-block-unknown-hosts "
                    f"(ini failover_block_unknown_hosts) refuses:\n{tried}\n"
                    "Register each with fake_domains.add(host) (or mark the test "
                    "@pytest.mark.outage(host, ...)), or point the code under test at a fake domain.",
                    pytrace=False,
                )
