"""Who may read /metrics over HTTPS (``controller.metrics_access``): a bearer token the API
server authenticates, of a user it allows ``get /metrics``; answers kept a while, bounded.

The API server is a stand-in here (its TokenReview and SubjectAccessReview answers, as
canned data); ``tests/e2e/test_image.py`` scrapes the chart's Deployment with real tokens.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

import pytest

from gatekeeper.controller import kube as k
from gatekeeper.controller.metrics_access import (
    ALLOWED_SECONDS,
    DENIED_SECONDS,
    REMEMBERED,
    MetricsAccess,
    access_review,
    bearer,
    self_signed_context,
)
from gatekeeper.controller.resources import Resource

READER = {"username": "system:serviceaccount:monitoring:prometheus", "uid": "u1", "groups": ["g"]}


class ApiServer:
    """Answers TokenReviews from ``tokens`` (token -> user) and SubjectAccessReviews from
    ``readers`` (usernames allowed); counts the reviews; ``down`` makes every call fail."""

    def __init__(self, tokens: Mapping[str, Mapping[str, Any]], readers: set[str]) -> None:
        self.tokens, self.readers = tokens, readers
        self.calls: list[str] = []
        self.down = False

    async def create(self, res: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append(res.plural)
        if self.down:
            raise k.TemporaryError("connection refused")
        if res.plural == "tokenreviews":
            user = self.tokens.get(obj["spec"]["token"])
            if user is None:
                return {"status": {"authenticated": False, "error": "invalid bearer token"}}
            return {"status": {"authenticated": True, "user": dict(user)}}
        assert res.plural == "subjectaccessreviews"
        assert obj["spec"]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
        if obj["spec"]["user"] in self.readers:
            return {"status": {"allowed": True, "reason": "RBAC: allowed by ClusterRoleBinding"}}
        return {"status": {"allowed": False}}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _access(server: ApiServer, clock: Clock) -> MetricsAccess:
    return MetricsAccess(server, clock)  # type: ignore[arg-type]  (the two calls it makes)


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("", None),
        ("Bearer", None),
        ("Bearer   ", None),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Bearer " + "x" * 20_000, None),
    ],
)
def test_the_bearer_token_of_the_header(header: str | None, token: str | None) -> None:
    assert bearer(header) == token


def test_the_access_review_asks_for_the_reviewed_user_with_its_groups_and_extra() -> None:
    spec = access_review({**READER, "extra": {"scopes": ["a", "b"]}})["spec"]
    assert spec == {
        "user": READER["username"],
        "groups": ["g"],
        "uid": "u1",
        "extra": {"scopes": ["a", "b"]},
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }


async def test_no_token_a_bad_token_and_a_user_not_allowed_are_refused_and_a_reader_is_served() -> None:
    server = ApiServer({"reader": READER, "other": {"username": "alice"}}, {READER["username"]})
    access = _access(server, Clock())
    assert (await access.check(None)).status == 401
    assert server.calls == [], "no token: nothing asked"
    bad = await access.check("Bearer made-up")
    assert bad.status == 401 and "invalid bearer token" in bad.reason
    other = await access.check("Bearer other")
    assert other.status == 403 and "alice may not get /metrics" in other.reason
    assert (await access.check("Bearer reader")).status == 200


async def test_answers_are_kept_a_while_and_asked_again_after() -> None:
    server = ApiServer({"reader": READER}, {READER["username"]})
    clock = Clock()
    access = _access(server, clock)
    assert (await access.check("Bearer reader")).status == 200
    assert (await access.check("Bearer reader")).status == 200
    assert server.calls == ["tokenreviews", "subjectaccessreviews"], "the second scrape asks nothing"
    server.readers.clear()  # the binding removed: refused once the answer is old
    clock.now = ALLOWED_SECONDS - 1
    assert (await access.check("Bearer reader")).status == 200
    clock.now = ALLOWED_SECONDS + 1
    assert (await access.check("Bearer reader")).status == 403
    server.readers.add(READER["username"])  # bound again: a refusal is kept for less
    clock.now += DENIED_SECONDS + 1
    assert (await access.check("Bearer reader")).status == 200


async def test_an_api_server_that_cannot_answer_gives_503_and_nothing_is_kept() -> None:
    server = ApiServer({"reader": READER}, {READER["username"]})
    access = _access(server, Clock())
    server.down = True
    failed = await access.check("Bearer reader")
    assert failed.status == 503 and "connection refused" in failed.reason
    server.down = False
    assert (await access.check("Bearer reader")).status == 200


async def test_a_flood_of_tokens_keeps_at_most_the_bound() -> None:
    server = ApiServer({"reader": READER}, {READER["username"]})
    access = _access(server, Clock())
    assert (await access.check("Bearer reader")).status == 200
    for i in range(REMEMBERED + 10):
        assert (await access.check(f"Bearer made-up-{i}")).status == 401
    assert len(access._known) == REMEMBERED
    before = len(server.calls)
    assert (await access.check("Bearer reader")).status == 200
    assert len(server.calls) == before + 2, "the oldest answer was let go"


def test_the_self_signed_context_serves_tls() -> None:
    context = self_signed_context(["lws-gatekeeper-metrics", "localhost"])
    assert isinstance(context, ssl.SSLContext)
    assert context.protocol == ssl.PROTOCOL_TLS_SERVER
