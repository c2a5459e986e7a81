"""Each controller's pass, run by the one ``PassLoop``, against a fake ``Kube`` and filled caches.

A fake is right here: this tests what one pass writes, in which order and with which
guard, from given caches; what the cluster does with those writes is proved end to end in
``tests/e2e``. The caches are the real ``Caches`` with their informers filled by hand.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from core_builders import lws, lws_pod, lws_statefulsets, node, pool

from gatekeeper.controller import app
from gatekeeper.controller import caches as caches_module
from gatekeeper.controller import resources as r
from gatekeeper.controller.backends.kueue import KueueBackend
from gatekeeper.controller.backends.pools import PoolsBackend
from gatekeeper.controller.caches import Caches
from gatekeeper.controller.checks.node_fit import NodeFitCheck
from gatekeeper.controller.errors import Conflict, NamespaceTerminating, PermanentError, TemporaryError
from gatekeeper.controller.informer import Informer
from gatekeeper.controller.loop import PassLoop
from gatekeeper.core.kube.keys import (
    ADMITTED,
    KUEUE_API_VERSION,
    NODE_FIT_CONTROLLER,
    POOL_LABEL,
    SCHEDULING_GATE,
)
from gatekeeper.core.model.nodes import parse_node
from gatekeeper.core.model.record import new_record
from gatekeeper.core.plugin.decided import Decided

NS = "team"


class FakeKube:
    """Records every write; ``create`` answers as the API server would (uid, resourceVersion)."""

    def __init__(self, fail: dict[str, Exception] | None = None) -> None:
        self.writes: list[tuple[str, str, str, Any]] = []
        self.where: list[tuple[str, str | None, str]] = []
        """(verb, namespace, name) of each delete and patch."""
        self.made: dict[tuple[str, str], dict[str, Any]] = {}
        self.fail = fail or {}
        self._rv = itertools.count(100)

    def _record(self, verb: str, res: r.Resource, name: str, body: Any) -> None:
        self.writes.append((verb, res.plural, name, body))
        error = self.fail.get(f"{verb} {res.plural}")
        if error is not None:
            raise error

    async def create(self, res: r.Resource, obj: dict[str, Any]) -> dict[str, Any]:
        self._record("create", res, obj["metadata"]["name"], obj)
        made = {**obj, "metadata": {**obj["metadata"], "uid": f"uid-{next(self._rv)}"}}
        made["metadata"]["resourceVersion"] = str(next(self._rv))
        self.made[(res.plural, obj["metadata"]["name"])] = made
        return made

    async def delete(
        self, res: r.Resource, name: str, namespace: str | None = None, *, uid: str | None = None
    ) -> None:
        self.where.append(("delete", namespace, name))
        self._record("delete", res, name, {"uid": uid})

    async def patch_status(
        self,
        res: r.Resource,
        name: str,
        namespace: str | None,
        status: Any,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        self.where.append(("patch_status", namespace, name))
        self._record("patch_status", res, name, {"status": status, "guard": resource_version})
        made = self.made.get((res.plural, name))
        if made is None:
            return {}
        # As the API server answers a merge patch of the status of an object it made.
        made = {**made, "status": {**made.get("status", {}), **status}}
        made["metadata"] = {**made["metadata"], "resourceVersion": str(next(self._rv))}
        self.made[(res.plural, name)] = made
        return made

    async def merge_patch(
        self, res: r.Resource, name: str, namespace: str | None, patch: Any
    ) -> dict[str, Any]:
        self.where.append(("merge_patch", namespace, name))
        self._record("merge_patch", res, name, patch)
        return {}

    async def json_patch(self, res: r.Resource, name: str, namespace: str | None, ops: Any) -> dict[str, Any]:
        self._record("json_patch", res, name, ops)
        return {}

    async def apply_status(
        self, res: r.Resource, name: str, namespace: str | None, body: Any, *, field_manager: str
    ) -> dict[str, Any]:
        self._record("apply_status", res, name, body)
        return {}

    async def event(self, about: Any, *, reason: str, message: str, warning: bool = False) -> None:
        self.writes.append(("event", "events", reason, message))

    def verbs(self) -> list[tuple[str, str, str]]:
        return [(verb, plural, name) for verb, plural, name, _ in self.writes]


def fill(inf: Informer, *objs: dict[str, Any]) -> None:
    for obj in objs:
        inf.objects[(obj["metadata"].get("namespace", ""), obj["metadata"]["name"])] = obj
    inf.changes += 1


def gpu_node(name: str, label: str, gpus: int = 1) -> dict[str, Any]:
    return node(name).labels(pool=label).alloc(gpu=gpus).obj()


def opted_in(name: str, queue: str, uid: str = "u-1") -> dict[str, Any]:
    obj = lws(name, NS).pool(queue).uid(uid).size(2).replicas(1).worker(gpu_limit=1).obj()
    obj["metadata"]["generation"] = 1
    return obj


def loop_of(controller: Any) -> PassLoop:
    return PassLoop(controller, resync=60.0, concurrency=4)


@pytest.mark.anyio
async def test_pools_pass_creates_the_record_admits_it_guarded_then_lifts_both_gates() -> None:
    kube, caches = FakeKube(), Caches(None)
    backend = PoolsBackend(kube, caches)  # type: ignore[arg-type]
    vllm = opted_in("vllm", "a")
    fill(backend.lws, vllm)
    pods = [lws_pod("vllm", 0, 0, namespace=NS), lws_pod("vllm", 0, 1, namespace=NS)]
    fill(backend.pods, *pods)
    fill(backend.statefulsets, *lws_statefulsets([vllm], pods))
    fill(backend.nodes, gpu_node("n0", "a"), gpu_node("n1", "a"))
    fill(backend.pools, pool("a").quota(gpu=2).obj())
    await loop_of(backend).pass_once()

    record = new_record(vllm, 0)["metadata"]["name"]
    verbs = kube.verbs()
    assert verbs[0] == ("create", "groupadmissions", record)
    admit = verbs.index(("patch_status", "groupadmissions", record))
    ungates = [i for i, v in enumerate(verbs) if v[0] == "json_patch"]
    assert sorted(verbs[i][2] for i in ungates) == ["vllm-0", "vllm-0-1"]
    assert all(i > admit for i in ungates), "the record is admitted before any gate is lifted"
    patch = kube.writes[admit][3]
    assert patch["guard"] is not None, "the admission is guarded by the created record's resourceVersion"
    assert patch["status"]["conditions"][0]["type"] == ADMITTED
    assert patch["status"]["conditions"][0]["status"] == "True"
    ops = kube.writes[ungates[0]][3]
    assert ops[0] == {"op": "test", "path": "/spec/schedulingGates/0/name", "value": SCHEDULING_GATE}
    assert ("patch_status", "pools", "a") in verbs


@pytest.mark.anyio
async def test_pools_pass_whose_admission_write_conflicts_lifts_no_gate_and_asks_for_another_pass() -> None:
    kube, caches = FakeKube(fail={"patch_status groupadmissions": Conflict("409: changed")}), Caches(None)
    backend = PoolsBackend(kube, caches)  # type: ignore[arg-type]
    fill(backend.lws, opted_in("vllm", "a"))
    fill(backend.pods, lws_pod("vllm", 0, 0, namespace=NS), lws_pod("vllm", 0, 1, namespace=NS))
    fill(backend.nodes, gpu_node("n0", "a"), gpu_node("n1", "a"))
    fill(backend.pools, pool("a").quota(gpu=2).obj())
    loop = loop_of(backend)
    await loop.pass_once()
    assert not any(v[0] == "json_patch" for v in kube.verbs())
    assert loop._dirty.is_set(), "a write that met a Conflict asks for another pass"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("error", "retried"),
    [(TemporaryError("503: unavailable"), True), (PermanentError("400: bad request", code=400), False)],
)
async def test_a_failed_write_is_retried_only_when_temporary(error: Exception, retried: bool) -> None:
    kube, caches = FakeKube(fail={"create groupadmissions": error}), Caches(None)
    backend = PoolsBackend(kube, caches)  # type: ignore[arg-type]
    fill(backend.lws, opted_in("vllm", "a"))
    fill(backend.pools, pool("a").quota(gpu=2).obj())
    loop = loop_of(backend)
    await loop.pass_once()
    assert kube.verbs()[0][0] == "create"
    assert loop._dirty.is_set() is retried


@pytest.mark.anyio
async def test_a_record_not_created_in_a_namespace_being_deleted_is_neither_retried_nor_logged_as_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The namespace's deletion takes the LeaderWorkerSet with it (and its change starts the
    next pass); a create there cannot succeed, and its 403 is not the gatekeeper's RBAC."""
    gone = NamespaceTerminating(f"403: unable to create new content in namespace {NS}", code=403)
    kube, caches = FakeKube(fail={"create groupadmissions": gone}), Caches(None)
    backend = PoolsBackend(kube, caches)  # type: ignore[arg-type]
    fill(backend.lws, opted_in("vllm", "a"))
    fill(backend.pools, pool("a").quota(gpu=2).obj())
    loop = loop_of(backend)
    with caplog.at_level(logging.INFO, logger="gatekeeper"):
        await loop.pass_once()
    assert kube.verbs()[0][0] == "create"
    assert not loop._dirty.is_set()
    assert not [rec.getMessage() for rec in caplog.records if "403" in rec.getMessage()]


