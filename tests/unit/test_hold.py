"""A record (or Workload) goes only with its group's pods, however it is deleted.

The ``pools`` decision on records that are being deleted (by the garbage collector after
their LWS, with their namespace, by hand), the writes that release them (the finalizer
lifted, guarded) and the finalizer given to records made before it existed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from core_builders import GPU, gpu_nodes, lws_pod, record
from test_backend_pools import ON_DEMAND, RUNNING, Scene, gpu_lws, keys, quota_pool, rec_name

from gatekeeper.core.backends.pools import PassInputs, plan_writes
from gatekeeper.core.kube.keys import HOLD_FINALIZER, RECORD_PLURAL
from gatekeeper.core.model.record import new_record
from gatekeeper.core.writes.finalizers import (
    FINALIZER_WRITES_PER_PASS,
    hold_patch,
    release_patch,
    release_writes,
)
from gatekeeper.core.writes.plan import Memory, Op, Plan, Write

OTHER = "example.com/other"
"""Someone else's finalizer: never removed by the gatekeeper."""


def held_record(lws_obj: dict[str, Any], index: int, **kwargs: Any) -> dict[str, Any]:
    """A record as the gatekeeper makes it now: with its finalizer, a UID and a resourceVersion."""
    kwargs.setdefault("finalizers", [HOLD_FINALIZER])
    return record(lws_obj, index, version="41", **kwargs)


def running(name: str, index: int = 0, **kwargs: Any) -> list[dict[str, Any]]:
    return [lws_pod(name, index, w, pool=ON_DEMAND, **{**RUNNING, **kwargs}) for w in range(2)]


# ----- the decision ------------------------------------------------------------------------

GONE = gpu_lws("gone", replicas=1).obj()
"""Deleted (garbage collector, namespace): the pass no longer sees it."""
STAYS = gpu_lws("stays", replicas=1).obj()
LEAVING = {**gpu_lws("leaving", replicas=1).obj()}
LEAVING["metadata"] = {**LEAVING["metadata"], "deletionTimestamp": "2025-01-02T00:00:00Z"}


def gc(admitted: bool) -> dict[str, Any]:
    return held_record(GONE, 0, admitted=admitted, deleted=True)


def by_hand(lws_obj: dict[str, Any], admitted: bool) -> dict[str, Any]:
    return held_record(lws_obj, 0, admitted=admitted, deleted=True)


FINISHED = [lws_pod("gone", 0, w, pool=ON_DEMAND, phase="Succeeded", gated=False) for w in range(2)]
GATED = {"gated": True, "node_name": None}


@pytest.mark.parametrize(
    ("lwss", "rec", "pods", "kept"),
    [
        pytest.param([], gc(True), running("gone"), True, id="gc-running"),
        pytest.param([], gc(True), running("gone", deleting=True), True, id="gc-pods-terminating"),
        pytest.param([], gc(True), [], False, id="gc-pods-gone"),
        pytest.param([], gc(True), FINISHED, False, id="gc-pods-finished"),
        pytest.param([], gc(False), running("gone", **GATED), False, id="gc-never-admitted"),
        pytest.param([LEAVING], by_hand(LEAVING, True), running("leaving"), True, id="lws-deleting"),
        pytest.param([STAYS], by_hand(STAYS, True), running("stays"), True, id="by-hand-running"),
        pytest.param([STAYS], by_hand(STAYS, True), [], False, id="by-hand-no-pod"),
        pytest.param([STAYS], by_hand(STAYS, False), running("stays", **GATED), False, id="by-hand-waiting"),
    ],
)
def test_a_deleted_record_is_kept_and_charged_while_its_admitted_group_has_a_live_pod(
    lwss: list[dict[str, Any]], rec: dict[str, Any], pods: list[dict[str, Any]], kept: bool
) -> None:
    """The pool holds one group (2 GPUs, nodes for more): a record that is kept holds them,
    and the LWS that waits behind it is admitted only once it is released."""
    rec.setdefault("status", {}).update({"demand": {GPU: "2"}, "pods": 2})
    waiting = gpu_lws("next", replicas=1, age=10).obj()
    scene = Scene(
        lwss=[*lwss, waiting],
        nodes=gpu_nodes(6, pool=ON_DEMAND),
        pools=[quota_pool(gpus=2)],
        records=[rec],
        pods=pods,
    )
    actions = scene.decide()
    key = (rec["metadata"]["namespace"], rec["metadata"]["name"])
    assert (key not in actions.release) == kept
    assert keys(actions.admit) == ([] if kept else [("next", 0)])
    assert actions.pools[ON_DEMAND].used[GPU] == 2, "the kept record's 2 GPUs, or the next group's"
    # A deleted record is never made again under its name, nor admitted, nor told it waits.
    assert key not in {(g.key.namespace, g.record) for g in actions.create_records}
    assert key not in {(w.group.key.namespace, w.group.record) for w in actions.waiting}


def test_a_group_whose_record_was_deleted_by_hand_keeps_letting_its_pods_through() -> None:
    """Its reservation holds while it runs: a worker made later (LeaderReady, a restart) goes
    through on it as on any admitted record; a new record is made only once it is gone."""
    rec = held_record(STAYS, 0, admitted=True, deleted=True, demand={GPU: "2"}, pods=2)
    pods = [lws_pod("stays", 0, 0, pool=ON_DEMAND, **RUNNING), lws_pod("stays", 0, 1, pool=ON_DEMAND)]
    scene = Scene(lwss=[STAYS], nodes=gpu_nodes(4, pool=ON_DEMAND), pools=[quota_pool(gpus=2)], records=[rec])
    scene.pods = pods
    actions = scene.decide()
    assert actions.ungate == (("default", "stays-0-1"),)
    assert actions.release == () and actions.create_records == ()
    scene.pods = []
    gone = scene.decide()
    assert gone.release == (rec_name(STAYS, 0),)
    assert gone.create_records == () and gone.admit == (), "a new record once the deleted one is gone"
    scene.records = []
    assert keys(scene.decide().create_records) == [("stays", 0)]


