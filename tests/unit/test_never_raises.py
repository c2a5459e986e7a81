"""Property: no object a tenant (or anyone) writes makes a decision raise.

One exception in a pass once ended the controller, and both replicas met the same object
in turn. Hypothesis takes a valid cluster (an LWS with its pods and records, a Pool, nodes,
a Kueue Workload and flavor) and breaks it at random places with random values (None,
negative, enormous or non-integer numbers, strings, lists, maps, quantities of many
digits), then runs every decision on it: each must return, never raise. The cluster has
a Pool over a Karpenter NodePool too, with a NodeClaim and an instance type, and a Volcano
PodGroup with an Event on it; every backend of the registry is run (``COVERED`` names them).
Nodes and Pools are parsed as the controller parses them, where a ``ValueError`` (or an arithmetic error)
means "this object is skipped and reported".
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from core_builders import ctr, lws, lws_pod, node, pod_spec, pool, read_pools, record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gatekeeper.core.backends import BACKENDS
from gatekeeper.core.backends.kueue import KueueSnapshot, decide_kueue
from gatekeeper.core.backends.kueue import plan_writes as kueue_writes
from gatekeeper.core.backends.pools import PassInputs, Snapshot, decide, plan_writes
from gatekeeper.core.backends.pools.provisioning import (
    parse_instance_types,
    parse_node_claim,
    parse_node_pool,
)
from gatekeeper.core.backends.volcano import VolcanoSnapshot, decide_volcano
from gatekeeper.core.backends.volcano import plan_writes as volcano_writes
from gatekeeper.core.checks.node_fit import decide_node_fit
from gatekeeper.core.checks.node_fit import plan_writes as node_fit_writes
from gatekeeper.core.kube.keys import (
    DISAGGREGATED_REVISION_LABEL,
    DISAGGREGATED_SET_LABEL,
    EXCLUSIVE_TOPOLOGY_ANNOTATION,
    GROUP_KEY_LABEL,
    KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION,
    KUEUE_SLICE_SIZE_ANNOTATION,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
)
from gatekeeper.core.kube.parsed import parse_each
from gatekeeper.core.model.nodes import parse_node
from gatekeeper.core.writes.plan import Memory

NOW = datetime(2026, 12, 1, tzinfo=UTC)
COVERED = ("pools", "kueue", "volcano")
"""The backends the property runs, in the registry's order."""
GPU = "nvidia.com/gpu"

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([float("nan"), float("inf"), -1.5, 1e308]),
    st.text(max_size=12),
    st.sampled_from(
        ["9" * 320, "9" * 4301, "1e64", "1e65", "-1", "1.5Ki", "0.000001m", "Gi", "", "2147483647"]
    ),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)


