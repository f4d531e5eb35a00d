"""The front-ends' keyword options are written once (``pytest_failover._state``) and
every public constructor still shows, takes and refuses exactly the keywords it did."""

from __future__ import annotations

import inspect
import random
import time
from typing import Any

import httpx
import pytest

from pytest_failover import AsyncFailoverTransport, FailoverTransport, Pool
from pytest_failover._state import (
    DEFAULTS,
    AdapterOptions,
    AsyncTransportOptions,
    MiddlewareOptions,
    TransportOptions,
)
from pytest_failover.integrations.aiohttp import FailoverMiddleware
from pytest_failover.integrations.requests import FailoverAdapter

POOL = Pool("api", ["http://127.0.0.1:9"])
COMMON = ["region", "fallback", "tracer_provider", "meter_provider"]
INJECTED = ["clock", "wall_clock", "random"]

# Each constructor's parameters as they were written out by hand before (name, kind).
P, K = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY
SIGNATURES: dict[type[Any], list[tuple[str, inspect._ParameterKind]]] = {
    FailoverTransport: [("pools", P), ("policy", P), ("transport", P)]
    + [(n, K) for n in [*COMMON, *INJECTED, "shared"]],
    AsyncFailoverTransport: [("pools", P), ("policy", P), ("transport", P)]
    + [(n, K) for n in [*COMMON, *INJECTED, "shared"]],
    FailoverAdapter: [("pools", P), ("policy", P)] + [(n, K) for n in [*COMMON, "shared", "adapter"]],
    FailoverMiddleware: [("pools", P), ("policy", P)] + [(n, K) for n in [*COMMON, "shared"]],
}
SHARED = {
    FailoverTransport: "RedisHealth | None",
    AsyncFailoverTransport: "RedisHealth | AsyncRedisHealth | None",
    FailoverAdapter: "RedisHealth | None",
    FailoverMiddleware: "RedisHealth | AsyncRedisHealth | None",
}


@pytest.mark.parametrize("cls", list(SIGNATURES), ids=lambda cls: cls.__name__)
def test_each_constructor_shows_every_keyword_with_its_type_and_default(cls: type[Any]) -> None:
    """``inspect.signature`` (and so ``help()`` and IDEs) lists each option by name,
    in the order, kind, type and default it had when written out by hand."""
    parameters = inspect.signature(cls).parameters
    assert [(p.name, p.kind) for p in parameters.values()] == SIGNATURES[cls]
    defaults = {"clock": time.monotonic, "wall_clock": time.time, "random": random.random}
    for name, parameter in parameters.items():
        assert parameter.default is defaults.get(name, None if name != "pools" else inspect.Parameter.empty)
    assert parameters["shared"].annotation == SHARED[cls]
    assert parameters["region"].annotation == "str | None"
    assert "tracer_provider: 'TracerProvider | None' = None" in str(inspect.signature(cls))


@pytest.mark.parametrize("cls", list(SIGNATURES), ids=lambda cls: cls.__name__)
def test_a_keyword_a_constructor_does_not_name_is_a_type_error(cls: type[Any]) -> None:
    """A misspelt option is refused as Python refuses it for a named parameter, in the name
    of the class built, with the option it may have meant."""
    message = rf"^{cls.__name__}\.__init__\(\) got an unexpected keyword argument 'regoin'; did you mean 'region'\?$"
    with pytest.raises(TypeError, match=message):
        cls([POOL], regoin="eu")
    with pytest.raises(TypeError, match=rf"^{cls.__name__}\.__init__\(\) got an unexpected keyword argument 'zzz'$"):
        cls([POOL], zzz=1)


def test_mypy_refuses_what_a_constructor_does_not_take() -> None:
    """The options are typed: mypy flags a misspelt keyword and an option of another
    front-end (each ignore below is used, or strict mypy fails on it)."""
    with pytest.raises(TypeError, match="'clock'"):
        FailoverAdapter([POOL], clock=time.monotonic)  # type: ignore[call-arg]  # the adapter takes no clock
    with pytest.raises(TypeError, match="'clock'"):
        FailoverMiddleware([POOL], clock=time.monotonic)  # type: ignore[call-arg]  # neither does the middleware
    with pytest.raises(TypeError, match="'regoin'"):
        FailoverTransport([POOL], regoin="eu")  # type: ignore[call-arg]  # misspelt
    FailoverTransport([POOL], region=3).close()  # type: ignore[arg-type]  # a region is a str; the core does not check


def test_the_options_reach_the_state() -> None:
    """Every option a front-end is given reaches the state it serves from."""

    def fallback(request: httpx.Request, error: Exception) -> httpx.Response:
        return httpx.Response(200)

    def clock() -> float:
        return 42.0

    transport = FailoverTransport([POOL], clock=clock, fallback=fallback)
    assert transport._state.fallback is fallback and transport._state.clock is clock
    adapter = FailoverAdapter([POOL], fallback=fallback)
    assert adapter._transport._state.fallback is fallback
    middleware = FailoverMiddleware([POOL], fallback=fallback)
    assert middleware._transport._state.fallback is fallback
    transport.close()
    adapter.close()


def test_every_option_has_one_default_and_each_front_end_a_subset() -> None:
    """The defaults name exactly the options of the widest front-end; the others take fewer."""
    widest = AsyncTransportOptions.__optional_keys__
    assert set(DEFAULTS) == widest and not AsyncTransportOptions.__required_keys__
    assert TransportOptions.__optional_keys__ == widest
    assert AdapterOptions.__optional_keys__ == MiddlewareOptions.__optional_keys__ == widest - set(INJECTED)
