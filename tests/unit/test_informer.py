"""The informer survives the API server's error answers instead of dying.

A fake ``call_api`` stands in for the API server here: this tests one loop's error
handling, not cluster behaviour. CI once failed because a watch opened while the API
server's watch cache was still warming up got ``429 storage is (re)initializing`` and
the error ended the whole controller.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client import REGISTRY

from gatekeeper.controller.informer import Informer, Resource


def _pod(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv}}


class FakeApi:
    """Answers a scripted list of responses, one per call, then blocks like a quiet watch."""

    def __init__(self, answers: list[httpx.Response]) -> None:
        self.answers = answers
        self.calls: list[dict[str, Any]] = []

    @contextlib.asynccontextmanager
    async def call_api(self, method: str, **kwargs: Any) -> AsyncIterator[httpx.Response]:
        self.calls.append(kwargs["params"])
        if not self.answers:
            await anyio.sleep_forever()
        yield self.answers.pop(0)


def _json(code: int, body: dict[str, Any]) -> httpx.Response:
    return httpx.Response(code, json=body)


def _watch(*events: dict[str, Any]) -> httpx.Response:
    return httpx.Response(200, content="\n".join(json.dumps(e) for e in events).encode())


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("code", "message"),
    [(429, "storage is (re)initializing"), (500, "etcdserver: leader changed"), (503, "unavailable")],
)
async def test_error_status_on_watch_relists_and_goes_on(code: int, message: str) -> None:
    api = FakeApi(
        [
            _json(200, {"metadata": {"resourceVersion": "10"}, "items": [_pod("a", "9")]}),
            _json(code, {"kind": "Status", "code": code, "message": message}),
            _json(200, {"metadata": {"resourceVersion": "12"}, "items": [_pod("a", "9"), _pod("b", "11")]}),
            _watch({"type": "ADDED", "object": _pod("c", "13")}),
        ]
    )
    seen: list[tuple[str, str]] = []
    informer = Informer(
        api,  # type: ignore[arg-type]
        Resource("pods"),
        on_change=lambda kind, obj: seen.append((kind, obj["metadata"]["name"])),
    )
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(informer.run)
            while informer.get("ns", "c") is None:
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    assert informer.relists == 2
    assert sorted(name for _, name in informer.objects) == ["a", "b", "c"]
    assert ("SYNC", "b") in seen and ("ADDED", "c") in seen
    # the second list started afresh, not from the failed watch's version
    assert "resourceVersion" not in api.calls[2]


@pytest.mark.anyio
async def test_error_status_on_list_is_retried() -> None:
    api = FakeApi(
        [
            _json(429, {"kind": "Status", "code": 429, "message": "too many requests"}),
            _json(200, {"metadata": {"resourceVersion": "5"}, "items": [_pod("a", "4")]}),
        ]
    )
    informer = Informer(api, Resource("pods"))  # type: ignore[arg-type]
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(informer.run)
            await informer.synced.wait()
            tg.cancel_scope.cancel()
    assert list(informer.objects) == [("ns", "a")]


@pytest.mark.anyio
async def test_watch_events_are_counted_by_resource_and_type_with_their_size() -> None:
    events = [
        {"type": "ADDED", "object": _pod("c", "13")},
        {"type": "MODIFIED", "object": _pod("c", "14")},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
        {"type": "SOMETHING", "object": _pod("d", "16")},
    ]
    api = FakeApi([_json(200, {"metadata": {"resourceVersion": "10"}, "items": []}), _watch(*events)])
    informer = Informer(api, Resource("counted-pods"))  # type: ignore[arg-type]
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(informer.run)
            while informer.get("ns", "d") is None:
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    counted = {
        t: REGISTRY.get_sample_value(
            "lws_gatekeeper_watch_events_total", {"resource": "counted-pods", "type": t}
        )
        for t in ("ADDED", "MODIFIED", "BOOKMARK", "other")
    }
    assert counted == {"ADDED": 1, "MODIFIED": 1, "BOOKMARK": 1, "other": 1}
    size = REGISTRY.get_sample_value("lws_gatekeeper_watch_bytes_total", {"resource": "counted-pods"})
    assert size == sum(len(json.dumps(e)) for e in events)
