"""The ``volcano`` backend beside the real Volcano scheduler, on Kubernetes 1.37.

Why this exists: with ``--backend=volcano`` the gatekeeper hands the quota decision to
Volcano's Queues and reads it back from PodGroups. These tests run on a sandbox of their
own with Volcano's scheduler (``volcano_sandbox``: ``sandbox up --with-volcano``, v1.10.0
built from its module, against kube-apiserver v1.37.2) and the gatekeeper on that backend.

The first two prove the facts the backend builds on, with PodGroups and pods the test
writes (the gatekeeper leaves them alone: they carry no pool label): Volcano places whole
PodGroups within their Queue's capability and says why the others wait; and it reserves
no room in a Queue for pods that carry a scheduling gate (``DeductSchGatedResources`` in
its proportion plugin), which is why the backend lets only one of its PodGroups wait per
Queue. The last three are the backend's: the issue's case (a Queue of 4 GPUs, groups of 2
one-GPU pods scaled to 3: two whole groups run, the third waits gated in Volcano's
words), LeaderReady groups that stay whole beside an LWS that is not opted in, and two
Queues side by side.

Each test makes its own nodes (with more GPUs than the Queue, so that the Queue, not the
nodes, is what limits), under a random tag and a taint its pods tolerate, and its own
Queue and namespace.
"""

from __future__ import annotations

import copy
import json
import re
import time
from collections import Counter
from typing import Any

import kr8s.asyncio

from gatekeeper.core.backends.volcano.keys import VOLCANO_API_VERSION, VOLCANO_GROUP_ANNOTATION
from gatekeeper.core.kube.keys import LWS_NAME_LABEL, POOL_LABEL
from gatekeeper_lab.sandbox.cluster import Sandbox, fake_node
from gatekeeper_lab.sandbox.replay import isolate, load_scenario, replay
from gatekeeper_lab.sandbox.volcano import SCHEDULER_NAME
from tests.e2e.kueue_support import (
    condition,
    group_states,
    items,
    lws,
    make_namespace,
    new_tag,
    pods,
    records,
    settled,
    wait,
)
from tests.e2e.test_why import run_why

GPU = "nvidia.com/gpu"
TAINT = "lws-gatekeeper.io/test-nodes"


def _setup(sb: Sandbox, tag: str, *, nodes: int, gpus_per_node: int, queue_gpus: int) -> str:
    """Nodes, a Queue with ``queue_gpus`` GPUs of capability, a namespace; returns the namespace."""
    sb.create_nodes(
        [
            fake_node(
                f"{tag}-{i}",
                gpus=gpus_per_node,
                labels={TAINT: tag},
                taints=[{"key": TAINT, "value": tag, "effect": "NoSchedule"}],
            )
            for i in range(nodes)
        ]
    )
    sb.apply(
        [
            {
                "apiVersion": VOLCANO_API_VERSION,
                "kind": "Queue",
                "metadata": {"name": tag},
                "spec": {"weight": 1, "reclaimable": False, "capability": {GPU: str(queue_gpus)}},
            }
        ]
    )
    make_namespace(sb, tag, managed=False)
    return tag


def _gang(tag: str, name: str, *, size: int, gated: bool) -> list[dict[str, Any]]:
    """One PodGroup of ``size`` one-GPU pods in Queue ``tag``, and its pods."""
    objs: list[dict[str, Any]] = [
        {
            "apiVersion": VOLCANO_API_VERSION,
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": tag},
            "spec": {"queue": tag, "minMember": size, "minResources": {GPU: str(size)}},
        }
    ]
    for i in range(size):
        spec: dict[str, Any] = {
            "schedulerName": SCHEDULER_NAME,
            "nodeSelector": {TAINT: tag},
            "tolerations": [{"key": TAINT, "operator": "Equal", "value": tag, "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: "1"}}}],
        }
        if gated:
            spec["schedulingGates"] = [{"name": "example.com/hold"}]
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{i}",
                    "namespace": tag,
                    "annotations": {VOLCANO_GROUP_ANNOTATION: name},
                },
                "spec": spec,
            }
        )
    return objs


