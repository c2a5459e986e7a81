"""``core.model.owned.statefulset_view``: what the gatekeeper keeps of a watched StatefulSet."""

from __future__ import annotations

from typing import Any

from core_builders import lws, lws_pod, lws_statefulsets

from gatekeeper.core.admission.members import split_members
from gatekeeper.core.model.owned import statefulset_view


def test_a_statefulset_is_kept_without_its_spec_and_reads_the_same() -> None:
    """The view drops the template (a tenant's StatefulSet can be any size) and keeps what
    decides membership: the same pods are members with the views as with the objects."""
    obj = lws("vllm").size(2).worker(gpu_limit=1).uid("u-1").obj()
    pods = [lws_pod("vllm", 0, 0), lws_pod("vllm", 0, 1)]
    whole = lws_statefulsets([obj], pods)
    for sts in whole:
        sts["spec"] = {"template": {"metadata": {"annotations": {"pad": "x" * 100_000}}}}
        sts["status"] = {"replicas": 1}
    views = [statefulset_view(s) for s in whole]
    assert all("spec" not in v and "status" not in v for v in views)
    assert [v["metadata"]["ownerReferences"] for v in views] == [
        s["metadata"]["ownerReferences"] for s in whole
    ]
    assert len(repr(views)) < 2_000 < len(repr(whole))
    uids = {("default", "vllm"): "u-1"}
    members, strangers = split_members(pods, uids, views, {("default", "vllm"): 2})
    assert (members, strangers) == split_members(pods, uids, whole, {("default", "vllm"): 2})
    assert len(members) == 2 and not strangers


def test_a_malformed_statefulset_stays_malformed() -> None:
    bad: dict[str, Any] = {"metadata": "not a map"}
    assert statefulset_view(bad) == {"metadata": "not a map"}
