"""An AdmissionReview decoded, and the answer to one: what every webhook route shares.

Why this exists: the mutating hooks (``server``) and the StatefulSet guard (``guard``)
read the same request fields and answer in the same shape; one decoder keeps what a
malformed body gets (400, ``BadReview``) the same for all of them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["BadReview", "Patch", "Review", "answer", "parse_review"]

_ADMISSION_API_VERSION = "admission.k8s.io/v1"

Patch = list[dict[str, Any]]
"""A JSON patch (RFC 6902) as the API server applies it."""


class BadReview(ValueError):
    """The request body is not an AdmissionReview (admission.k8s.io/v1) with a request."""


@dataclass(frozen=True)
class Review:
    """The parts of an AdmissionReview request the webhooks use."""

    uid: str
    operation: str
    obj: Mapping[str, Any]
    where: str
    """``namespace/name`` of the object, for messages and logs."""
    namespace: str = ""
    """The namespace of the request (a pod being created has none of its own yet, often)."""
    name: str = ""
    """The name of the request (a subresource's object, e.g. a Scale, is named as its parent)."""
    old_obj: Mapping[str, Any] | None = None
    """The object before an UPDATE; ``None`` otherwise."""
    user: str = ""
    """Who asks (``request.userInfo.username``), for logs."""


def parse_review(body: bytes) -> Review:
    """Decode an AdmissionReview request body; raises BadReview."""
    try:
        review = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadReview(f"body is not JSON: {exc}") from exc
    if not isinstance(review, dict) or review.get("kind") != "AdmissionReview":
        raise BadReview("body is not an AdmissionReview")
    if review.get("apiVersion") != _ADMISSION_API_VERSION:
        raise BadReview(f"AdmissionReview apiVersion must be {_ADMISSION_API_VERSION}")
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str) or not request["uid"]:
        raise BadReview("AdmissionReview has no request.uid")
    obj = request.get("object") or {}
    if not isinstance(obj, dict):
        raise BadReview("AdmissionReview request.object is not an object")
    old = request.get("oldObject")
    if old is not None and not isinstance(old, dict):
        raise BadReview("AdmissionReview request.oldObject is not an object")
    user = request.get("userInfo")
    return Review(
        uid=request["uid"],
        operation=str(request.get("operation", "")),
        obj=obj,
        where=_where(request, obj),
        namespace=str(request.get("namespace") or ""),
        name=str(request.get("name") or ""),
        old_obj=old,
        user=str(user.get("username") or "") if isinstance(user, dict) else "",
    )


def _where(request: Mapping[str, Any], obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    generated = f"{meta.get('generateName', '')}*" if isinstance(meta, dict) else "?"
    return f"{request.get('namespace') or ''}/{request.get('name') or generated}"


def answer(uid: str, patch: Patch | None = None, denied: str | None = None, code: int = 0) -> dict[str, Any]:
    """The AdmissionReview response: allowed (with ``patch``, if any) or ``denied`` with ``code``."""
    response: dict[str, Any] = {"uid": uid, "allowed": denied is None}
    if denied is not None:
        response["status"] = {"code": code, "message": denied}
    elif patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": _ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}
