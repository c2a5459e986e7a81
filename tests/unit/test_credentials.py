"""A rotated token is reloaded after a 401, once, and the next request carries the new one.

A fake ``call_api`` and fake kr8s auth stand in for the API server and the token file:
this tests the client's reaction to a 401, not authentication itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gatekeeper.controller import resources as r
from gatekeeper.controller.errors import TemporaryError
from gatekeeper.controller.kube import Kube


class RotatingAuth:
    def __init__(self) -> None:
        self.token = "old"
        self.file = "new"  # the kubelet wrote a new token meanwhile
        self.reloads = 0

    async def reauthenticate(self) -> None:
        self.reloads += 1
        self.token = self.file


class TokenCheckingApi:
    """Answers 401 to any request whose Authorization header is not the current token."""

    def __init__(self) -> None:
        self.auth = RotatingAuth()
        self._session = httpx.AsyncClient(headers={"Authorization": "Bearer old"})
        self.seen: list[str] = []

    @contextlib.asynccontextmanager
    async def call_api(self, method: str, **kwargs: Any) -> AsyncIterator[httpx.Response]:
        sent = self._session.headers.get("Authorization", "")
        self.seen.append(sent)
        if sent != f"Bearer {self.auth.file}":
            yield httpx.Response(401, json={"kind": "Status", "message": "Unauthorized"})
        else:
            yield httpx.Response(200, json={"metadata": {"name": "x"}})


@pytest.mark.anyio
async def test_a_401_reloads_the_token_and_the_retry_goes_through() -> None:
    api = TokenCheckingApi()
    kube = Kube(api)  # type: ignore[arg-type]
    with pytest.raises(TemporaryError):  # temporary: the next pass tries again
        await kube.get(r.PODS, "x", "ns")
    assert api.auth.reloads == 1
    assert (await kube.get(r.PODS, "x", "ns"))["metadata"]["name"] == "x"
    assert api.seen == ["Bearer old", "Bearer new"]


@pytest.mark.anyio
async def test_many_401s_at_once_reload_the_token_once() -> None:
    api = TokenCheckingApi()
    kube = Kube(api)  # type: ignore[arg-type]
    api.auth.file = "rotated-again-later"
    for _ in range(5):
        api._session.headers["Authorization"] = "Bearer old"
        with pytest.raises(TemporaryError):
            await kube.get(r.PODS, "x", "ns")
    assert api.auth.reloads == 1, "at most one reload per interval, however many requests saw the 401"
