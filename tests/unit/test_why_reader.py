"""``why``'s reads: an API server that answers 429 (storage being initialized after a CRD
changed, or too many requests) is asked again, as Retry-After says; other errors are not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import kr8s
import pytest

from gatekeeper import why


class _Api:
    """Answers ``get`` with the errors given, in turn, then with one object."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def get(self, kind: str, **_: Any) -> AsyncIterator[dict[str, Any]]:
        self.calls += 1
        if self.errors:
            code = self.errors.pop(0)
            response = httpx.Response(code, headers={"Retry-After": "0"})
            raise kr8s.ServerError("storage is (re)initializing", response=response)
        yield {"metadata": {"name": "a"}}


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    async def sleep(_: float) -> None:
        return None

    monkeypatch.setattr(why.anyio, "sleep", sleep)


async def test_a_429_is_asked_again() -> None:
    api = _Api(429, 429)
    read = why._Reader(api)  # type: ignore[arg-type]
    assert await read.one("pools.lws-gatekeeper.io", "a") == {"metadata": {"name": "a"}}
    assert api.calls == 3


async def test_a_429_that_never_ends_is_raised_after_the_last_try() -> None:
    api = _Api(*[429] * why._TRIES)
    with pytest.raises(kr8s.ServerError):
        await why._Reader(api).every("pools.lws-gatekeeper.io")  # type: ignore[arg-type]
    assert api.calls == why._TRIES


async def test_other_errors_are_raised_at_once() -> None:
    api = _Api(403)
    with pytest.raises(kr8s.ServerError):
        await why._Reader(api).every("pools.lws-gatekeeper.io")  # type: ignore[arg-type]
    assert api.calls == 1


def test_retry_after_is_bounded() -> None:
    assert why._retry_after(httpx.Response(429, headers={"Retry-After": "30"})) == 5.0
    assert why._retry_after(httpx.Response(429, headers={"Retry-After": "soon"})) == 1.0
    assert why._retry_after(httpx.Response(429)) == 1.0
