"""One capacity reservation shared by several member clusters, granted on a hub.

Why this exists: a capacity reservation (a shared cloud reservation of machines) may be
used by several clusters, and no cluster's own Pool sees what the others took. The hub
keeps a ledger: a ``Reservation`` (``spec.capacity``) and one ``ReservationClaim`` per
group of any member. This package is the pure part: reading those objects
(``objects``), deciding which claims to grant (``ledger``), which members are gone
(``heartbeat``), what an operator's release takes (``release``), what a grant that got
no answer needs before its room is given again (``unsure``), and the words and status
both sides show (``words``). Called by the hub's controller (``controller.hub``) and by
the ``pools`` backend of a member (``core.backends.pools.reserve``). Independent of the
other backends (the import contract says so).
"""

from gatekeeper.core.reservation.heartbeat import (
    DEFAULT_LEASE_SECONDS,
    HEARTBEAT_PREFIX,
    Beat,
    Heartbeats,
    heartbeat_body,
    heartbeat_name,
    parse_heartbeat,
)
from gatekeeper.core.reservation.ledger import (
    Change,
    ClaimReason,
    ClusterShare,
    Grant,
    Ledger,
    ReservationStatus,
    Waiting,
    decide,
    moves_without_reservation,
    order,
    without_reservation,
)
from gatekeeper.core.reservation.objects import (
    CLAIM_KIND,
    CLAIM_PLURAL,
    CLUSTER_LABEL,
    MEMBER_NAMESPACE_PREFIX,
    RESERVATION_KIND,
    RESERVATION_PLURAL,
    BadClaim,
    Claim,
    ClaimMemo,
    ClaimState,
    Reservation,
    claim_body,
    claim_name,
    member_namespace,
    parse_claim,
    parse_reservation,
    valid_cluster_name,
)
from gatekeeper.core.reservation.preemption import GIVE_BACK_REQUESTED, asked_of
from gatekeeper.core.reservation.release import ReleasePlan, plan_release
from gatekeeper.core.reservation.view import SOURCE_CHECK, SOURCE_LABEL, ClaimWrites, HubView
from gatekeeper.core.reservation.words import Shares, group_waits, hub_unreachable, parse_shares, status_body

__all__ = [
    "CLAIM_KIND",
    "CLAIM_PLURAL",
    "CLUSTER_LABEL",
    "DEFAULT_LEASE_SECONDS",
    "GIVE_BACK_REQUESTED",
    "HEARTBEAT_PREFIX",
    "MEMBER_NAMESPACE_PREFIX",
    "RESERVATION_KIND",
    "RESERVATION_PLURAL",
    "SOURCE_CHECK",
    "SOURCE_LABEL",
    "BadClaim",
    "Beat",
    "Change",
    "Claim",
    "ClaimMemo",
    "ClaimReason",
    "ClaimState",
    "ClaimWrites",
    "ClusterShare",
    "Grant",
    "Heartbeats",
    "HubView",
    "Ledger",
    "ReleasePlan",
    "Reservation",
    "ReservationStatus",
    "Shares",
    "Waiting",
    "asked_of",
    "claim_body",
    "claim_name",
    "decide",
    "group_waits",
    "heartbeat_body",
    "heartbeat_name",
    "hub_unreachable",
    "member_namespace",
    "moves_without_reservation",
    "order",
    "parse_claim",
    "parse_heartbeat",
    "parse_reservation",
    "parse_shares",
    "plan_release",
    "status_body",
    "valid_cluster_name",
    "without_reservation",
]
