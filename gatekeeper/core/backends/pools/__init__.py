"""The ``pools`` backend: the gatekeeper's own ``Pool`` objects decide.

``decide`` is the pass; ``pass_writes`` turns what it decided into a plan of writes
(``plan_writes``) in the order they must happen, from the single patches in ``writes``:
the exact record and Pool status patches (or none, when the object already says so),
gates, Events.
"""

from gatekeeper.core.backends.pools.decide import Actions, Admit, Snapshot, WaitStatus, decide
from gatekeeper.core.backends.pools.holdback import held_back, hold_node_pools
from gatekeeper.core.backends.pools.pass_writes import PassInputs, plan_writes
from gatekeeper.core.backends.pools.writes import (
    MESSAGE_REFRESH_SECONDS,
    admit_status,
    admitted_message,
    pool_status_patch,
    restated_admission,
    wait_status,
)

__all__ = [
    "MESSAGE_REFRESH_SECONDS",
    "Actions",
    "Admit",
    "PassInputs",
    "Snapshot",
    "WaitStatus",
    "admit_status",
    "admitted_message",
    "decide",
    "held_back",
    "hold_node_pools",
    "plan_writes",
    "pool_status_patch",
    "restated_admission",
    "wait_status",
]
