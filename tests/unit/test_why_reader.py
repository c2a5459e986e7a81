"""``why``'s reads: an API server that answers 429 (storage being initialized after a CRD
changed, or too many requests) is asked again, as Retry-After says; other errors are not.
A read the user's rights refuse (403) is left out and said, or, for what the answer cannot
go without, raised as ``Forbidden`` with the API server's words."""

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
    api = _Api(500)
    with pytest.raises(kr8s.ServerError):
        await why._Reader(api).every("pools.lws-gatekeeper.io")  # type: ignore[arg-type]
    assert api.calls == 1


def test_retry_after_is_bounded() -> None:
    assert why._retry_after(httpx.Response(429, headers={"Retry-After": "30"})) == 5.0
    assert why._retry_after(httpx.Response(429, headers={"Retry-After": "soon"})) == 1.0
    assert why._retry_after(httpx.Response(429)) == 1.0


class _Rights:
    """An API server that lets a tenant read only ``allowed`` (kind, namespace): others
    are refused with a 403 naming them, as the API server words it."""

    def __init__(self, *allowed: tuple[str, str]) -> None:
        self.allowed = set(allowed)

    async def get(self, kind: str, namespace: str | None = None, **_: Any) -> AsyncIterator[dict[str, Any]]:
        scope = "*" if namespace in (None, kr8s.ALL) else str(namespace)
        if (kind, scope) not in self.allowed:
            where = "at the cluster scope" if scope == "*" else f'in the namespace "{scope}"'
            message = f'User "dev" cannot list resource "{kind}" {where}'
            response = httpx.Response(403, json={"kind": "Status", "message": message})
            raise kr8s.ServerError(message, response=response)
        yield {"metadata": {"name": "a", "namespace": scope}}


async def test_a_list_in_every_namespace_refused_is_made_in_the_namespace_asked_about() -> None:
    read = why._Reader(_Rights(("groupadmissions", "team-a")), home="team-a")  # type: ignore[arg-type]
    assert await read.every("groupadmissions") == [{"metadata": {"name": "a", "namespace": "team-a"}}]
    assert read.not_shown == [
        'groupadmissions outside namespace team-a: User "dev" cannot list resource "groupadmissions" '
        "at the cluster scope"
    ]


async def test_what_may_not_be_read_is_said_and_left_out() -> None:
    read = why._Reader(_Rights(), home="team-a")  # type: ignore[arg-type]
    assert await read.one("pools.lws-gatekeeper.io", "gpus") is None
    assert read.refused_one, "a pool refused is not a pool missing"
    assert await read.every("groupadmissions") == []
    assert await read.classes() == {}
    assert [n.split(":")[0] for n in read.not_shown] == [
        "pools.lws-gatekeeper.io gpus",
        "groupadmissions outside namespace team-a",
        "groupadmissions in namespace team-a",
        "priorityclasses (the queue's order by priority)",
    ]


async def test_what_the_answer_needs_is_raised_when_refused() -> None:
    read = why._Reader(_Rights(), home="team-a")  # type: ignore[arg-type]
    with pytest.raises(why.Forbidden, match='cannot list resource "leaderworkersets"'):
        await read.strict("leaderworkersets", "vllm", "team-a")
    with pytest.raises(why.Forbidden, match='cannot list resource "pods"'):
        await read.pods("team-a", "vllm")