def cluster() -> dict[str, Any]:
    """A valid cluster for every decision, as plain dicts."""
    vllm = lws("vllm", "team").pool("a").uid("u-1").size(2).replicas(3).worker(gpu_limit=1).obj()
    vllm["metadata"]["generation"] = 1
    pods = [lws_pod("vllm", g, w, namespace="team", pool="a") for g in range(2) for w in range(2)]
    pods[0]["spec"]["nodeName"] = "n0"
    pods[0]["status"]["phase"] = "Running"
    # LWS's exclusive placement (core.admission.exclusive): on the LWS, and as LWS copies it to pods
    vllm["metadata"]["annotations"] = {EXCLUSIVE_TOPOLOGY_ANNOTATION: "rack"}
    pods[0]["metadata"].setdefault("annotations", {})[EXCLUSIVE_TOPOLOGY_ANNOTATION] = "rack"
    pods[0]["metadata"]["labels"][GROUP_KEY_LABEL] = "hash-0"
    vllm["metadata"]["annotations"][TOPOLOGY_PREFERRED_ANNOTATION] = "block"
    # topology levels (core.admission.topology): an LWS that requires a rack of pool a's levels
    racked = lws("racked", "team").pool("a").uid("u-3").size(2).replicas(2).worker(gpu_limit=1).obj()
    racked["metadata"]["annotations"] = {TOPOLOGY_REQUIRED_ANNOTATION: "rack"}
    # hard topology spread constraints (core.model.spread, core.admission.skew)
    racked["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": "racked"}},
            "matchLabelKeys": ["leaderworkerset.sigs.k8s.io/group-key"],
            "minDomains": 2,
        }
    ]
    worker_meta = vllm["spec"]["leaderWorkerTemplate"]["workerTemplate"].setdefault("metadata", {})
    worker_meta["annotations"] = {
        KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION: "rack",
        KUEUE_SLICE_SIZE_ANNOTATION: "1",
    }
    # one gang (core.backends.pools.gangs): a DisaggregatedSet's two roles
    for role in (vllm, racked):
        role["metadata"]["labels"].update({DISAGGREGATED_SET_LABEL: "ds", DISAGGREGATED_REVISION_LABEL: "r1"})
    records = [record(vllm, 0, admitted=True, demand={GPU: "2"}, pods=2), record(vllm, 1, admitted=False)]
    records[0]["status"]["domain"] = {"rack": "r0"}
    workload = {
        "metadata": {
            "name": "vllm-u-1-0",
            "namespace": "team",
            "labels": {
                "leaderworkerset.sigs.k8s.io/name": "vllm",
                "leaderworkerset.sigs.k8s.io/group-index": "0",
            },
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "queueName": "a",
            "podSets": [
                {"name": "leader", "count": 1, "template": {"spec": pods[0]["spec"]}},
                {"name": "worker", "count": 1, "template": {"spec": pods[1]["spec"]}},
            ],
        },
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "True"},
                {"type": "Admitted", "status": "True"},
            ],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {
                        "name": "leader",
                        "flavors": {GPU: "h100"},
                        "count": 1,
                        # Kueue's Topology Aware Scheduling (core.backends.kueue.topology)
                        "topologyAssignment": {
                            "levels": ["rack", "kubernetes.io/hostname"],
                            "slices": [
                                {
                                    "domainCount": 1,
                                    "valuesPerLevel": [
                                        {"universal": "r0"},
                                        {"individual": {"prefix": "n", "roots": ["1"]}},
                                    ],
                                    "podCounts": {"universal": 1},
                                }
                            ],
                        },
                    }
                ],
            },
            "admissionChecks": [{"name": "node-fit", "state": "Pending", "message": ""}],
        },
    }
    tolerant = pod_spec(ctr(gpu_limit=1), tolerations=[{"key": "gpu", "operator": "Exists"}])
    on_karpenter = lws("kv", "team").pool("k").uid("u-2").size(2).replicas(2).worker(tolerant).obj()
    on_karpenter["metadata"]["generation"] = 1
    # Kueue's own topology annotations on a template (core.backends.kueue.topology)
    worker_meta = on_karpenter["spec"]["leaderWorkerTemplate"]["workerTemplate"].setdefault("metadata", {})
    worker_meta["annotations"] = {
        KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION: "rack",
        KUEUE_SLICE_SIZE_ANNOTATION: "1",
    }
    karpenter_pool = pool("k").obj()
    karpenter_pool["spec"]["nodePools"] = ["np"]
    node_pool = {
        "metadata": {"name": "np"},
        "spec": {
            "template": {
                "metadata": {"labels": {"pool": "k"}},
                "spec": {
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}
                    ],
                    "taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}],
                },
            },
            "limits": {GPU: "4", "cpu": "100"},
        },
    }
    claim = {
        "metadata": {"name": "c0", "labels": {"karpenter.sh/nodepool": "np", "pool": "k"}},
        "spec": {
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["t1"]}],
            "resources": {"requests": {GPU: "1", "cpu": "1"}},
            "taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}],
        },
        "status": {"nodeName": "c0-node", "capacity": {GPU: "1"}, "allocatable": {GPU: "1", "pods": "110"}},
    }
    instance_type = {
        "name": "t1",
        "architecture": "amd64",
        "operatingSystems": ["linux"],
        "resources": {"cpu": "4", "memory": "16Gi", GPU: "1"},
        "offerings": [
            {
                "Price": 0.5,
                "Available": True,
                "Requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z"]},
                ],
            }
        ],
    }
    return {
        "node_pools": [node_pool],
        "node_claims": [claim],
        "instance_types": [instance_type],
        "lwss": [vllm, on_karpenter, racked],
        "pods": pods,
        "records": records,
        "pools": [pool("a").quota(gpu=4).levels("block", "rack").obj(), karpenter_pool],
        "nodes": [
            node(f"n{i}").labels(pool="a", block="b", rack=f"r{i % 2}").alloc(gpu=2).obj() for i in range(3)
        ],
        "workloads": [workload],
        "flavors": [{"metadata": {"name": "h100"}, "spec": {"nodeLabels": {"pool": "a"}}}],
        "checks": [
            {"metadata": {"name": "node-fit"}, "spec": {"controllerName": "lws-gatekeeper.io/node-fit"}}
        ],
        "pod_groups": [
            {
                "metadata": {
                    "name": "vllm-0-gk",
                    "namespace": "team",
                    "uid": "pg-1",
                    "labels": {"lws-gatekeeper.io/pool": "a"},
                    "ownerReferences": [{"kind": "GroupAdmission", "name": "vllm-0", "uid": "r-0"}],
                },
                "spec": {"queue": "a", "minMember": 2, "minResources": {GPU: "2"}},
                "status": {"phase": "Inqueue"},
            }
        ],
        "events": [
            {
                "involvedObject": {
                    "kind": "PodGroup",
                    "name": "vllm-0-gk",
                    "namespace": "team",
                    "uid": "pg-1",
                },
                "reason": "Unschedulable",
                "message": "queue resource quota insufficient",
                "lastTimestamp": "2026-12-01T00:00:00Z",
            }
        ],
    }


