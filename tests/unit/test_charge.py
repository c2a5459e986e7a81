"""``core.model.charge`` and the pools backend's records kept by it: the charge follows the pods."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from core_builders import lws, lws_pod, lws_statefulsets, node, pool, read_pools, record

from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools.decide import Snapshot, decide
from gatekeeper.core.kube.keys import CHARGE_KEY, POOL_LABEL
from gatekeeper.core.model.charge import charge_toleration, charged, charged_to, live_charges, resize_refusal
from gatekeeper.core.model.nodes import bound_pod_view

MARK = charge_toleration("u-1", 0)


def marked(pod: dict[str, Any], mark: dict[str, Any] = MARK, *, unlabelled: bool = False) -> dict[str, Any]:
    """``pod`` let through (ungated, bound, Running) with ``mark``; ``unlabelled``: its pool label
    removed since, as a tenant may."""
    out = copy.deepcopy(pod)
    out["spec"].pop("schedulingGates", None)
    out["spec"]["nodeName"] = "n0"
    out["spec"]["tolerations"] = [{"key": "other", "operator": "Exists"}, mark]
    out["status"]["phase"] = "Running"
    if unlabelled:
        del out["metadata"]["labels"][POOL_LABEL]
    return out


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("u-1.0", ("default", "u-1", 0)),
        ("a.b.c.12", ("default", "a.b.c", 12)),
        ("u-1", None),
        ("u-1.x", None),
        (".3", None),
        ("u-1.1234567", None),
        (7, None),
    ],
    ids=["mark", "dotted-uid", "no-index", "bad-index", "no-uid", "index-too-long", "not-a-string"],
)
def test_charged_to_reads_the_mark(value: object, expected: tuple[str, str, int] | None) -> None:
    pod = marked(lws_pod("vllm", 0), {**MARK, "value": value})
    assert charged_to(pod) == expected


def test_live_charges_count_each_pod_once_and_no_finished_one() -> None:
    leader, worker = marked(lws_pod("vllm", 0)), marked(lws_pod("vllm", 0, 1))
    done = marked(lws_pod("vllm", 0, 2))
    done["status"]["phase"] = "Succeeded"
    plain = lws_pod("vllm", 1)
    charges = live_charges([leader, plain], [bound_pod_view(leader), worker, done])
    assert charges == {("default", "u-1", 0): ("vllm-0", "vllm-0-1")}
    lws_obj = lws("vllm").uid("u-1").obj()
    assert charged(record(lws_obj, 0, admitted=True), charges) == ("vllm-0", "vllm-0-1")
    assert charged(record(lws_obj, 1, admitted=True), charges) == ()
    other_namespace = record(lws("vllm", namespace="team-b").uid("u-1").obj(), 0, admitted=True)
    assert charged(other_namespace, charges) == (), "a mark counts only in its own namespace"


def test_the_bound_pods_view_keeps_the_mark_and_no_other_toleration() -> None:
    view = bound_pod_view(marked(lws_pod("vllm", 0)))
    assert view["spec"]["tolerations"] == [MARK]
    assert "tolerations" not in bound_pod_view(lws_pod("vllm", 0, node_name="n0"))["spec"]


FIRST = lws("vllm").pool("a").uid("u-1").size(2).replicas(1).worker(gpu_limit=1).obj()
SECOND = lws("second").pool("a").uid("u-2").size(2).replicas(1).worker(gpu_limit=1).obj()
SAME_NAME = lws("vllm").pool("a").uid("u-3").size(2).replicas(1).worker(gpu_limit=1).obj()


def snap(
    lwss: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    bound: list[dict[str, Any]],
    records: list[dict[str, Any]],
) -> Snapshot:
    return Snapshot(
        lwss=lwss,
        pods=pods,
        bound_pods=[bound_pod_view(p) for p in bound],
        nodes=[node(f"n{i}").labels(pool="a").alloc(gpu=1).parsed() for i in range(4)],
        pools=read_pools([pool("a").selector(pool="a").quota(gpu=2).obj()]),
        records=records,
        statefulsets=lws_statefulsets(lwss, pods),
    )


def orphans() -> list[dict[str, Any]]:
    """The first LWS's group, let through, its pool label removed: no longer an opted-in pod."""
    return [marked(lws_pod("vllm", 0, w), unlabelled=True) for w in (0, 1)]


def admitted_first(**kwargs: Any) -> dict[str, Any]:
    return record(FIRST, 0, admitted=True, pool="a", demand={"nvidia.com/gpu": "2"}, pods=2, **kwargs)


