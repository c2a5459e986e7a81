"""The gatekeeper's pure decision core, one module per concept.

Everything here is a function of plain data (Kubernetes objects as dicts, or the small
frozen values defined here) and does no I/O: no API calls, no sockets, no clock, no
asyncio. That keeps every admission decision reproducible in a unit test and lets the
I/O layer (watches, webhook, records, loops) stay thin: plan here, act in ``controller``.

Shared concepts: ``keys`` (every label, annotation, API version, condition and reason),
``objects`` and ``fields`` (lenient and strict readers), ``lws`` (what is read of an LWS
and its pods), ``groups`` (the groups of an LWS), ``record`` (the ``GroupAdmission``),
``quantity``, ``demand``, ``selectors``, ``nodes``, ``fit`` (node fit), ``quota``,
``queue`` (queue order), ``pool`` (the ``Pool`` object), ``nodepools`` (Karpenter's
objects), ``provisioning`` (what a pool's Karpenter NodePools can still launch),
``planner`` (admission against quota and nodes), ``reasons`` and ``messages`` (why a group
waits), ``gating`` (the gate).
Decisions built on them: ``backends.pools``, ``backends.kueue`` (independent of each
other) and the Kueue AdmissionCheck ``checks.node_fit``.
"""

from gatekeeper.core.demand import (
    GroupDemand,
    PodDemand,
    Resources,
    group_demand,
    pod_demand,
    pod_requests,
)
from gatekeeper.core.fit import Misfit, NodeTable, Placement, fit_group
from gatekeeper.core.gating import is_opted_in, lws_label_patch, pod_gate_patch
from gatekeeper.core.keys import (
    API_GROUP,
    API_VERSION,
    GATEKEEPER_API_VERSION,
    LWS_API_VERSION,
    POOL_KIND,
    POOL_LABEL,
    SCHEDULING_GATE,
)
from gatekeeper.core.nodes import Node, node_usage, parse_node
from gatekeeper.core.planner import Admission, Plan, PoolStatus, Waiting, plan
from gatekeeper.core.pool import (
    NodeFit,
    Pool,
    QueueingStrategy,
    parse_pool,
    pool_capacity,
)
from gatekeeper.core.quantity import (
    QuantityLike,
    format_amount,
    format_quantity,
    format_resources,
    parse_quantity,
    parse_units,
    to_units,
)
from gatekeeper.core.queue import AdmittedGroup, GroupKey, InvalidDemand, WaitingGroup, queue_order
from gatekeeper.core.quota import QuotaCheck, check_quota, is_basic_resource
from gatekeeper.core.reasons import Reason
from gatekeeper.core.selectors import NodeConstraints, NodeSelectorTerm, Requirement, Taint, Toleration

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "GATEKEEPER_API_VERSION",
    "LWS_API_VERSION",
    "POOL_KIND",
    "POOL_LABEL",
    "SCHEDULING_GATE",
    "Admission",
    "AdmittedGroup",
    "GroupDemand",
    "GroupKey",
    "InvalidDemand",
    "Misfit",
    "Node",
    "NodeConstraints",
    "NodeFit",
    "NodeSelectorTerm",
    "NodeTable",
    "Placement",
    "Plan",
    "PodDemand",
    "Pool",
    "PoolStatus",
    "QuantityLike",
    "QueueingStrategy",
    "QuotaCheck",
    "Reason",
    "Requirement",
    "Resources",
    "Taint",
    "Toleration",
    "Waiting",
    "WaitingGroup",
    "check_quota",
    "fit_group",
    "format_amount",
    "format_quantity",
    "format_resources",
    "group_demand",
    "is_basic_resource",
    "is_opted_in",
    "lws_label_patch",
    "node_usage",
    "parse_node",
    "parse_pool",
    "parse_quantity",
    "parse_units",
    "plan",
    "pod_demand",
    "pod_gate_patch",
    "pod_requests",
    "pool_capacity",
    "queue_order",
    "to_units",
]
