"""The ``kueue`` backend: one Kueue Workload per LWS group, and gates that follow it.

``decide`` is the pass (``decide_kueue``); ``workload`` is what a Workload of ours is.
"""

from gatekeeper.core.backends.kueue.decide import (
    NEVER_FIT_RETRY_MAX_SECONDS,
    NEVER_FIT_RETRY_SECONDS,
    KueueActions,
    KueueSnapshot,
    RecordStatus,
    decide_kueue,
)
from gatekeeper.core.backends.kueue.workload import clear_admission_status, new_workload

__all__ = [
    "NEVER_FIT_RETRY_MAX_SECONDS",
    "NEVER_FIT_RETRY_SECONDS",
    "KueueActions",
    "KueueSnapshot",
    "RecordStatus",
    "clear_admission_status",
    "decide_kueue",
    "new_workload",
]
