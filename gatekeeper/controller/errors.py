"""Errors that say whether to try again, and the one place HTTP answers are mapped to them.

Why this exists: every API call of the controller ends in one of three ways besides
success, and each caller must treat them alike (kopf's ``TemporaryError(delay=)`` and
``PermanentError`` are the model):

* ``Conflict`` (a ``TemporaryError`` with no delay): the object changed or is gone since it
  was read, or it is already there (404, 409, 422), or an admission policy or webhook refused
  it in the object's present state (403). Nothing is wrong: the next pass decides again on
  fresh state.
* ``Forbidden`` (a ``PermanentError``): the gatekeeper's own RBAC does not allow the request
  (a 403 whose message is the authorizer's "User ... cannot VERB resource ..."). Sent again
  it fails again until an admin grants the verb: it is logged as an error and counted in
  ``lws_gatekeeper_api_forbidden_total``, never taken for a conflict. What it leaves undone stays
  visible in the cluster (a pod not deleted keeps its quota held, and its record says so).
* ``NamespaceTerminating`` (a ``Conflict``): a create in a namespace being deleted, the
  403 whose details name the cause ``NamespaceTerminating``. It cannot succeed, is not a
  refusal of the gatekeeper's RBAC, and needs no retry: the namespace's deletion takes the
  objects that asked for the create with it.
* ``TemporaryError``: the API server is away, slow or overloaded (429, 5xx, a broken or
  timed-out connection), or refused credentials that have just been rotated (401: they
  are reloaded, see ``credentials``). A later attempt may succeed; ``delay`` says when to
  try (the ``Retry-After`` of a 429, else a second).
* ``PermanentError``: the request itself was refused (400, 405, 413, ...). Sending it
  again unchanged fails again; it is logged and not retried.

``Kube`` (every write) and ``Informer`` (every list and watch) raise only these; the pass
loop retries temporary errors and nothing else. Both count each failed request in
``lws_gatekeeper_api_errors_total`` (:func:`count_failure`), by verb, resource and HTTP status.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

import httpx
import kr8s

from gatekeeper.metrics import API_ERRORS, API_FORBIDDEN

__all__ = [
    "TRANSPORT_ERRORS",
    "Conflict",
    "Forbidden",
    "NamespaceTerminating",
    "NotLeading",
    "PermanentError",
    "TemporaryError",
    "count_failure",
    "error_for_status",
    "raise_for_status",
]


class TemporaryError(Exception):
    """A later attempt may succeed; try again after ``delay`` seconds."""

    def __init__(self, message: str, *, delay: float = 1.0, code: int | None = None) -> None:
        super().__init__(message)
        self.delay = delay
        self.code = code


class NotLeading(TemporaryError):
    """A write of the admission loop not sent: the replica is past its renew deadline, so
    another may lead already. The loop is being cancelled; if not, the next pass asks again."""

    def __init__(self, message: str) -> None:
        super().__init__(message, delay=1.0)


class Conflict(TemporaryError):
    """The object changed, is gone or is already there: the next pass decides again."""

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message, delay=0.0, code=code)


class NamespaceTerminating(Conflict):
    """A create refused because its namespace is being deleted: not retried."""


class PermanentError(Exception):
    """The API server refused the request as such; sent again unchanged it fails again."""

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code


class Forbidden(PermanentError):
    """The gatekeeper's RBAC does not allow the request: not retried until an admin grants it."""


#: Failures below HTTP (connection refused or reset, timeouts, TLS): the server may be back soon.
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    httpx.HTTPError,
    OSError,
    kr8s.ServerError,
    kr8s.APITimeoutError,
)

_CONFLICTS = frozenset({403, 404, 409, 422})
#: The authorizer's words when RBAC (or any authorizer) denies a request: ``pods "x" is
#: forbidden: User "system:serviceaccount:ns:sa" cannot delete resource "pods" in API group
#: "" in the namespace "ns"``. An admission policy's or webhook's 403 says otherwise.
_UNAUTHORIZED = re.compile(r'forbidden: User ".*" cannot [a-z]+ resource ')
#: The cause the API server's NamespaceLifecycle admission gives a create in a namespace being deleted.
_NAMESPACE_TERMINATING = "NamespaceTerminating"


def count_failure(verb: str, resource: str, exc: BaseException) -> None:
    """Count one failed request of ``verb`` on ``resource`` in :data:`API_ERRORS`."""
    code = getattr(exc, "code", None)
    API_ERRORS.labels(verb, resource, str(code) if code else "transport").inc()
    if isinstance(exc, Forbidden):
        API_FORBIDDEN.labels(verb, resource).inc()


def _retry_after(headers: Mapping[str, str]) -> float:
    try:
        return min(max(float(headers.get("retry-after", "1")), 0.0), 60.0)
    except ValueError:
        return 1.0


def error_for_status(
    code: int,
    message: str,
    headers: Mapping[str, str] | None = None,
    causes: Collection[str] = (),
) -> TemporaryError | PermanentError | None:
    """The error an HTTP answer stands for (``causes``: the ``reason`` of each cause in its
    Status's details); None for a success."""
    if code < 400:
        return None
    text = f"{code}: {message}"
    if code == 403 and _NAMESPACE_TERMINATING in causes:
        return NamespaceTerminating(text, code=code)
    if code == 403 and _UNAUTHORIZED.search(message):
        return Forbidden(text, code=code)
    if code in _CONFLICTS:
        return Conflict(text, code=code)
    if code in (401, 429) or code >= 500:
        return TemporaryError(text, delay=_retry_after(headers or {}), code=code)
    return PermanentError(text, code=code)


def raise_for_status(resp: httpx.Response) -> None:
    """Raise the error an answer stands for (its Status message, else the start of its body).

    Every call passes ``raise_for_status=False`` to kr8s and comes here instead: on a
    401/403 kr8s would re-authenticate and rebuild its HTTP session, which breaks the other
    requests in flight (a 403 also answers a create in a namespace being deleted, not only
    a credentials problem).
    """
    if resp.status_code < 400:
        return
    causes: list[str] = []
    try:
        body = resp.json()
        message = str(body.get("message", ""))
        details = body.get("details")
        if isinstance(details, dict) and isinstance(details.get("causes"), list):
            causes = [str(c.get("reason")) for c in details["causes"] if isinstance(c, dict)]
    except (ValueError, AttributeError):
        message = resp.text[:300]
    error = error_for_status(resp.status_code, message, resp.headers, causes)
    if error is not None:
        raise error