@pytest.mark.anyio
async def test_kueue_pass_lifts_gates_of_an_admitted_workload_onto_its_flavor() -> None:
    kube, caches = FakeKube(), Caches(None)
    backend = KueueBackend(kube, caches)  # type: ignore[arg-type]
    vllm = opted_in("vllm", "lq")
    rec = new_record(vllm, 0)
    rec["metadata"]["uid"] = "rec-uid"
    name = rec["metadata"]["name"]
    workload = {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {**rec["metadata"]["labels"], POOL_LABEL: "lq"},
            "resourceVersion": "7",
        },
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "True"},
                {"type": "Admitted", "status": "True"},
            ],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {"name": "leader", "flavors": {"nvidia.com/gpu": "h100"}},
                    {"name": "worker", "flavors": {"nvidia.com/gpu": "h100"}},
                ],
            },
        },
    }
    fill(backend.groups.lws, vllm)
    fill(backend.groups.records, rec)
    fill(backend.workloads, workload)
    fill(backend.flavors, {"metadata": {"name": "h100"}, "spec": {"nodeLabels": {"pool": "h100"}}})
    pods = [lws_pod("vllm", 0, 0, namespace=NS, pool="lq"), lws_pod("vllm", 0, 1, namespace=NS, pool="lq")]
    fill(backend.groups.pods, *pods)
    fill(backend.groups.statefulsets, *lws_statefulsets([vllm], pods))
    await loop_of(backend).pass_once()

    patches = {name: ops for verb, _, name, ops in kube.writes if verb == "json_patch"}
    assert sorted(patches) == ["vllm-0", "vllm-0-1"]
    assert {"op": "add", "path": "/spec/nodeSelector", "value": {"pool": "h100"}} in patches["vllm-0"]
    status = next(
        body for verb, plural, _, body in kube.writes if (verb, plural) == ("patch_status", "groupadmissions")
    )
    assert status["status"]["conditions"][0]["status"] == "True"


