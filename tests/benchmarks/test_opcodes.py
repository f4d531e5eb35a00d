"""The library's own work per happy-path request, in Python opcodes (``python -m benchmarks
opcodes``): held under a ceiling per variant. A count, not a timing: the same on every run
and every machine with the same Python, so the ceilings have no slack for noise.

Each ceiling is the count measured when it was set, plus 5 opcodes. Issue 27 rebuilds the
request path to half its work (target: httpx sync <= 750); lower a ceiling as each step
lands, so that the work it removed cannot creep back.
"""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

import pytest_failover
from benchmarks import _harness as h
from benchmarks import opcodes

CEILINGS = {  # measured when responses were classified by a look-up and attempts reported at C level: 1,137 / 1,197 / 1,430 / 1,465 / 1,487 / 1,137
    opcodes.HTTPX_SYNC: 1_142,  # issue 27's target: 750
    opcodes.HTTPX_ASYNC: 1_202,
    opcodes.HEDGING: 1_435,
    opcodes.REQUESTS_ADAPTER: 1_470,
    opcodes.AIOHTTP: 1_492,
    opcodes.HTTPX2_SYNC: 1_142,
}


MEASURED_ON = (3, 11)  # opcodes differ from one CPython minor version to the next


@pytest.fixture(scope="module")
def counts() -> dict[str, opcodes.Count]:
    return opcodes.measure_in_fresh_process()


def on_the_measured_python() -> None:
    if (sys.implementation.name, sys.version_info[:2]) != ("cpython", MEASURED_ON):
        pytest.skip(f"the ceilings were measured on CPython {MEASURED_ON}: add this version's own")


def test_every_variant_has_a_ceiling(counts: dict[str, opcodes.Count]) -> None:
    """The benchmark measures exactly the variants that have a ceiling."""
    assert set(counts) == set(CEILINGS) == set(opcodes.VARIANTS)


@pytest.mark.parametrize("variant", list(CEILINGS))
def test_a_happy_path_request_stays_under_its_opcode_ceiling(counts: dict[str, opcodes.Count], variant: str) -> None:
    """One happy-path request runs no more of the library's opcodes than its ceiling."""
    on_the_measured_python()
    count = counts[variant]
    by_module = ", ".join(f"{m} {count.module_per_request(m):.0f}" for m in count.modules)
    assert count.per_request <= CEILINGS[variant], (
        f"{variant}: {count.per_request:,.1f} opcodes per request over the ceiling of {CEILINGS[variant]:,} "
        f"({count.calls_per_request:.1f} calls; {by_module}). If the new work is meant, raise the "
        "ceiling in tests/benchmarks/test_opcodes.py and say why in the commit."
    )


def test_the_count_is_the_same_in_another_process(counts: dict[str, opcodes.Count]) -> None:
    """A second interpreter (another hash seed, another clock reading) counts the same opcodes,
    calls and modules."""
    assert opcodes.measure_in_fresh_process() == counts


def test_only_the_package_frames_are_counted_once_per_call() -> None:
    """Calls into the package count in proportion to how many there are; work outside it counts
    nothing."""
    error = httpx.ConnectError("refused")

    def ours(n: int) -> None:
        for _ in range(n):
            pytest_failover.error_type_of(error)

    def theirs(n: int) -> None:
        for _ in range(n):
            httpx.URL("http://127.0.0.1:9/")

    ours(1)  # the first call looks its names up
    one, three = opcodes.count_opcodes(ours, 1), opcodes.count_opcodes(ours, 3)
    assert one.opcodes > 0 and one.calls >= 1
    assert (three.opcodes, three.calls) == (3 * one.opcodes, 3 * one.calls)
    assert set(three.modules) == {"_classify"}
    none = opcodes.count_opcodes(theirs, 3)
    assert (none.opcodes, none.calls, none.modules) == (0, 0, {})


def test_counting_refuses_a_process_with_an_sdk_installed() -> None:
    """With an OpenTelemetry SDK installed the library does its telemetry, so the no-SDK figures
    cannot be counted in that process (a fresh one is the way)."""
    code = (
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "trace.set_tracer_provider(TracerProvider())\n"
        "from benchmarks.opcodes import measure\n"
        "measure(requests=1, warmup=1)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=h.ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "an OpenTelemetry SDK is installed in this process" in done.stderr
