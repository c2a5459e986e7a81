"""The webhook configurations: opted-in pods and LWSs to the mutating hooks, an LWS's
StatefulSets to the guard.

Why this exists: which requests reach the gatekeeper is decided by these objects, not by
the server, and they carry the safety of the whole design. The mutating webhooks select
only objects labelled ``lws-gatekeeper.io/pool`` (so an outage of the gatekeeper cannot
block unrelated pods) and fail closed (so an opted-in pod can never be created without
its gate); the guard's match conditions select only StatefulSets an LWS controls. The
chart, the sandbox and the tests build them from these functions.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from gatekeeper.core.kube.keys import API_GROUP, CHARGE_KEY, LWS_API_VERSION, LWS_NAME_LABEL, POOL_LABEL

__all__ = [
    "LWS_CONTROLLER_USERS",
    "LWS_PATH",
    "PODS_PATH",
    "RESIZE_PATH",
    "SCALE_PATH",
    "STATEFULSETS_PATH",
    "mutating_webhook_configuration",
    "validating_webhook_configuration",
]

PODS_PATH = "/mutate-pods"
"""Where the server takes AdmissionReviews for pods."""
LWS_PATH = "/mutate-leaderworkersets"
"""Where the server takes AdmissionReviews for LeaderWorkerSets."""
STATEFULSETS_PATH = "/validate-statefulsets"
"""Where the StatefulSet guard takes creates and updates of StatefulSets."""
SCALE_PATH = "/validate-statefulsets-scale"
"""Where the StatefulSet guard takes updates of ``statefulsets/scale``."""
RESIZE_PATH = "/validate-pods-resize"
"""Where the guard takes in-place resizes (``pods/resize``) of pods the gatekeeper let through."""

_TIMEOUT_SECONDS = 10

GARBAGE_COLLECTOR_USER = "system:serviceaccount:kube-system:generic-garbage-collector"
"""The garbage collector, as kube-controller-manager runs it with
``--use-service-account-credentials``."""

LWS_CONTROLLER_USERS = (
    "system:serviceaccount:lws-system:lws-controller-manager",
    "system:kube-controller-manager",
    GARBAGE_COLLECTOR_USER,
)
"""Who may change an LWS's StatefulSets: the LWS controller (as LWS's own chart runs it)
and the garbage collector (as kube-controller-manager itself, or with
``--use-service-account-credentials``), which drops their owner reference when an LWS is
deleted with ``--cascade=orphan``."""

_CONTROLLED_BY_LWS = (
    "has({o}.metadata.ownerReferences) && {o}.metadata.ownerReferences.exists(r, "
    "has(r.controller) && r.controller && (r.kind == 'LeaderWorkerSet' || r.kind == 'Pod'))"
)


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


def validating_webhook_configuration(
    *,
    name: str = "lws-gatekeeper",
    url: str | None = None,
    service: tuple[str, str, int] | None = None,
    ca_bundle: bytes,
    exempt_users: Sequence[str] = LWS_CONTROLLER_USERS,
) -> dict[str, Any]:
    """The StatefulSet guard's configuration (``webhook/guard.py``), as
    :func:`mutating_webhook_configuration` points it; ``exempt_users`` are never sent.

    No object selector (a tenant may drop a StatefulSet's labels first): CEL match
    conditions send a create or update only when the StatefulSet's controller (before or
    after the update) is an LWS or a pod, and a scale only when the StatefulSet's selector (which
    cannot change) names an LWS, so unrelated StatefulSets never wait for the gatekeeper.
    The same configuration sends an in-place resize of a pod only when the gatekeeper let
    it through (it carries the charge mark, which no update removes).
    """
    if (url is None) == (service is None):
        raise ValueError("give exactly one of url and service")
    if any("'" in user or "\\" in user for user in exempt_users):
        raise ValueError("a user name in a CEL string may not hold a quote or a backslash")
    exempt = ", ".join(f"'{user}'" for user in exempt_users)
    not_exempt = {
        "name": "not-the-lws-controller",
        "expression": f"!(request.userInfo.username in [{exempt}])",
    }
    controlled = " || ".join(
        [
            f"({_CONTROLLED_BY_LWS.format(o='object')})",
            f"(request.operation == 'UPDATE' && {_CONTROLLED_BY_LWS.format(o='oldObject')})",
        ]
    )
    hooks = [
        (
            "statefulsets",
            STATEFULSETS_PATH,
            _rule("apps", "v1", "statefulsets", ["CREATE", "UPDATE"]),
            {"name": "controlled-by-an-lws", "expression": controlled},
        ),
        (
            "statefulsets-scale",
            SCALE_PATH,
            _rule("apps", "v1", "statefulsets/scale", ["UPDATE"]),
            {
                "name": "selects-an-lws",
                "expression": (
                    f"has(object.status.selector) && object.status.selector.contains('{LWS_NAME_LABEL}=')"
                ),
            },
        ),
        (
            "pods-resize",
            RESIZE_PATH,
            _rule("", "v1", "pods/resize", ["UPDATE"]),
            {
                "name": "let-through",
                "expression": (
                    "has(oldObject.spec.tolerations) && oldObject.spec.tolerations.exists(t, "
                    f"has(t.key) && t.key == '{CHARGE_KEY}')"
                ),
            },
        ),
    ]
    webhooks = []
    for resource, path, rule, condition in hooks:
        hook = _webhook(f"{resource}.{API_GROUP}", _client_config(url, service, path, ca_bundle), rule, "")
        del hook["objectSelector"], hook["reinvocationPolicy"]
        hook["matchConditions"] = [not_exempt, condition]
        webhooks.append(hook)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": webhooks,
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
