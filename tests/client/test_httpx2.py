"""The httpx2 front-end (``pytest_failover.httpx2``): its face, its errors, and that it
never needs httpx.

Its behaviour is tested with httpx's, by the parametrised suites (the ``httpx2`` and
``httpx2-async`` kinds of ``make_client``); this file holds what only httpx2 has.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
from typing import assert_type

import httpx
import httpx2
import pytest

import pytest_failover
from pytest_failover import Pool
from pytest_failover import httpx2 as pf2
from pytest_failover._classify import ERROR_TYPES, PRE_SEND, error_type_of

from .servers import LoopbackServer, closed_port


def test_the_transports_and_errors_are_httpx2_ones() -> None:
    """The transports are httpx2's base transports and their errors httpx2's transport
    errors (and not httpx's), each also the library-neutral failover error."""
    assert issubclass(pf2.FailoverTransport, httpx2.BaseTransport)
    assert issubclass(pf2.AsyncFailoverTransport, httpx2.AsyncBaseTransport)
    assert not issubclass(pf2.FailoverTransport, httpx.BaseTransport)
    for error in (pf2.FailoverError, pf2.AllDomainsFailed, pf2.CircuitOpenError):
        assert issubclass(error, httpx2.TransportError)
        assert not issubclass(error, httpx.TransportError)
    assert issubclass(pf2.AllDomainsFailed, pf2.FailoverError)
    assert issubclass(pf2.CircuitOpenError, pf2.FailoverError)
    assert sorted(pf2.__all__) == [
        "AllDomainsFailed", "AsyncFailoverTransport", "CircuitOpenError", "FailoverError", "FailoverTransport",
    ]


def test_the_constructors_take_the_same_arguments_as_httpxs() -> None:
    """One signature for both libraries (written once): only the inner transport's type differs."""
    for ours, theirs in ((pf2.FailoverTransport, pytest_failover.FailoverTransport),
                         (pf2.AsyncFailoverTransport, pytest_failover.AsyncFailoverTransport)):
        assert list(inspect.signature(ours).parameters) == list(inspect.signature(theirs).parameters)
        assert "clock" in inspect.signature(ours).parameters


def test_an_httpx2_mock_transport_inside_fails_over(servers: object) -> None:
    """The issue's new user: an httpx2 client over the transport over httpx2's MockTransport."""
    seen: list[str] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(str(request.url))
        return httpx2.Response(503 if request.url.host == "api.example.com" else 200, json={"ok": True})

    transport = pf2.FailoverTransport(
        [Pool("api", ["https://api.example.com", "https://api2.example.com"])],
        transport=httpx2.MockTransport(answer),
    )
    with httpx2.Client(transport=transport) as client:
        response = client.get("https://api.example.com/v1/rooms")
    assert response.status_code == 200 and response.json() == {"ok": True}
    assert seen == ["https://api.example.com/v1/rooms", "https://api2.example.com/v1/rooms"]
    assert response.extensions["failover"].domain == "https://api2.example.com"


def test_a_fallback_answering_in_the_other_library_is_a_clear_error() -> None:
    """A fallback that builds an httpx response for the httpx2 transport is told so (it
    was "the fallback returned an awaitable")."""

    def fallback(request: httpx2.Request, error: Exception) -> httpx.Response:
        return httpx.Response(200)

    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    transport = pf2.FailoverTransport(
        [Pool("api", ["https://api.example.com"])],
        pytest_failover.Policy(schedule=pytest_failover.ExponentialBackoff(base=0.001, cap=0.01, max_attempts=1)),
        transport=httpx2.MockTransport(refuse),
        fallback=fallback,
    )
    with httpx2.Client(transport=transport) as client, pytest.raises(TypeError, match=r"not a httpx2\.Response"):
        client.get("https://api.example.com/")


def test_every_failed_request_raises_the_httpx2_error() -> None:
    """Every domain refusing: httpx2's AllDomainsFailed, its cause the last attempt's
    httpx2 ConnectError, each attempt's error type the precise one."""
    dead = f"http://127.0.0.1:{closed_port()}"
    policy = pytest_failover.Policy(schedule=pytest_failover.ExponentialBackoff(base=0.001, cap=0.01, max_attempts=2))
    client = httpx2.Client(transport=pf2.FailoverTransport([Pool("api", [dead])], policy))
    with client, pytest.raises(pf2.AllDomainsFailed) as caught:
        client.get(dead + "/x")
    assert isinstance(caught.value.__cause__, httpx2.ConnectError)
    assert [a.error_type for a in caught.value.attempts] == ["connection_refused"] * 2


def _exception_classes(module: object) -> dict[str, list[str]]:
    """Each exception class a library exports, with the names of its ancestors up to Exception."""
    found: dict[str, list[str]] = {}
    for name in dir(module):
        value = getattr(module, name)
        if isinstance(value, type) and issubclass(value, Exception):
            found[name] = [c.__name__ for c in value.__mro__ if c.__module__.partition(".")[0] == module.__name__]  # type: ignore[attr-defined]  # a module
    return found


def test_httpx_and_httpx2_name_their_exceptions_alike() -> None:
    """Classification reads exception class names along the MRO: every exception class of
    httpx has the same name and ancestry in httpx2, and each name the table uses is one."""
    ours, theirs = _exception_classes(httpx), _exception_classes(httpx2)
    assert len(ours) >= 25
    assert {name: theirs.get(name) for name in ours} == ours
    assert set(ERROR_TYPES) | PRE_SEND <= set(ours)


@pytest.mark.parametrize("name", sorted(_exception_classes(httpx)))
def test_each_exception_is_classified_alike_in_both_libraries(name: str) -> None:
    """The same error type for the same exception of either library."""

    def made(cls: type[Exception]) -> Exception:
        error = cls.__new__(cls)  # some take a request or a response: none is read here
        Exception.__init__(error, "boom")
        return error

    ours, theirs = error_type_of(made(getattr(httpx, name))), error_type_of(made(getattr(httpx2, name)))
    assert theirs == ours.replace("httpx.", "httpx2.")


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_importing_the_package_never_imports_httpx2() -> None:
    """Every public name of ``pytest_failover`` loads without httpx2."""
    assert _run(
        """
        import sys, pytest_failover
        [getattr(pytest_failover, n) for n in pytest_failover.__all__]
        print(sorted(m for m in sys.modules if m.partition('.')[0] in ('httpx2', 'httpcore2')))
        """
    ) == "[]"


def test_the_httpx2_front_end_never_imports_httpx(servers: dict[str, LoopbackServer]) -> None:
    """With httpx and httpcore refused at import (as if not installed), the httpx2 front-end
    imports, and fails a GET over from a refused primary to a backup over loopback
    sockets, sync and async."""
    backup = servers["b"].url()
    dead = f"http://127.0.0.1:{closed_port()}"
    out = _run(
        f"""
        import asyncio, sys
        from importlib.abc import MetaPathFinder

        class Refuse(MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.partition('.')[0] in ('httpx', 'httpcore'):
                    raise ModuleNotFoundError(f'No module named {{name!r}} (refused by the test)')
                return None

        sys.meta_path.insert(0, Refuse())
        import httpx2
        from pytest_failover import Pool
        from pytest_failover.httpx2 import AsyncFailoverTransport, FailoverTransport

        pools = [Pool('api', [{dead!r}, {backup!r}])]
        with httpx2.Client(transport=FailoverTransport(pools)) as client:
            sync = client.get({dead!r} + '/x')

        async def main():
            async with httpx2.AsyncClient(transport=AsyncFailoverTransport(pools)) as client:
                return await client.get({dead!r} + '/x')

        answer = asyncio.run(main())
        for response in (sync, answer):
            print(response.status_code, [(a.domain, a.error_type) for a in response.extensions['failover'].attempts])
        print(sorted(m for m in sys.modules if m.partition('.')[0] in ('httpx', 'httpcore')))
        """
    )
    attempts = [(dead, "connection_refused"), (backup, None)]
    assert out.splitlines() == [f"200 {attempts}", f"200 {attempts}", "[]"]


def test_after_alias_httpx_the_httpx_transport_is_an_httpx2_one() -> None:
    """``httpx2.alias_httpx()`` before anything imports httpx: ``import httpx`` gives httpx2,
    so ``pytest_failover.FailoverTransport`` is an httpx2 transport raising httpx2's errors,
    and fails over under an ``httpx2.Client``, as the httpx2 front-end does."""
    out = _run(
        """
        import httpx2
        httpx2.alias_httpx()
        import httpx, pytest_failover
        from pytest_failover import Pool
        from pytest_failover import httpx2 as pf2

        print(httpx is httpx2, issubclass(pytest_failover.FailoverTransport, httpx2.BaseTransport),
              issubclass(pytest_failover.AllDomainsFailed, httpx2.TransportError))
        answer = lambda r: httpx2.Response(503 if r.url.host == 'api.example.com' else 200)
        for module in (pytest_failover, pf2):
            transport = module.FailoverTransport(
                [Pool('api', ['https://api.example.com', 'https://api2.example.com'])],
                transport=httpx2.MockTransport(answer),
            )
            with httpx2.Client(transport=transport) as client:
                print(client.get('https://api.example.com/').extensions['failover'].domain)
        """
    )
    assert out.splitlines() == ["True True True", "https://api2.example.com", "https://api2.example.com"]


def test_alias_httpx_after_httpx_was_imported_changes_nothing() -> None:
    """Once httpx is imported, ``alias_httpx()`` refuses; both transports keep their library."""
    out = _run(
        """
        import httpx, httpx2, pytest_failover
        from pytest_failover import httpx2 as pf2
        try:
            httpx2.alias_httpx()
        except RuntimeError as exc:
            print('refused')
        import httpx as again
        print(again is httpx, issubclass(pytest_failover.FailoverTransport, httpx.BaseTransport),
              issubclass(pf2.FailoverTransport, httpx2.BaseTransport))
        """
    )
    assert out.splitlines() == ["refused", "True True True"]


def test_mypy_types_each_front_end_with_its_library() -> None:
    """Strict mypy sees each front-end's library: an httpx2 transport takes an httpx2 inner
    transport and serves an httpx2 client, returning httpx2 responses; one of the other
    library is refused (each ignore below is used, or strict mypy fails on it)."""

    def ok(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200)

    pools = [Pool("api", ["https://api.example.com"])]
    transport = pf2.FailoverTransport(pools, transport=httpx2.MockTransport(ok))
    assert_type(transport.handle_request(httpx2.Request("GET", "https://api.example.com/")), httpx2.Response)
    assert_type(pf2.AsyncFailoverTransport.sharing(transport), pf2.AsyncFailoverTransport)
    with httpx2.Client(transport=transport) as client:
        assert client.get("https://api.example.com/").status_code == 200
    pf2.FailoverTransport(pools, transport=httpx.MockTransport(lambda r: httpx.Response(200)))  # type: ignore[arg-type]  # httpx's
    httpx.Client(transport=pf2.FailoverTransport(pools)).close()  # type: ignore[arg-type]  # an httpx2 transport
    httpx2.Client(transport=pytest_failover.FailoverTransport(pools)).close()  # type: ignore[arg-type]  # an httpx one