@pytest.mark.parametrize(
    ("lwss", "new_pods"),
    [
        ([SECOND], [lws_pod("second", 0), lws_pod("second", 0, 1)]),
        ([SAME_NAME], []),
    ],
    ids=["another-lws", "a-same-named-lws"],
)
def test_a_record_whose_lws_is_gone_is_kept_while_pods_charged_to_it_run(
    lwss: list[dict[str, Any]], new_pods: list[dict[str, Any]]
) -> None:
    """The LWS deleted with --cascade=orphan, its pods' pool label removed first: only the
    bound pods' view still shows them, by their mark; a second LWS waits for the quota."""
    actions = decide(snap(lwss, new_pods, orphans(), [admitted_first()]))
    assert actions.release == (), "the first group's record stays while its pods run"
    assert actions.admit == ()
    assert actions.pools["a"].used.get("nvidia.com/gpu") == 2
    assert [w.reason for w in actions.waiting] == [Reason.WAITING_FOR_QUOTA]
    # The pods go: so does the record, and the second group is admitted.
    gone = decide(snap(lwss, new_pods, [], [admitted_first()]))
    assert [k[1] for k in gone.release] == [admitted_first()["metadata"]["name"]]
    assert [a.group.key.name for a in gone.admit] == [lwss[0]["metadata"]["name"]]


def test_a_deleted_record_is_kept_while_pods_charged_to_it_run() -> None:
    deleted = admitted_first(deleted=True, finalizers=["lws-gatekeeper.io/group-pods"])
    actions = decide(snap([FIRST], [], orphans(), [deleted]))
    assert actions.release == ()
    assert decide(snap([FIRST], [], [], [deleted])).release != ()


def test_a_scaled_away_group_is_kept_while_pods_charged_to_it_run() -> None:
    scaled = lws("vllm").pool("a").uid("u-1").size(2).replicas(0).worker(gpu_limit=1).obj()
    actions = decide(snap([scaled], [], orphans(), [admitted_first()]))
    assert actions.release == ()
    assert actions.pools["a"].used.get("nvidia.com/gpu") == 2


def test_a_mark_copied_into_another_namespace_holds_nothing_there() -> None:
    elsewhere = [marked(lws_pod("vllm", 0, w, namespace="team-b"), unlabelled=True) for w in (0, 1)]
    actions = decide(snap([SECOND], [], elsewhere, [admitted_first()]))
    assert [k[1] for k in actions.release] == [admitted_first()["metadata"]["name"]]


def test_pods_are_let_through_with_their_mark() -> None:
    pods = [lws_pod("vllm", 0, w) for w in (0, 1)]
    actions = decide(snap([FIRST], pods, [], [record(FIRST, 0, admitted=False)]))
    assert sorted(actions.steer) == [("default", "vllm-0"), ("default", "vllm-0-1")]
    assert all(CHARGE_KEY in [t.get("key") for t in u.tolerations] for u in actions.steer.values())
    assert all(MARK in u.tolerations for u in actions.steer.values())


def _running(cpu: str, memory: str | None = None, *, mark: bool = True) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    resources = {"requests": requests, "limits": {"nvidia.com/gpu": "1"}}
    pod: dict[str, Any] = {
        "metadata": {"name": "lws-0-1", "namespace": "team-a", "uid": "p1"},
        "spec": {
            "containers": [{"name": "c", "resources": resources}],
            "tolerations": [charge_toleration("u-1", 0)] if mark else [],
        },
    }
    return pod


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (_running("1"), _running("500m"), None),  # lowering stays allowed
        (_running("1"), _running("1"), None),
        (_running("1"), _running("2"), "not raise them (2 cpu asked)"),
        (_running("1"), _running("1", "64Gi"), "not raise them (64Gi memory asked)"),
        (_running("1", "1Gi"), _running("500m", "2Gi"), "(2Gi memory asked)"),  # one down, one up
        (_running("1", mark=False), _running("2", mark=False), None),  # never let through: not ours
        (_running("1"), _running("many"), "its requests cannot be read"),
    ],
)  # fmt: skip
def test_a_resize_of_a_pod_let_through_may_lower_not_raise(
    old: dict[str, Any], new: dict[str, Any], said: str | None
) -> None:
    got = resize_refusal(new, old)
    assert (got is None) is (said is None), got
    assert said is None or (got is not None and said in got and got.startswith("pod lws-0-1")), got
    if said and "asked" in said:
        assert got is not None and "is charged to it at what it asked then (1 cpu" in got
