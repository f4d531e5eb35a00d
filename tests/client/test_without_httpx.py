"""The package depends on no HTTP library: with only httpx2 installed (what the OpenAI 3.x
and Anthropic 2.x SDKs bring), the httpx2 transport, a DoH resolver and the control poller
work, over real sockets and TLS, and the httpx transport says what to install. Run in a
fresh interpreter in which ``import httpx`` fails (``without_httpx_check.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHECK = Path(__file__).with_name("without_httpx_check.py")


def test_a_process_without_httpx_fails_over_resolves_and_polls_with_httpx2() -> None:
    code = f"import runpy, sys; sys.modules['httpx'] = None; runpy.run_path({str(CHECK)!r}, run_name='__main__')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "resolved by DoH: api.test",
        "failed over to: api2.test",
        "control polled: True False",  # the document disabled api2.test
        "httpx transport: pytest_failover.FailoverTransport needs httpx: pip install 'pytest-failover[httpx]' "
        "(with httpx2: from pytest_failover.httpx2 import FailoverTransport)",
        "httpx imported: False",
    ]


def test_without_any_http_library_the_clients_of_the_package_say_what_to_install() -> None:
    code = (
        "import sys; sys.modules['httpx'] = sys.modules['httpx2'] = None\n"
        "import pytest_failover\n"
        "try:\n    import pytest_failover.resolve\nexcept ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "pip install 'pytest-failover[httpx]' (or 'pytest-failover[httpx2]')" in out.stdout