@pytest.mark.anyio
async def test_node_fit_pass_marks_its_check_active_and_a_fitting_workload_ready() -> None:
    kube, caches = FakeKube(), Caches(None)
    check = NodeFitCheck(kube, caches)  # type: ignore[arg-type]
    fill(check.checks, {"metadata": {"name": "node-fit"}, "spec": {"controllerName": NODE_FIT_CONTROLLER}})
    fill(check.flavors, {"metadata": {"name": "h100"}, "spec": {"nodeLabels": {"pool": "h100"}}})
    fill(check.nodes, gpu_node("n0", "h100"), gpu_node("n1", "h100"))
    pod_spec = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    fill(
        check.workloads,
        {
            "metadata": {
                "name": "wl",
                "namespace": NS,
                "resourceVersion": "3",
                "creationTimestamp": "2025-01-01T00:00:00Z",
            },
            "spec": {"podSets": [{"name": "main", "count": 2, "template": {"spec": pod_spec}}]},
            "status": {
                "conditions": [{"type": "QuotaReserved", "status": "True"}],
                "admission": {"podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "h100"}}]},
                "admissionChecks": [{"name": "node-fit", "state": "Pending", "message": ""}],
            },
        },
    )
    await loop_of(check).pass_once()
    applied = {(plural, name): body for verb, plural, name, body in kube.writes if verb == "apply_status"}
    assert applied[("admissionchecks", "node-fit")]["status"]["conditions"][0]["status"] == "True"
    entry = applied[("workloads", "wl")]["status"]["admissionChecks"][0]
    assert entry["state"] == "Ready"
    assert applied[("workloads", "wl")]["metadata"]["resourceVersion"] == "3"


def test_one_informer_per_kind_and_selector_is_shared_by_the_loops_of_a_term() -> None:
    caches = Caches(None)
    pools = PoolsBackend(FakeKube(), caches)  # type: ignore[arg-type]
    check = NodeFitCheck(FakeKube(), caches)  # type: ignore[arg-type]
    assert pools.nodes is check.nodes and pools.bound is check.bound
    assert all(a is b for a, b in zip(pools.dra, check.dra, strict=True))  # the DRA kinds, side informers
    made = pools.informers + pools.side_informers + check.informers + check.side_informers
    assert len(caches.informers) == len({id(i) for i in made})
    fresh = Caches(None)
    assert PoolsBackend(FakeKube(), fresh).nodes is not pools.nodes  # type: ignore[arg-type]


def test_nodes_are_parsed_once_per_change_of_their_informer() -> None:
    caches = Caches(None)
    nodes = caches.informer(r.NODES)
    fill(nodes, gpu_node("n0", "a"))
    first = caches.nodes()
    assert caches.nodes() is first
    fill(nodes, gpu_node("n1", "a"))
    assert [n.name for n in caches.nodes()] == ["n0", "n1"]


def test_a_node_is_parsed_again_only_when_its_own_object_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []

    def counting(obj: dict[str, Any]) -> Any:
        parsed.append(obj["metadata"]["name"])
        return parse_node(obj)

    monkeypatch.setattr(caches_module, "parse_node", counting)
    caches = Caches(None)
    nodes = caches.informer(r.NODES)
    fill(nodes, *(gpu_node(f"n{i}", "a") for i in range(3)))
    caches.nodes()
    broken = gpu_node("n3", "a")
    broken["status"]["allocatable"] = {"nvidia.com/gpu": "x"}
    fill(nodes, gpu_node("n1", "a", gpus=2), broken)
    assert {n.name: n.allocatable.get("nvidia.com/gpu") for n in caches.nodes()} == {
        "n0": 1,
        "n1": 2,
        "n2": 1,
    }
    fill(nodes, gpu_node("n0", "a", gpus=4))
    del nodes.objects[("", "n2")]
    assert [n.name for n in caches.nodes()] == ["n0", "n1"]
    assert parsed == ["n0", "n1", "n2", "n1", "n3", "n0"]  # n3 unreadable: not tried again unchanged


logging.getLogger("gatekeeper").setLevel(logging.CRITICAL)


class SilentApi:
    """An API server that never answers: informers wait on their first list for ever."""

    @contextlib.asynccontextmanager
    async def call_api(self, method: str, **kwargs: Any) -> AsyncIterator[Any]:
        await anyio.sleep_forever()
        yield None  # pragma: no cover


@pytest.mark.anyio
async def test_each_term_starts_from_new_lists_never_from_the_last_terms_caches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A replica that lost the Lease and won it back days later passed on days-old
    caches (records of LWSs made meanwhile deleted as unwanted). Each term makes its own."""
    made: list[Caches] = []

    class Recorded(Caches):
        def __init__(self, api: Any, credentials: Any = None) -> None:
            super().__init__(api, credentials)
            made.append(self)

    monkeypatch.setattr(app, "Caches", Recorded)
    lead = app._admission_loop(SilentApi(), app.Options(backend="pools", node_fit=True))  # type: ignore[arg-type]
    for _ in range(2):  # two terms
        with anyio.move_on_after(0.05):
            await lead()
    assert len(made) == 2
    first, second = ({id(i) for i in c.informers} for c in made)
    assert first and second and not first & second
    assert all(not inf.synced.is_set() for inf in made[1].informers)


@pytest.mark.anyio
async def test_a_stream_of_changes_runs_a_heavy_pass_at_most_once_a_second() -> None:
    """Every change of a bound pod pokes the loop; while 20,000 pods were created
    the passes ran back to back (2,178 in 8 minutes) and the webhook in the same process
    answered in 0.5 s at p99. Pokes every 10 ms for 1.5 s, each pass costing 0.2 CPU
    seconds (as a pass over 20,000 pods does), now give at most two passes."""

    class Counting:
        log = logging.getLogger("gatekeeper.test")
        informers: tuple[Any, ...] = ()
        passes = 0

        async def reconcile_once(self, write: Any) -> Any:
            self.passes += 1
            end = time.process_time() + 0.2
            while time.process_time() < end:
                pass
            return Decided()

    controller = Counting()
    loop = PassLoop(controller, resync=60.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        end = anyio.current_time() + 1.5
        while anyio.current_time() < end:
            loop.poke()
            await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert 1 <= controller.passes <= 2


@pytest.mark.anyio
@pytest.mark.parametrize(("due_in", "passes"), [(0.3, 2), (None, 1)], ids=["look-again", "none"])
async def test_a_decision_that_falls_due_gets_its_next_pass_then_not_at_resync(
    due_in: float | None, passes: int
) -> None:
    """A pass that says when its decision falls due with nothing changed (a group to give
    back in a few seconds) gets the next pass then, not a resync later."""
    from datetime import UTC, datetime, timedelta

    class Due:
        log = logging.getLogger("gatekeeper.test")
        informers: tuple[Any, ...] = ()
        passes = 0

        async def reconcile_once(self, write: Any) -> Any:
            self.passes += 1
            first = due_in is not None and self.passes == 1
            at = datetime.now(UTC) + timedelta(seconds=due_in or 0) if first else None
            return Decided(look_again=at)

    controller = Due()
    loop = PassLoop(controller, resync=60.0, min_interval=0.1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        loop.poke()  # the first pass
        await anyio.sleep(1.5)
        tg.cancel_scope.cancel()
    assert controller.passes == passes


async def _lifting(backend: PoolsBackend, kube: FakeKube, expect: int) -> None:
    """Run a pass, then the backend's Lifter until ``expect`` gates were lifted (5 s at most)."""
    async with anyio.create_task_group() as tg:
        for task in backend.side_tasks:
            tg.start_soon(task)
        await loop_of(backend).pass_once()
        with anyio.move_on_after(5):
            while sum(1 for v in kube.verbs() if v[0] == "json_patch") < expect:
                await anyio.sleep(0.01)
        await anyio.sleep(0.1)  # room for a write too many
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_pod_born_gated_during_its_groups_admission_is_lifted_once_without_a_pass() -> None:
    """The worker is made (gated) after the pass's snapshot, before its group's admission is
    written: the pass's plan does not know it, and the Lifter lifts it once the admission is
    written. The leader, in the plan, is lifted by the pass alone."""
    from gatekeeper.webhook.pass_through import PassThrough

    kube, caches = FakeKube(), Caches(None)
    backend = PoolsBackend(kube, caches, pass_through=PassThrough())  # type: ignore[arg-type]
    vllm = opted_in("vllm", "a")
    leader, worker = lws_pod("vllm", 0, 0, namespace=NS), lws_pod("vllm", 0, 1, namespace=NS)
    fill(backend.lws, vllm)
    fill(backend.pods, leader)
    fill(backend.statefulsets, *lws_statefulsets([vllm], [leader, worker]))
    fill(backend.nodes, gpu_node("n0", "a"), gpu_node("n1", "a"))
    fill(backend.pools, pool("a").quota(gpu=2).obj())
    create = kube.create

    async def create_then_worker(res: r.Resource, obj: dict[str, Any]) -> dict[str, Any]:
        made = await create(res, obj)
        if res.plural == "groupadmissions":  # the worker comes between the snapshot and the admission
            backend.pods.objects[(NS, "vllm-0-1")] = worker
            backend.pods._notify("ADDED", worker)
        return made

    kube.create = create_then_worker  # type: ignore[method-assign]
    await _lifting(backend, kube, expect=2)
    lifted = sorted(v[2] for v in kube.verbs() if v[0] == "json_patch")
    assert lifted == ["vllm-0", "vllm-0-1"], lifted
    admit = kube.verbs().index(("patch_status", "groupadmissions", new_record(vllm, 0)["metadata"]["name"]))
    assert kube.verbs().index(("json_patch", "pods", "vllm-0-1")) > admit


@pytest.mark.anyio
async def test_a_gated_pod_of_a_group_not_admitted_is_left_to_the_pass() -> None:
    from gatekeeper.webhook.pass_through import PassThrough

    kube, caches = FakeKube(), Caches(None)
    backend = PoolsBackend(kube, caches, pass_through=PassThrough())  # type: ignore[arg-type]
    vllm = opted_in("vllm", "a")
    pods = [lws_pod("vllm", 0, 0, namespace=NS), lws_pod("vllm", 0, 1, namespace=NS)]
    fill(backend.lws, vllm)
    fill(backend.pods, *pods)
    fill(backend.statefulsets, *lws_statefulsets([vllm], pods))
    fill(backend.nodes, gpu_node("n0", "a"))
    fill(backend.pools, pool("a").quota(gpu=1).obj())  # room for half the group: it waits
    async with anyio.create_task_group() as tg:
        for task in backend.side_tasks:
            tg.start_soon(task)
        await loop_of(backend).pass_once()
        for pod in pods:
            backend.pods._notify("MODIFIED", pod)
        await anyio.sleep(0.2)
        tg.cancel_scope.cancel()
    assert not [v for v in kube.verbs() if v[0] == "json_patch"]


@pytest.mark.anyio
async def test_the_next_pass_keeps_a_group_it_admitted_in_the_table_while_the_informer_lags() -> None:
    """Passes can follow each other closer than the records' watch events: the table a
    pass publishes keeps the groups the last pass admitted (the webhook made their pods
    gated for a pass or two when it was built from the informer's records alone)."""
    from gatekeeper.webhook.pass_through import PassThrough

    kube, caches, holder = FakeKube(), Caches(None), PassThrough()
    backend = PoolsBackend(kube, caches, pass_through=holder)  # type: ignore[arg-type]
    vllm = opted_in("vllm", "a")
    leader = lws_pod("vllm", 0, 0, namespace=NS)
    fill(backend.lws, vllm)
    fill(backend.pods, leader)
    fill(backend.statefulsets, *lws_statefulsets([vllm], [leader]))
    fill(backend.nodes, gpu_node("n0", "a"), gpu_node("n1", "a"))
    fill(backend.pools, pool("a").quota(gpu=2).obj())
    loop = loop_of(backend)
    await loop.pass_once()
    assert len(holder) == 1, "admitted by the first pass"
    # The records' informer has not seen the record yet: the pass makes it again, in vain.
    kube.fail["create groupadmissions"] = Conflict("409: groupadmissions already exists")
    await loop.pass_once()
    assert len(holder) == 1, "still admitted as this leader wrote it"


@pytest.mark.parametrize(
    ("backend", "node_fit", "shared", "made"),
    [
        ("pools", False, False, ["PoolsBackend"]),
        ("kueue", True, False, ["KueueBackend", "NodeFitCheck"]),
        ("kueue", True, True, ["KueueBackend", "NodeFitCheck", "SharedReservationCheck"]),
        ("pools", False, True, ["PoolsBackend", "SharedReservationCheck"]),
    ],
)
def test_a_term_runs_the_backend_and_the_checks_its_options_turn_on(
    backend: str, node_fit: bool, shared: bool, made: list[str]
) -> None:
    from gatekeeper.controller.app import Options, controllers

    opts = Options(backend=backend, node_fit=node_fit, shared_reservation_check=shared)
    found = controllers(FakeKube(), Caches(None), opts)  # type: ignore[arg-type]
    assert [type(c).__name__ for c in found] == made
