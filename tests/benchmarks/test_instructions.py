"""The instructions benchmark (``python -m benchmarks instructions``): every instruction the
CPU runs for a request, under valgrind, so a ceiling can hold the whole cost (C work
included) and not only the library's Python.

Needs valgrind (CI installs it). The counts depend on the interpreter's build as well as
its version, so the ceiling is loose enough for another build of the same CPython minor
version, and tight enough to catch a request path that does a quarter more work.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from benchmarks import instructions, opcodes

# The CPythons on which the ceilings below were checked: each is a comparison with bare httpx
# on the same interpreter, which held on each (session 30, 20 and 60 requests, instructions
# and objects a request: 3.11.7 -26.8k and -42, 3.12.1 -29.9k and -31, 3.13.0 -27.8k and -35).
MEASURED_ON = {(3, 11), (3, 12), (3, 13)}
# httpx sync added 70k to 73k to bare httpx's 1,415k (1.05x) when the benchmark was added;
# since the transport hands a body it read whole over as its content (``Lane.read_whole``),
# sparing the client's second read, it runs 20k fewer than bare httpx (0.986x, 20 and 60
# requests after the warm-up). The ceiling: no more than bare httpx (the issue 27 target is 1.03x).
ADDED_CEILING = 0
# The objects a request makes (calls of CPython's ``_Py_NewReference``, in the same runs):
# bare httpx 1,273, with the transport 1,236 (the client's second read is spared). The
# ceiling: no more than bare httpx.
OBJECTS_ADDED_CEILING = 0


def test_a_happy_path_request_adds_instructions_under_the_ceiling() -> None:
    if sys.implementation.name != "cpython" or sys.version_info[:2] not in MEASURED_ON:
        pytest.skip(f"the ceiling was checked on CPython {sorted(MEASURED_ON)} only")
    if shutil.which("valgrind") is None:  # a skip fails CI's run (tests/conftest.py), which installs it
        pytest.skip("needs valgrind: apt-get install valgrind")
    (pair,) = instructions.measure({opcodes.HTTPX_SYNC: opcodes.BARE_HTTPX}, few=20, many=60)
    # a request through httpx and httpcore, counted, with and without the transport
    assert pair.bare_per_request > 500_000 and pair.failover_per_request > 500_000
    assert pair.added <= ADDED_CEILING, (
        f"httpx sync adds {pair.added:,.0f} instructions a request to bare httpx's "
        f"{pair.bare_per_request:,.0f} ({pair.ratio:.3f}x), over the ceiling of {ADDED_CEILING:,}"
    )
    # a request through httpx makes objects by the hundred: its URL, headers, response...
    assert pair.bare_objects > 500 and pair.failover_objects > 500
    objects_added = pair.failover_objects - pair.bare_objects
    assert objects_added <= OBJECTS_ADDED_CEILING, (
        f"httpx sync makes {objects_added:+,.0f} objects a request beside bare httpx's "
        f"{pair.bare_objects:,.0f}, over the ceiling of {OBJECTS_ADDED_CEILING:+,}"
    )


# A callgrind profile as valgrind 3.19 writes it (names compressed: given once, then their
# number alone): two callers make 3 and 4 objects, a third function is called 5 times.
_PROFILE = """\
fn=(1) main
cfn=(2) _Py_NewReference
calls=3 0x1
0x1 30
cfn=(3) PyDict_New
calls=5 0x2
0x2 50
fn=(4) tuple_alloc
cfn=(2)
calls=4 0x3
0x3 40
summary: 170
"""


def test_the_objects_made_are_the_calls_of_the_function_every_new_object_passes() -> None:
    assert instructions.objects_made(_PROFILE) == 7
    assert instructions.objects_made(_PROFILE.replace("_Py_NewReference", "_Py_Other")) == 0


def test_the_counts_need_more_requests_than_fewer() -> None:
    with pytest.raises(ValueError, match="few < many"):
        instructions.per_request(opcodes.BARE_HTTPX, few=60, many=60)


def test_without_valgrind_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(instructions.ValgrindMissing, match="apt-get install valgrind"):
        instructions.total_instructions(opcodes.BARE_HTTPX, 1)


def test_a_child_that_fails_says_why() -> None:
    if shutil.which("valgrind") is None:  # a skip fails CI's run (tests/conftest.py), which installs it
        pytest.skip("needs valgrind: apt-get install valgrind")
    with pytest.raises(RuntimeError, match=r"(?s)never said 'ready'.*KeyError: 'no such variant'"):
        instructions.totals("no such variant", 2, warmup=1)


def test_the_child_is_heard_past_its_other_lines() -> None:
    """Lines before the word, written at once with it, are passed over (a read that waited
    for more once the word sat in the pipe's buffer hung until the child's time was out)."""
    script = "import sys; sys.stdout.write('a warning\\nready\\n'); sys.stdout.flush(); sys.stdin.readline()"
    with subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as child:  # fmt: skip
        instructions._expect(child, "ready")
        instructions._say(child)
    assert child.returncode == 0


def test_a_child_past_its_time_is_killed_and_says_so() -> None:
    if shutil.which("valgrind") is None:  # a skip fails CI's run (tests/conftest.py), which installs it
        pytest.skip("needs valgrind: apt-get install valgrind")
    with pytest.raises(RuntimeError, match=r"never said 'ready' \(exit status -9\)"):
        instructions.totals(opcodes.HTTPX_SYNC, 2, warmup=1, timeout=0.5)  # its start-up alone takes seconds


@pytest.mark.parametrize(
    "variant", [instructions.IN_PROCESS, instructions.BARE_IN_PROCESS, instructions.IN_PROCESS_FILED]
)
def test_the_in_process_variants_are_answered_in_process(variant: str) -> None:
    """Each in-process client sends its requests (no valgrind here: what it would count),
    the filing commit's under that commit's package."""
    with instructions._BUILD[variant](3) as send:
        send(3)
    if variant == instructions.IN_PROCESS_FILED:
        assert f"pytest_failover_at_{instructions.FILED}" in " ".join(sys.modules)
