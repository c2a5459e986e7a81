"""The ``kueue`` backend: one Kueue Workload per LWS group, and gates that follow it.

``decide`` is the pass (``decide_kueue``); ``workload`` is what a Workload of ours is;
``status`` is what a record says (``RecordStatus``); ``writes`` is the record patch that
mirrors it (or none, when the record already says so).
"""

from gatekeeper.core.backends.kueue.decide import (
    NEVER_FIT_RETRY_MAX_SECONDS,
    NEVER_FIT_RETRY_SECONDS,
    KueueActions,
    KueueSnapshot,
    decide_kueue,
)
from gatekeeper.core.backends.kueue.status import RecordStatus
from gatekeeper.core.backends.kueue.workload import clear_admission_status, new_workload
from gatekeeper.core.backends.kueue.writes import plan_writes, record_status_patch

__all__ = [
    "NEVER_FIT_RETRY_MAX_SECONDS",
    "NEVER_FIT_RETRY_SECONDS",
    "KueueActions",
    "KueueSnapshot",
    "RecordStatus",
    "clear_admission_status",
    "decide_kueue",
    "new_workload",
    "plan_writes",
    "record_status_patch",
]
