"""The MutatingWebhookConfiguration that sends opted-in pods and LWSs to the webhook server.

Why this exists: which requests reach the gatekeeper is decided by this object, not by
the server, and it carries the safety of the whole design. Both webhooks select only
objects labelled ``lws-gatekeeper.io/pool`` (so an outage of the gatekeeper cannot
block unrelated pods) and fail closed (so an opted-in pod can never be created without
its gate). The chart, the sandbox and the tests build it from this one function.
"""

from __future__ import annotations

import base64
from typing import Any

from gatekeeper.core.keys import API_GROUP, LWS_API_VERSION, POOL_LABEL

__all__ = ["LWS_PATH", "PODS_PATH", "mutating_webhook_configuration"]

PODS_PATH = "/mutate-pods"
"""Where the server takes AdmissionReviews for pods."""
LWS_PATH = "/mutate-leaderworkersets"
"""Where the server takes AdmissionReviews for LeaderWorkerSets."""

_TIMEOUT_SECONDS = 10


def mutating_webhook_configuration(
    *,
    name: str = "lws-gatekeeper",
    url: str | None = None,
    service: tuple[str, str, int] | None = None,
    ca_bundle: bytes,
) -> dict[str, Any]:
    """The configuration object, pointing either at ``url`` (a base URL) or at ``service``.

    ``service`` is ``(namespace, name, port)``; ``ca_bundle`` is the PEM of the CA that
    signed the server's certificate. Exactly one of ``url`` and ``service`` is required.
    """
    if (url is None) == (service is None):
        raise ValueError("give exactly one of url and service")
    lws_group, lws_version = LWS_API_VERSION.split("/")
    # The pod hook is called once (Never): the gate depends only on the pool label, which
    # the pod has from its template, never on what a later webhook (LWS's, adding the group
    # labels) changes; re-invoking it doubled the webhook calls of every pod at scale-up.
    # The LWS hook is re-invoked if another webhook changes the LWS after it (IfNeeded), so
    # that a template added or rewritten later still gets the label.
    hooks = [
        ("pods", PODS_PATH, _rule("", "v1", "pods", ["CREATE"]), "Never"),
        (
            "leaderworkersets",
            LWS_PATH,
            _rule(lws_group, lws_version, "leaderworkersets", ["CREATE", "UPDATE"]),
            "IfNeeded",
        ),
    ]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            _webhook(f"{resource}.{API_GROUP}", _client_config(url, service, path, ca_bundle), rule, again)
            for resource, path, rule, again in hooks
        ],
    }


def _rule(group: str, version: str, resource: str, operations: list[str]) -> dict[str, Any]:
    return {
        "apiGroups": [group],
        "apiVersions": [version],
        "resources": [resource],
        "operations": operations,
        "scope": "Namespaced",
    }


def _client_config(
    url: str | None, service: tuple[str, str, int] | None, path: str, ca_bundle: bytes
) -> dict[str, Any]:
    ca = base64.b64encode(ca_bundle).decode()
    if url is not None:
        return {"url": url.rstrip("/") + path, "caBundle": ca}
    assert service is not None
    namespace, name, port = service
    return {"service": {"namespace": namespace, "name": name, "port": port, "path": path}, "caBundle": ca}


def _webhook(
    name: str, client_config: dict[str, Any], rule: dict[str, Any], reinvocation: str
) -> dict[str, Any]:
    return {
        "name": name,
        "clientConfig": client_config,
        "rules": [rule],
        "objectSelector": {"matchExpressions": [{"key": POOL_LABEL, "operator": "Exists"}]},
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "reinvocationPolicy": reinvocation,
        "timeoutSeconds": _TIMEOUT_SECONDS,
        "admissionReviewVersions": ["v1"],
    }
