"""How many admitted groups have gated pods their LWS did not say, by reason: one gauge.

Why this exists: a pod a tenant made through an admitted group's StatefulSets past the
LWS's ``size``, from a hand-edited template, or with a forged claim stays gated, and its
group's record and a Warning Event say so (``core.admission.members``, ``core.admission.conformance``). An
operator watching many namespaces wants to see that it happens without reading records:
``lws_gatekeeper_groups_holding_pods{reason}`` is the number of groups, after each pass, that
hold such pods back, for each of ``core.admission.reasons.STRANGER_REASONS`` (0 when none).

Called by each backend's pass (``controller.backends``) with the reasons its decision gave
its groups.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable

from gatekeeper.core.admission.reasons import STRANGER_REASONS
from gatekeeper.metrics import GROUPS_HOLDING_PODS

__all__ = ["report_held"]


def report_held(reasons: Iterable[str]) -> None:
    """Set the gauge from the reasons of one pass's groups (any reason; others are not counted)."""
    count = Tally(r for r in reasons if r in STRANGER_REASONS)
    for reason in sorted(STRANGER_REASONS):
        GROUPS_HOLDING_PODS.labels(str(reason)).set(count.get(reason, 0))
