"""Groups the ``kueue`` backend finds running on another backend's admission: adopted, not stopped.

Why this exists: switching a running install from ``pools`` to ``kueue`` leaves records that
say ``Admitted`` (written by the ``pools`` backend), ungated running pods and no Workload.
Read as a Kueue group, that is a group whose Workload is not admitted, whose pods the
backend would delete. A platform team switching backends expects running inference to go
on running, so such a group is *adopted*: its Workload is made and queued, its pods are
kept (and pods it gets later of the revision it runs go through, as under ``pools``), and
its record stays ``Admitted`` with reason ``Adopting`` until Kueue admits the Workload;
from then on it is a Kueue group like any other (an eviction stops it). If Kueue never
admits it, it runs on until it goes (scaled away, its LWS deleted, its pods deleted by a
person); the record says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gatekeeper.core.kube.keys import ADMITTED, ADOPTING_REASON
from gatekeeper.core.kube.objects import as_map, condition
from gatekeeper.core.model.lws import GroupPod
from gatekeeper.core.model.record import is_admitted

__all__ = ["adopted_elsewhere", "adopting_message", "old_pods"]


def adopted_elsewhere(record: Mapping[str, Any] | None) -> bool:
    """Does the record say its group runs on an admission the ``kueue`` backend did not make?

    That is a record ``Admitted`` by another backend (the ``pools`` backend never writes
    ``status.workload``), or one this backend marked ``Adopting``.
    """
    if record is None or not is_admitted(record):
        return False
    if condition(record, ADMITTED).get("reason") == ADOPTING_REASON:
        return True
    return not as_map(record.get("status")).get("workload")


def old_pods(record: Mapping[str, Any], members: Sequence[GroupPod]) -> set[str]:
    """Gated pods of an adopted group that may go through: of the revision its running pods
    (or its record) say it runs, as the ``pools`` backend lets restarts through."""
    running = {p.revision for p in members if p.live and not p.gated}
    noted = str(as_map(record.get("status")).get("templateRevision") or "")
    old = running | ({noted} if noted else set())
    return {p.name for p in members if p.live and not p.terminating and p.gated and p.revision in old}


def adopting_message(index: int, workload: str, why: str) -> str:
    """What the record of an adopted group says while Kueue has not admitted its Workload."""
    return (
        f"group {index} runs on the admission it had before the kueue backend took over; its "
        f"pods are kept until Kueue admits Workload {workload}, or until the group goes "
        f"(Kueue: {why})"
    )
