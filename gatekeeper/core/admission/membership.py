"""The pods of each group as every backend's pass starts from them: members, strangers, charges.

Why this exists: each backend's decision begins the same way, and it is where a tenant's
forged pods are told apart, so it is written once: the opted-in pods split into the members
of each LWS's groups and the strangers (``core.admission.members``: by the owner chain and the LWS's
``size``), the members grouped by LWS and group index (``core.model.groups.pods_by_group``), and
the charges that live pods let through carry (``core.model.charge``: a group stays held while a
pod it let in runs, whatever its labels say now). Called by every backend's ``decide``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper.core.admission.members import Stranger, split_members
from gatekeeper.core.kube.objects import meta
from gatekeeper.core.model.charge import Charge, live_charges
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.groups import PodReads, pods_by_group
from gatekeeper.core.model.lws import GroupPod
from gatekeeper.core.model.lws import size as lws_size

__all__ = ["Membership", "membership"]


@dataclass(frozen=True)
class Membership:
    """Who belongs to which group this pass."""

    pods_of: dict[tuple[str, str], dict[int, list[GroupPod]]]
    """(namespace, LWS) -> group index -> its member pods."""
    strangers: dict[GroupKey, list[Stranger]]
    """The gated pods that claim a group and are none of its: a decision may add to them
    (the pods of a group that are not as it was admitted, ``core.admission.conformance``)."""
    charges: dict[Charge, tuple[str, ...]]
    """The charges live pods carry, and which pods carry each."""


def membership(
    lwss: Mapping[tuple[str, str], Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    statefulsets: Iterable[Mapping[str, Any]],
    bound_pods: Iterable[Mapping[str, Any]],
    reads: PodReads | None = None,
) -> Membership:
    """The membership of the opted-in ``pods`` in the groups of ``lwss`` (by namespace and
    name), judged by the LWSs' ``statefulsets``; ``bound_pods`` (anyone's, on nodes) carry
    charges too (a pod let through may have lost its labels since). ``reads`` remembers what was
    read of each pod version (the loop's, through its ``DemandMemo``)."""
    pod_list = list(pods)
    uids = {key: str(meta(obj).get("uid") or "") for key, obj in lwss.items()}
    sizes = {key: lws_size(obj) for key, obj in lwss.items()}
    members, strangers = split_members(pod_list, uids, statefulsets, sizes)
    by_group: dict[GroupKey, list[Stranger]] = {}
    for one in strangers:
        by_group.setdefault(GroupKey(one.namespace, one.lws, one.index), []).append(one)
    return Membership(pods_by_group(members, reads), by_group, live_charges(pod_list, bound_pods))
