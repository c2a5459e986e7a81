"""The ``volcano`` backend keeps a group's record (and so its PodGroup) while a pod let
through on it lives, found by its mark (``core.model.charge``), whatever its labels say now."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from core_builders import lws_pod
from test_backend_volcano import QUEUE, UID, pg, rec, snap, vllm
from test_charge import marked

from gatekeeper.core.backends.volcano import decide_volcano
from gatekeeper.core.model.charge import charge_toleration

MARK = charge_toleration(UID, 1)


def unlabelled(*, mark: bool = True) -> list[dict[str, Any]]:
    """Group 1's pods, let through and bound; their pool label removed since."""
    pods = [marked(lws_pod("vllm", 1, w, pool=QUEUE), MARK, unlabelled=True) for w in (0, 1)]
    if not mark:
        for pod in pods:
            pod["spec"]["tolerations"] = [t for t in pod["spec"]["tolerations"] if t != MARK]
    return pods


@pytest.mark.parametrize(("mark", "kept"), [(True, True), (False, False)], ids=["marked", "unmarked"])
def test_a_scaled_away_group_is_kept_while_pods_charged_to_it_run(mark: bool, kept: bool) -> None:
    obj = vllm(replicas=1)
    recs = [rec(obj, 0, admitted=True), rec(obj, 1, admitted=True)]
    pods = unlabelled(mark=mark)
    view = dataclasses.replace(
        snap(obj, recs, [pg(obj, 0, "Running"), pg(obj, 1, "Running")], []), bound_pods=pods
    )
    released = [name for _, name in decide_volcano(view).release]
    assert (recs[1]["metadata"]["name"] not in released) is kept


def test_pods_are_let_through_on_volcano_with_their_mark() -> None:
    obj = vllm()
    recs = [rec(obj, i) for i in range(3)]
    pods = [lws_pod("vllm", 0, w, pool=QUEUE) for w in (0, 1)]
    acts = decide_volcano(snap(obj, recs, [pg(obj, 0, "Inqueue")], pods))
    assert len(acts.ungate) == 2
    assert all(u.tolerations == (charge_toleration(UID, 0),) for u in acts.ungate)