def _phases(sb: Sandbox, ns: str) -> dict[str, str]:
    return {
        pg["metadata"]["name"]: pg.get("status", {}).get("phase", "")
        for pg in items(sb, "podgroups.scheduling.volcano.sh", "-n", ns)
    }


def _events(sb: Sandbox, ns: str, name: str) -> list[str]:
    return [
        f"{e.get('reason')}: {e.get('message')}"
        for e in items(sb, "events", "-n", ns, f"--field-selector=involvedObject.name={name}")
    ]


def test_volcano_places_whole_podgroups_within_the_queue_and_says_why_the_rest_waits(
    volcano_sandbox: Sandbox,
) -> None:
    """Queue of 4 GPUs on 12 GPUs of nodes, three gangs of 2: two run whole, one waits."""
    sb = volcano_sandbox
    ns = _setup(sb, new_tag(), nodes=3, gpus_per_node=4, queue_gpus=4)
    for name in ("a", "b", "c"):
        sb.apply(_gang(ns, name, size=2, gated=False))

    def two_running() -> dict[str, str] | None:
        phases = _phases(sb, ns)
        return phases if Counter(phases.values()) == Counter({"Running": 2, "Pending": 1}) else None

    phases = wait("2 PodGroups Running, 1 Pending", two_running)
    pods = items(sb, "pods", "-n", ns)
    bound = Counter(
        p["metadata"]["annotations"][VOLCANO_GROUP_ANNOTATION] for p in pods if p["spec"].get("nodeName")
    )
    running = {n for n, phase in phases.items() if phase == "Running"}
    assert bound == Counter(dict.fromkeys(running, 2)), "each running PodGroup is placed whole, no other pod"
    (waiting,) = set(phases) - running
    said = wait(f"Volcano's reason on {waiting}", lambda: _events(sb, ns, waiting))
    assert "Unschedulable: queue resource quota insufficient" in said, said


def test_volcano_reserves_no_queue_room_for_gated_pods(volcano_sandbox: Sandbox) -> None:
    """Same Queue and gangs, every pod gated: Volcano puts all three PodGroups Inqueue.

    Volcano v1.10 deducts the requests of scheduling-gated pods from the room an Inqueue
    PodGroup holds in its Queue, so gated PodGroups never stop each other. The volcano
    backend therefore offers Volcano one waiting group per Queue at a time.
    """
    sb = volcano_sandbox
    ns = _setup(sb, new_tag(), nodes=3, gpus_per_node=4, queue_gpus=4)
    for name in ("a", "b", "c"):
        sb.apply(_gang(ns, name, size=2, gated=True))
    wait(
        "3 PodGroups Inqueue (6 GPUs in a Queue of 4)",
        lambda: Counter(_phases(sb, ns).values()) == Counter({"Inqueue": 3}),
    )
    assert not [p for p in items(sb, "pods", "-n", ns) if p["spec"].get("nodeName")], (
        "gated pods stay unbound"
    )


# ----- the volcano backend: the gatekeeper's PodGroups, its gates, Volcano's Queue --------