def _places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into ``value`` (maps and lists), the value itself included."""
    found = [path]
    if isinstance(value, dict):
        for key, inner in value.items():
            found.extend(_places(inner, (*path, key)))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found.extend(_places(inner, (*path, i)))
    return found


def _put(root: Any, path: tuple[Any, ...], junk: Any) -> None:
    for step in path[:-1]:
        root = root[step]
    root[path[-1]] = junk


@st.composite
def broken_clusters(draw: st.DrawFn) -> dict[str, Any]:
    objs = cluster()
    places = [p for p in _places(objs) if len(p) >= 2]
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        path = draw(st.sampled_from(places))
        try:
            _put(objs, path, draw(JUNK))
        except (KeyError, IndexError, TypeError):
            continue  # an earlier break removed the way there
        places = [p for p in _places(objs) if len(p) >= 2]
    return objs


def _nodes(objs: list[Any]) -> list[Any]:
    parsed = []
    for obj in objs if isinstance(objs, list) else []:
        try:
            parsed.append(parse_node(obj if isinstance(obj, dict) else {}))
        except (ValueError, ArithmeticError):
            continue  # skipped and reported, as the caches do
    return parsed


def _instance_types(data: Any) -> tuple[Any, ...]:
    try:
        return parse_instance_types(data)
    except (ValueError, ArithmeticError):
        return ()  # refused at start: ``run`` does not start with a bad file


def _lst(value: Any) -> list[Any]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_clusters())
def test_no_broken_object_makes_a_decision_raise(objs: dict[str, Any]) -> None:
    objs = copy.deepcopy(objs)
    nodes = _nodes(objs["nodes"])
    snap = Snapshot(
        lwss=_lst(objs["lwss"]),
        pods=_lst(objs["pods"]),
        bound_pods=[
            p for p in _lst(objs["pods"]) if isinstance(p.get("spec"), dict) and p["spec"].get("nodeName")
        ],
        nodes=nodes,
        pools=read_pools(_lst(objs["pools"])),
        records=_lst(objs["records"]),
        priorities={"high": 1000},
        node_pools=parse_each(_lst(objs["node_pools"]), parse_node_pool),
        node_claims=parse_each(_lst(objs["node_claims"]), parse_node_claim),
        instance_types=_instance_types(objs["instance_types"]),
    )
    actions = decide(snap)
    plan_writes(actions, PassInputs(snap, Memory(), NOW, 0.0))

    ksnap = KueueSnapshot(
        lwss=_lst(objs["lwss"]),
        pods=_lst(objs["pods"]),
        records=_lst(objs["records"]),
        workloads=_lst(objs["workloads"]),
        flavors=_lst(objs["flavors"]),
        now=NOW,
    )
    kacts = decide_kueue(ksnap)
    kueue_writes(kacts, ksnap, Memory(), NOW)

    vsnap = VolcanoSnapshot(
        lwss=_lst(objs["lwss"]),
        pods=_lst(objs["pods"]),
        records=_lst(objs["records"]),
        pod_groups=_lst(objs["pod_groups"]),
        events=_lst(objs["events"]),
        nodes=nodes,
        bound_pods=snap.bound_pods,
        priorities={"high": 1000},
    )
    volcano_writes(decide_volcano(vsnap), vsnap, Memory(), NOW)

    workloads, checks = _lst(objs["workloads"]), _lst(objs["checks"])
    nacts = decide_node_fit(workloads, checks, _lst(objs["flavors"]), nodes, snap.bound_pods)
    node_fit_writes(nacts, workloads, checks, NOW)


def test_the_property_runs_every_registered_backend() -> None:
    assert BACKENDS.names == COVERED
