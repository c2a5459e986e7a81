"""The ``volcano`` backend: one Volcano PodGroup per LWS group, and gates that follow it.

``decide`` is the pass (``decide_volcano``); ``podgroup`` is what a PodGroup of ours is
and what Volcano's answer on it says; ``writes`` is the plan of writes for a pass.
"""

from gatekeeper.core.backends.volcano.decide import VolcanoActions, VolcanoSnapshot, decide_volcano
from gatekeeper.core.backends.volcano.podgroup import (
    new_pod_group,
    pod_group_name,
    volcano_pod_patch,
    volcano_state,
)
from gatekeeper.core.backends.volcano.status import VolcanoStatus
from gatekeeper.core.backends.volcano.writes import plan_writes

__all__ = [
    "VolcanoActions",
    "VolcanoSnapshot",
    "VolcanoStatus",
    "decide_volcano",
    "new_pod_group",
    "plan_writes",
    "pod_group_name",
    "volcano_pod_patch",
    "volcano_state",
]