def _lws(tag: str, name: str, *, opted_in: bool = True, **kwargs: Any) -> dict[str, Any]:
    """An LWS of one-GPU pods on this test's nodes, opted in to Volcano Queue ``tag``."""
    obj = lws(name, tag, {POOL_LABEL: tag} if opted_in else {}, gpus_per_pod=1, **kwargs)
    lwt = obj["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        spec = copy.deepcopy(lwt[role]["spec"])
        spec["nodeSelector"] = {TAINT: tag}
        spec["tolerations"] = [{"key": TAINT, "operator": "Equal", "value": tag, "effect": "NoSchedule"}]
        lwt[role] = {"spec": spec}
    return obj


def _show(sb: Sandbox, ns: str) -> None:
    print(
        sb.kubectl(
            "get", "podgroups.scheduling.volcano.sh,groupadmissions,pods", "-n", ns, "-o", "wide"
        ).stdout
    )


def test_two_whole_groups_run_in_a_queue_of_4_gpus_and_the_third_waits_gated_in_volcanos_words(
    volcano_sandbox: Sandbox,
) -> None:
    """The issue's case: Queue of 4 GPUs (nodes have 12), groups of 2 one-GPU pods, scaled to 3."""
    sb = volcano_sandbox
    ns = _setup(sb, new_tag(), nodes=3, gpus_per_node=4, queue_gpus=4)
    start = time.monotonic()
    sb.apply([_lws(ns, "vllm", replicas=3, size=2)])
    try:
        wait(
            "2 whole groups Running, 1 whole group gated",
            lambda: settled(sb, ns, running=2, gated=1, size=2),
            timeout=120,
        )
        admitted_after = time.monotonic() - start
        print(f"2 groups of 2 admitted and running {admitted_after:.1f}s after the LWS was applied")
        waiting = wait(
            "the waiting group's record in Volcano's words",
            lambda: [
                r
                for r in records(sb, ns)
                if "queue resource quota insufficient" in condition(r, "Admitted").get("message", "")
            ],
        )
    finally:
        _show(sb, ns)
    (rec,) = waiting
    assert condition(rec, "Admitted")["status"] == "False"
    waits = rf'^lws_gatekeeper_waiting_groups\{{backend="volcano",pool="{ns}"\}} 1\.0$'
    wait("the waiting group counted by backend and Queue", lambda: re.search(waits, sb.metrics(), re.M))
    admissions = re.search(
        rf'^lws_gatekeeper_admissions_total\{{backend="volcano",pool="{ns}"\}} (\S+)$', sb.metrics(), re.M
    )
    assert admissions and float(admissions.group(1)) >= 2, "both groups' admissions counted"
    all_pods = pods(sb, ns)
    assert {p["spec"]["schedulerName"] for p in all_pods} == {SCHEDULER_NAME}
    groups = {p["metadata"]["annotations"][VOLCANO_GROUP_ANNOTATION] for p in all_pods}
    assert groups == {"vllm-0-gk", "vllm-1-gk", "vllm-2-gk"}
    phases = _phases(sb, ns)
    assert Counter(phases.values()) == Counter({"Running": 2, "Pending": 1}), phases


def test_leader_ready_stays_whole_and_an_lws_not_opted_in_stays_with_the_default_scheduler(
    volcano_sandbox: Sandbox,
) -> None:
    """LeaderReady groups of 2 in a Queue of 4: two whole groups, the third's leader gated;
    an LWS without the pool label beside them is not Volcano's."""
    sb = volcano_sandbox
    ns = _setup(sb, new_tag(), nodes=3, gpus_per_node=4, queue_gpus=4)
    sb.apply(
        [
            _lws(ns, "ready", replicas=3, size=2, startup_policy="LeaderReady"),
            _lws(ns, "plain", opted_in=False, replicas=1, size=2),
        ]
    )
    try:
        wait(
            "2 whole LeaderReady groups Running, the third's leader gated, the plain LWS running",
            lambda: (
                (lambda g: g if g.get("2") == Counter({"gated": 1}) else None)(
                    settled_groups(sb, ns, "ready", running=2, size=2)
                )
                and group_states(sb, ns, "plain") == {"0": Counter({"running": 2})}
            ),
            timeout=120,
        )
    finally:
        _show(sb, ns)
    plain = [p for p in pods(sb, ns) if p["metadata"]["labels"].get(LWS_NAME_LABEL) == "plain"]
    assert {p["spec"]["schedulerName"] for p in plain} == {"default-scheduler"}
    assert not [p for p in plain if VOLCANO_GROUP_ANNOTATION in p["metadata"].get("annotations", {})]
    # The third group's PodGroup is offered once the first two hold their room ungated.
    pgs = wait(
        "3 PodGroups",
        lambda: (lambda p: p if len(p) == 3 else None)(
            {pg["metadata"]["name"]: pg for pg in items(sb, "podgroups.scheduling.volcano.sh", "-n", ns)}
        ),
    )
    assert set(pgs) == {"ready-0-gk", "ready-1-gk", "ready-2-gk"}
    assert {pg["spec"]["minMember"] for pg in pgs.values()} == {1}
    assert {pg["spec"]["minResources"]["nvidia.com/gpu"] for pg in pgs.values()} == {"2"}


def settled_groups(
    sb: Sandbox, ns: str, lws_name: str, *, running: int, size: int
) -> dict[str, Counter[str]]:
    """The LWS's groups, when ``running`` of them run whole (else {})."""
    groups = group_states(sb, ns, lws_name)
    whole = [g for g, c in groups.items() if c == Counter({"running": size})]
    return groups if len(whole) == running else {}


def test_two_queues_side_by_side_each_admits_within_its_own_capability(volcano_sandbox: Sandbox) -> None:
    """Queues of 2 GPUs each on 12 GPUs of nodes, an LWS of 2 groups of 2 in each: one whole
    group runs per Queue, the other waits gated; neither Queue's waiting group blocks the other."""
    sb = volcano_sandbox
    ns = _setup(sb, new_tag(), nodes=3, gpus_per_node=4, queue_gpus=2)
    other = f"{ns}-b"
    sb.apply(
        [
            {
                "apiVersion": VOLCANO_API_VERSION,
                "kind": "Queue",
                "metadata": {"name": other},
                "spec": {"weight": 1, "reclaimable": False, "capability": {GPU: "2"}},
            }
        ]
    )
    second = _lws(ns, "b", replicas=2, size=2)
    second["metadata"]["labels"][POOL_LABEL] = other
    sb.apply([_lws(ns, "a", replicas=2, size=2), second])
    try:
        wait(
            "per LWS (per Queue): 1 whole group Running, 1 whole group gated",
            lambda: all(settled(sb, ns, running=1, gated=1, size=2, lws_name=name) for name in ("a", "b")),
            timeout=120,
        )
    finally:
        _show(sb, ns)
    # Each Queue's waiting group is offered its PodGroup once the running one holds its room
    # ungated: a pass after the one that lifted the gates, so wait for it.
    queues = wait(
        "4 PodGroups, 2 per Queue",
        lambda: (lambda q: q if len(q) == 4 else None)(
            {
                pg["metadata"]["name"]: pg["spec"]["queue"]
                for pg in items(sb, "podgroups.scheduling.volcano.sh", "-n", ns)
            }
        ),
    )
    assert queues == {"a-0-gk": ns, "a-1-gk": ns, "b-0-gk": other, "b-1-gk": other}


QUOTA_WORDS = "queue resource quota insufficient"
"""What Volcano's proportion plugin says of a PodGroup its Queue has no room for."""


def recs_now(sb: Sandbox, ns: str) -> dict[int, dict[str, Any]]:
    """The namespace's records by group index, as they are now."""
    return {r["spec"]["groupIndex"]: r for r in records(sb, ns)}


async def test_seed_replay_runs_groups_0_and_1_whole_at_every_step_and_the_rest_wait_gated(
    volcano_sandbox: Sandbox,
) -> None:
    """The LWS issue's steps (apply 2, scale 0, 4, 0, 10) on its four one-GPU nodes, the LWS
    opted in to a Volcano Queue of the nodes' 4 GPUs: after every step with groups, exactly
    groups 0 and 1 run whole, nothing is stranded, every other pod waits gated."""
    sb = volcano_sandbox
    ns = _setup(sb, new_tag(), nodes=4, gpus_per_node=1, queue_gpus=4)
    body = isolate(load_scenario()["lws"], {TAINT: ns}, TAINT)
    body["metadata"]["labels"][POOL_LABEL] = ns
    api = await kr8s.asyncio.api(kubeconfig=str(sb.kubeconfig))
    # Groups are let in one after another (a PodGroup, Volcano's cycle of 1 s, a pass): a
    # step is judged once its pods stay unchanged for 10 s, not 3.
    try:
        steps = await replay(api, ns, body, stable_for=10)
    finally:
        _show(sb, ns)
    for s in steps:
        print(f"{s.command}: {s.verdict.line(4)} ({s.seconds:.1f}s)")
    for step in steps:
        v = step.verdict
        if step.replicas == 0:
            assert not v.groups, f"{step.command}: no pod is left"
            continue
        whole = sorted(g.index for g in v.groups.values() if g.whole(2))
        assert whole == [0, 1], f"{step.command}: whole groups {whole}"
        assert v.gpus_stranded == 0 and v.partial_groups == 0, f"{step.command}: {v.line(4)}"
        assert v.gated_pods == 2 * (step.replicas - 2), f"{step.command}: every other pod is gated"
    recs = {r["spec"]["groupIndex"]: r for r in records(sb, ns)}
    assert sorted(i for i, r in recs.items() if condition(r, "Admitted").get("status") == "True") == [0, 1]
    offered = wait(
        "group 2's record in Volcano's words",
        lambda: (lambda m: m if QUOTA_WORDS in m else None)(
            condition(recs_now(sb, ns)[2], "Admitted")["message"]
        ),
    )
    assert offered.startswith(f"group 2 waits in Volcano Queue {ns} (PodGroup vllm-2-gk, Pending)")
    for i in range(3, 10):
        assert "one PodGroup at a time" in condition(recs[i], "Admitted")["message"], recs[i]
    assert set(_phases(sb, ns)) == {"vllm-0-gk", "vllm-1-gk", "vllm-2-gk"}


def test_priority_within_a_queue_the_higher_priority_waiting_group_goes_first(
    volcano_sandbox: Sandbox,
) -> None:
    """A Queue of 2 GPUs held by one running group of 2; an LWS of a low PriorityClass comes
    and waits (its PodGroup offered, Pending), then one of a high class: the high group's
    PodGroup is offered in its stead, and when the Queue's room frees the high group runs
    whole while the low one keeps waiting gated."""
    sb = volcano_sandbox
    ns = _setup(sb, new_tag(), nodes=3, gpus_per_node=4, queue_gpus=2)
    low, high = f"low-{ns}", f"high-{ns}"
    sb.apply(
        [
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": low},
             "value": 10},
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": high},
             "value": 1000},
        ]
    )  # fmt: skip
    try:
        sb.apply([_lws(ns, "first", replicas=1, size=2)])
        wait("the first LWS's group running whole", lambda: settled(sb, ns, running=1, gated=0, size=2))
        sb.apply([_lws(ns, "batch", replicas=1, size=2, priority_class=low)])
        wait(
            "the low group's PodGroup offered and left Pending by Volcano",
            lambda: _phases(sb, ns).get("batch-0-gk") == "Pending",
        )
        sb.apply([_lws(ns, "serve", replicas=1, size=2, priority_class=high)])
        wait(
            "the high group's PodGroup offered in the low one's stead",
            lambda: (lambda p: "serve-0-gk" in p and "batch-0-gk" not in p)(_phases(sb, ns)),
        )
        sb.kubectl("delete", "leaderworkerset", "first", "-n", ns, "--wait=false")
        wait(
            "the high group running whole, the low group gated",
            lambda: (
                settled(sb, ns, running=1, gated=0, size=2, lws_name="serve")
                and settled(sb, ns, running=0, gated=1, size=2, lws_name="batch")
                and not group_states(sb, ns, "first")
            ),
            timeout=120,
        )
        time.sleep(5)  # a few more Volcano cycles and passes: nothing else is let in
        assert settled(sb, ns, running=0, gated=1, size=2, lws_name="batch"), group_states(sb, ns, "batch")
        said = condition(
            next(r for r in records(sb, ns) if r["spec"]["leaderWorkerSet"] == "batch"), "Admitted"
        )
        assert said["status"] == "False", said
    finally:
        _show(sb, ns)
        sb.kubectl("delete", "priorityclass", low, high, "--ignore-not-found", check=False)


