"""Every failed API request is counted in ``lws_gatekeeper_api_errors_total``, by verb, resource, code.

The dashboard's API errors panel reads this counter. A fake ``call_api`` stands in for the
API server (as in ``test_credentials.py`` and ``test_informer.py``): this tests what the
client counts for each kind of answer; ``tests/e2e/test_dashboard.py`` sees the counter
move in a real Prometheus when the sandbox's API server goes away.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client import REGISTRY

from gatekeeper.controller import resources as r
from gatekeeper.controller.errors import (
    Conflict,
    Forbidden,
    NamespaceTerminating,
    NotLeading,
    PermanentError,
    TemporaryError,
)
from gatekeeper.controller.informer import Informer
from gatekeeper.controller.kube import Kube


def errors(verb: str, resource: str, code: str) -> float:
    labels = {"verb": verb, "resource": resource, "code": code}
    return REGISTRY.get_sample_value("lws_gatekeeper_api_errors_total", labels) or 0.0


class ScriptedApi:
    """Answers each call with the next scripted response, or raises the next exception;
    with nothing left, blocks as a quiet watch does."""

    def __init__(self, answers: list[httpx.Response | Exception]) -> None:
        self.answers = answers
        self.calls = 0

    @contextlib.asynccontextmanager
    async def call_api(self, method: str, **kwargs: Any) -> AsyncIterator[httpx.Response]:
        self.calls += 1
        if not self.answers:
            await anyio.sleep_forever()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        yield answer


def status(code: int) -> httpx.Response:
    return httpx.Response(code, json={"kind": "Status", "code": code, "message": f"answer {code}"})


def terminating(namespace: str) -> httpx.Response:
    """The API server's answer to a create in a namespace being deleted (its NamespaceLifecycle
    admission plugin): a 403 whose details name the cause."""
    message = f"unable to create new content in namespace {namespace} because it is being terminated"
    cause = {"reason": "NamespaceTerminating", "message": f"namespace {namespace} is being terminated"}
    return httpx.Response(
        403,
        json={
            "kind": "Status",
            "code": 403,
            "reason": "Forbidden",
            "message": f'pods "p" is forbidden: {message}',
            "details": {
                "name": "p",
                "kind": "pods",
                "causes": [{**cause, "field": "metadata.namespace"}],
            },
        },
    )


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}

#: The authorizer's answer when the gatekeeper's RBAC lacks a verb.
RBAC = (
    'pods "p" is forbidden: User "system:serviceaccount:lws-gatekeeper-system:lws-gatekeeper" '
    'cannot delete resource "pods" in API group "" in the namespace "ns"'
)
#: An admission policy's answer: the object's state, not the gatekeeper's rights.
POLICY = (
    "pods \"p\" is forbidden: ValidatingAdmissionPolicy 'lws-gatekeeper-gate' with binding "
    "'lws-gatekeeper-gate' denied request: only the lws-gatekeeper lifts its gate"
)


def forbidden(message: str) -> httpx.Response:
    return httpx.Response(
        403, json={"kind": "Status", "code": 403, "reason": "Forbidden", "message": message}
    )


def forbidden_count(verb: str, resource: str) -> float:
    labels = {"verb": verb, "resource": resource}
    return REGISTRY.get_sample_value("lws_gatekeeper_api_forbidden_total", labels) or 0.0


@pytest.mark.anyio
async def test_a_403_of_rbac_is_permanent_and_counted_an_admission_403_is_a_conflict() -> None:
    """The gatekeeper's own RBAC refusing a verb is not a conflict to decide again: sent
    again it fails again until an admin grants it."""
    kube = Kube(ScriptedApi([forbidden(RBAC), forbidden(POLICY)]))  # type: ignore[arg-type]
    before = forbidden_count("delete", "pods")
    with pytest.raises(Forbidden) as rbac:
        await kube.delete(r.PODS, "p", "ns")
    assert isinstance(rbac.value, PermanentError) and rbac.value.code == 403
    assert forbidden_count("delete", "pods") == before + 1
    with pytest.raises(Conflict) as policy:
        await kube.delete(r.PODS, "p", "ns")
    assert policy.value.code == 403
    assert forbidden_count("delete", "pods") == before + 1, "a policy's refusal is no RBAC refusal"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answer", "error", "code"),
    [
        (status(409), Conflict, "409"),
        (status(403), Conflict, "403"),
        (terminating("ns"), NamespaceTerminating, "403"),
        (status(404), Conflict, "404"),
        (status(503), TemporaryError, "503"),
        (status(429), TemporaryError, "429"),
        (status(400), PermanentError, "400"),
        (httpx.ConnectError("connection refused"), TemporaryError, "transport"),
    ],
)
async def test_a_failed_write_is_counted_with_its_code(
    answer: httpx.Response | Exception, error: type[Exception], code: str
) -> None:
    kube = Kube(ScriptedApi([answer]))  # type: ignore[arg-type]
    before = errors("post", "pods", code)
    with pytest.raises(error):
        await kube.create(r.PODS, POD)
    assert errors("post", "pods", code) == before + 1


@pytest.mark.anyio
async def test_only_a_403_that_names_a_terminating_namespace_says_so() -> None:
    kube = Kube(ScriptedApi([status(403), terminating("ns")]))  # type: ignore[arg-type]
    with pytest.raises(Conflict) as refused:
        await kube.create(r.PODS, POD)
    assert not isinstance(refused.value, NamespaceTerminating), "a 403 of RBAC is no namespace being deleted"
    with pytest.raises(NamespaceTerminating) as gone:
        await kube.create(r.PODS, POD)
    assert gone.value.code == 403 and "being terminated" in str(gone.value)


@pytest.mark.anyio
async def test_a_success_is_not_counted_and_the_verb_is_the_counted_one() -> None:
    ok = httpx.Response(200, json={"metadata": {"name": "p"}})
    kube = Kube(ScriptedApi([ok, status(409)]))  # type: ignore[arg-type]
    before_post, before_apply = errors("post", "pods", "409"), errors("apply", "pods", "409")
    await kube.create(r.PODS, POD)
    assert errors("post", "pods", "409") == before_post
    with pytest.raises(Conflict):
        await kube.apply_status(r.PODS, "p", "ns", POD, field_manager="test")
    assert errors("apply", "pods", "409") == before_apply + 1, "server-side apply is counted as apply"


@pytest.mark.anyio
async def test_a_write_not_sent_by_a_fenced_replica_is_no_api_error() -> None:
    api = ScriptedApi([])
    kube = Kube(api).fenced(lambda: False)  # type: ignore[arg-type]
    before = errors("post", "pods", "transport")
    with pytest.raises(NotLeading):
        await kube.create(r.PODS, POD)
    assert api.calls == 0
    assert errors("post", "pods", "transport") == before


@pytest.mark.anyio
async def test_failed_lists_and_watches_are_counted_apart() -> None:
    listed = httpx.Response(200, json={"metadata": {"resourceVersion": "5"}, "items": []})
    api = ScriptedApi(
        [
            status(500),  # list
            listed,
            status(429),  # watch
            httpx.ReadError("stream broken"),  # list again
            listed,  # then a quiet watch
        ]
    )
    before = (errors("list", "nodes", "500"), errors("watch", "nodes", "429"))
    before_transport = errors("list", "nodes", "transport")
    informer = Informer(api, r.NODES)  # type: ignore[arg-type]
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(informer.run)
            while api.answers:
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    assert errors("list", "nodes", "500") == before[0] + 1
    assert errors("watch", "nodes", "429") == before[1] + 1
    assert errors("list", "nodes", "transport") == before_transport + 1