# ----- the writes --------------------------------------------------------------------------


def plan(scene: Scene) -> Plan:
    inputs = PassInputs(scene.snap(), Memory(), datetime(2026, 12, 1, tzinfo=UTC), 0.0)
    return plan_writes(scene.decide(), inputs)


def test_new_records_carry_the_finalizer() -> None:
    assert new_record(STAYS, 0)["metadata"]["finalizers"] == [HOLD_FINALIZER]


def test_the_release_patch_tests_uid_version_and_place_and_removes_only_ours() -> None:
    rec = held_record(STAYS, 0, finalizers=[OTHER, HOLD_FINALIZER])
    assert release_patch(rec) == [
        {"op": "test", "path": "/metadata/uid", "value": "record-stays-0"},
        {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
        {"op": "test", "path": "/metadata/finalizers/1", "value": HOLD_FINALIZER},
        {"op": "remove", "path": "/metadata/finalizers/1"},
    ]
    assert release_patch(held_record(STAYS, 0, finalizers=[OTHER])) is None


@pytest.mark.parametrize(
    ("finalizers", "deleted", "ops"),
    [
        pytest.param(None, False, ["patch", "delete"], id="held-live: finalizer off, then delete"),
        pytest.param(None, True, ["patch"], id="held-deleted: finalizer off, and it is gone"),
        pytest.param([], False, ["delete"], id="older-live: delete"),
        pytest.param([OTHER], True, [], id="someone-else's: nothing"),
    ],
)
def test_how_a_record_is_released(finalizers: list[str] | None, deleted: bool, ops: list[str]) -> None:
    rec = held_record(STAYS, 0, deleted=deleted, **({} if finalizers is None else {"finalizers": finalizers}))
    writes = release_writes(RECORD_PLURAL, "default", rec["metadata"]["name"], rec, tag="release")
    seen: list[str] = []
    step: tuple[Write, ...] = writes
    while step:
        [one] = step
        seen.append("patch" if one.op is Op.JSON_PATCH else "delete")
        if one.op is Op.DELETE:
            assert one.uid == "record-stays-0", "a delete carries the UID it was decided on"
        step = one.then
    assert seen == ops
    first = writes[0].tag if writes else None
    assert first == {2: "unhold", 1: "release", 0: None}[len(ops)], "the last step is the release"


def test_a_pass_releases_at_most_so_many_records_and_the_next_the_rest() -> None:
    """A deleted namespace of thousands of records, their pods gone: released over passes."""
    many = FINALIZER_WRITES_PER_PASS * 2 + 7
    gone = [gpu_lws(f"g{i}", replicas=1).obj() for i in range(many)]
    deleted = [held_record(o, 0, admitted=True, deleted=True) for o in gone]
    scene = Scene(pools=[quota_pool()], records=deleted)
    first = plan(scene)
    assert len(first[0]) == FINALIZER_WRITES_PER_PASS
    assert all(w.op is Op.JSON_PATCH and not w.then for w in first[0])
    done = {w.name for w in first[0]}
    scene.records = [r for r in scene.records if r["metadata"]["name"] not in done]
    assert len(plan(scene)[0]) == FINALIZER_WRITES_PER_PASS
    assert not {w.name for w in plan(scene)[0]} & done


def test_older_records_the_pass_keeps_are_given_the_finalizer_last() -> None:
    """Records made before the finalizer existed: kept ones get it (so a later LWS delete is
    held too), released ones are simply deleted, deleted ones cannot get it (the API refuses)."""
    kept = record(STAYS, 0, admitted=True, demand={GPU: "2"}, pods=2, version="9")
    released = record(GONE, 0, admitted=False, version="9")
    deleted = record(gpu_lws("gc", replicas=1).obj(), 0, admitted=True, deleted=True, version="9")
    scene = Scene(
        lwss=[STAYS],
        nodes=gpu_nodes(2, pool=ON_DEMAND),
        pools=[quota_pool(gpus=2)],
        records=[kept, released, deleted],
        pods=running("stays") + running("gc"),
    )
    stages = plan(scene)
    holds = [w for w in stages[-1] if w.tag == "hold"]
    assert [(w.name, w.body) for w in holds] == [
        (
            kept["metadata"]["name"],
            [
                {"op": "test", "path": "/metadata/uid", "value": "record-stays-0"},
                {"op": "test", "path": "/metadata/resourceVersion", "value": "9"},
                {"op": "add", "path": "/metadata/finalizers", "value": [HOLD_FINALIZER]},
            ],
        )
    ]
    assert [(w.op, w.name) for w in stages[0]] == [(Op.DELETE, released["metadata"]["name"])]
    assert hold_patch({**kept, "metadata": {**kept["metadata"], "finalizers": [OTHER]}}) == [
        *holds[0].body[:2],
        {"op": "add", "path": "/metadata/finalizers/-", "value": HOLD_FINALIZER},
    ]
    assert hold_patch(held_record(STAYS, 0)) is None