def test_why_shows_the_volcano_queue_who_holds_it_and_what_must_free_up(volcano_sandbox: Sandbox) -> None:
    """``kubectl lws-gatekeeper why`` on the issue's case (a Queue of 4 GPUs, 3 groups of 2):
    the groups' states in the backend's and Volcano's words, the Queue's capability and what
    Volcano reports allocated, and what the waiting group needs."""
    sb = volcano_sandbox
    ns = _setup(sb, new_tag(), nodes=3, gpus_per_node=4, queue_gpus=4)
    sb.apply([_lws(ns, "vllm", replicas=3, size=2)])

    def answer() -> dict[str, Any] | None:
        out = run_why(sb.kubeconfig, sb.bin_dir, "lws/vllm", "-n", ns, "-o", "json")
        if out.returncode == 2:  # not read (0: every group admitted, 1: one waits)
            return None
        got: dict[str, Any] = json.loads(out.stdout)
        states = [(g["state"], g["reason"]) for g in got["groups"]]
        view = got["pool_view"] or {}
        whole = states == [("admitted", "Inqueue")] * 2 + [("waiting", "Unschedulable")]
        return got if whole and view.get("used", {}).get("nvidia.com/gpu") == "4" else None

    try:
        got = wait(
            "2 groups admitted, group 2 waiting in Volcano's words, 4 GPUs allocated", answer, timeout=120
        )
    finally:
        _show(sb, ns)
    view = got["pool_view"]
    assert (view["kind"], view["quota"], view["free"]) == ("Queue", {GPU: "4"}, {GPU: "0"})
    assert [(h["lws"], h["group"]) for h in view["admitted"]] == [("vllm", 0), ("vllm", 1)]
    assert [(h["lws"], h["group"]) for h in view["waiting"]] == [("vllm", 2)]
    text = run_why(sb.kubeconfig, sb.bin_dir, "lws/vllm", "-n", ns)
    assert text.returncode == 1, text.stderr  # group 2 waits
    print(text.stdout)
    lines = text.stdout.splitlines()
    assert lines[0] == f"LeaderWorkerSet {ns}/vllm: 3 groups of 2 pods, {POOL_LABEL}={ns}"
    assert any(line.startswith("  group 0: admitted (Inqueue)") and "2 running" in line for line in lines)
    assert any(line.startswith("  group 2: waiting (Unschedulable)") and "2 gated" in line for line in lines)
    assert any(QUOTA_WORDS in line and "PodGroup vllm-2-gk, Pending" in line for line in lines), text.stdout
    assert (
        f"Queue {ns}: quota 4 nvidia.com/gpu; used 4 nvidia.com/gpu; free 0 nvidia.com/gpu; " in text.stdout
    )
    assert lines[-1] == (
        f"next: group 2 needs 2 cpu, 2Gi memory, 2 nvidia.com/gpu; queue {ns} has 0 nvidia.com/gpu free: "
        "2 nvidia.com/gpu must be freed (a group that holds it scales away or ends, or the quota grows)"
    ), lines[-1]
    pool = run_why(sb.kubeconfig, sb.bin_dir, f"pool/{ns}", "-o", "json")
    assert pool.returncode == 1, pool.stderr  # a group waits for the queue
    assert json.loads(pool.stdout)["kind"] == "Queue"
