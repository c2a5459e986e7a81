"""The StatefulSet guard: a validating webhook that keeps an LWS's StatefulSets the LWS's.

Why this exists: a tenant with ``edit`` may scale or edit any StatefulSet of its
namespace, those the LWS controller made among them; the gatekeeper then holds the pods
that are not its LWS's (``core.admission.members``), but the tenant sees only pods Pending. This
webhook refuses the change itself, with a sentence that says to change the LWS
(``core.model.owned`` decides). Two routes:

- ``/validate-statefulsets`` (CREATE, UPDATE): the object and the old object carry their
  owner references, so the review is decided from them alone;
- ``/validate-statefulsets-scale`` (UPDATE of ``statefulsets/scale``): a Scale names no
  owner, so the StatefulSet is read (``lookup``, one GET on the controller's client, on
  every replica: the guard needs no leader). A StatefulSet that cannot be read is
  refused with the reason (fail closed, as the configuration's ``failurePolicy``);
- ``/validate-pods-resize`` (UPDATE of ``pods/resize``): a pod let through on its group's
  admission may be resized to ask less, not more (``core.model.charge.resize_refusal``), so that
  it stays what its group was charged for.

The configuration's match conditions send only StatefulSets whose selector names an LWS,
and leave the LWS controller and the garbage collector out (``webhook/config.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from gatekeeper.core.kube.objects import as_map
from gatekeeper.core.model.charge import resize_refusal
from gatekeeper.core.model.owned import scale_refusal, statefulset_refusal
from gatekeeper.webhook.review import Review, answer

__all__ = ["Lookup", "resize_guard", "scale_guard", "statefulset_guard", "verdict"]

log = logging.getLogger("gatekeeper.webhook")

Lookup = Callable[[str, str], Awaitable[Mapping[str, Any] | None]]
"""``(namespace, name)`` to the StatefulSet there, ``None`` if there is none; raises when
it cannot be read."""

Count = Callable[[str], None]
"""Counts a review's result (``allowed``, ``denied``) in the webhook's metrics."""


def verdict(webhook: str, review: Review, refusal: str | None, count: Count) -> dict[str, Any]:
    """The answer to ``review``: allowed, or refused (403) with ``refusal``, counted and logged
    (also the pod webhook's answer to a pod refused as written)."""
    if refusal is None:
        count("allowed")
        return answer(review.uid)
    count("denied")
    log.info(
        "webhook=%s uid=%s operation=%s object=%s user=%s result=denied reason=%r",
        webhook,
        review.uid,
        review.operation,
        review.where,
        review.user,
        refusal,
    )
    return answer(review.uid, denied=refusal, code=403)


def statefulset_guard(count: Count) -> Callable[[Review], Awaitable[dict[str, Any]]]:
    """The responder of ``/validate-statefulsets``."""

    async def respond(review: Review) -> dict[str, Any]:
        refusal = statefulset_refusal(review.operation, review.obj, review.old_obj)
        return verdict("statefulsets", review, refusal, count)

    return respond


def scale_guard(lookup: Lookup | None, count: Count) -> Callable[[Review], Awaitable[dict[str, Any]]]:
    """The responder of ``/validate-statefulsets-scale``; without ``lookup`` (a server that
    reads nothing, as in unit tests of the mutating routes) every change is refused."""

    async def respond(review: Review) -> dict[str, Any]:
        replicas = as_map(review.obj.get("spec")).get("replicas")
        old = as_map(as_map(review.old_obj).get("spec")).get("replicas")
        if review.operation != "UPDATE" or replicas == old:
            return verdict("statefulsets-scale", review, None, count)
        try:
            if lookup is None:
                raise RuntimeError("this server reads no StatefulSets")
            sts = await lookup(review.namespace, review.name)
        except Exception as exc:  # fail closed: the scale waits until the owner can be read
            count("error")
            message = (
                f"lws-gatekeeper: cannot read StatefulSet {review.namespace}/{review.name} to check "
                f"whether a LeaderWorkerSet controls it: {exc}; try again"
            )
            log.warning("webhook=statefulsets-scale uid=%s result=error error=%r", review.uid, str(exc))
            return answer(review.uid, denied=message, code=503)
        refusal = None if sts is None else scale_refusal(sts, replicas, old)
        return verdict("statefulsets-scale", review, refusal, count)

    return respond


def resize_guard(count: Count) -> Callable[[Review], Awaitable[dict[str, Any]]]:
    """The responder of ``/validate-pods-resize``."""

    async def respond(review: Review) -> dict[str, Any]:
        refusal = None if review.old_obj is None else resize_refusal(review.obj, review.old_obj)
        return verdict("pods-resize", review, refusal, count)

    return respond
