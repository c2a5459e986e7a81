"""Small builders for the decision core's tests, in the style of Kueue's testing wrappers.

Tests read as the scenario they check (``lws("vllm").size(2).worker(gpu_limit=1)``,
``node("n1").labels(pool="a").alloc(gpu=1)``) instead of as nested dicts, and the dicts
they produce have the exact JSON shape the API server returns.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gatekeeper.core.admission.queue import WaitingGroup
from gatekeeper.core.kube.keys import (
    ADMITTED,
    GROUP_INDEX_LABEL,
    LWS_NAME_LABEL,
    POOL_LABEL,
    REVISION_LABEL,
    SCHEDULING_GATE,
    WORKER_INDEX_LABEL,
)
from gatekeeper.core.kube.parsed import Parsed, parse_each
from gatekeeper.core.model.demand import GroupDemand, group_demand
from gatekeeper.core.model.group import GroupKey, InvalidDemand
from gatekeeper.core.model.lws import GroupPod, Subgroups, TopologyRequest
from gatekeeper.core.model.nodes import Node, parse_node
from gatekeeper.core.model.pool import Pool, parse_pool
from gatekeeper.core.model.record import record_name

GPU = "nvidia.com/gpu"
T0 = datetime(2025, 1, 1, tzinfo=UTC)

_ALIASES = {"gpu": GPU, "ephemeral_storage": "ephemeral-storage"}


def _resources(values: dict[str, Any]) -> dict[str, Any]:
    """Keyword resources (gpu=1, cpu="2") to a ResourceList dict, dropping Nones."""
    return {_ALIASES.get(k, k): v for k, v in values.items() if v is not None}


def ctr(
    name: str = "c",
    *,
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    restart: str | None = None,
    cpu: Any = None,
    memory: Any = None,
    gpu: Any = None,
    gpu_limit: Any = None,
) -> dict[str, Any]:
    """A container; cpu/memory/gpu are requests, gpu_limit a limit only."""
    reqs = {**_resources({"cpu": cpu, "memory": memory, "gpu": gpu}), **(requests or {})}
    lims = {**_resources({"gpu": gpu_limit}), **(limits or {})}
    resources: dict[str, Any] = {}
    if reqs:
        resources["requests"] = reqs
    if lims:
        resources["limits"] = lims
    container: dict[str, Any] = {"name": name, "image": "pause:3.10"}
    if resources:
        container["resources"] = resources
    if restart is not None:
        container["restartPolicy"] = restart
    return container


def pod_spec(
    *containers: dict[str, Any],
    init: list[dict[str, Any]] | None = None,
    overhead: dict[str, Any] | None = None,
    resources: dict[str, Any] | None = None,
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    affinity: dict[str, Any] | None = None,
    runtime_class: str | None = None,
    node_name: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers) or [ctr()]}
    optional = {
        "initContainers": init,
        "overhead": overhead,
        "resources": resources,
        "nodeSelector": node_selector,
        "tolerations": tolerations,
        "affinity": affinity,
        "runtimeClassName": runtime_class,
        "nodeName": node_name,
    }
    spec.update({k: v for k, v in optional.items() if v is not None})
    return spec


class LWSBuilder:
    """``lws(name).size(2).leader(cpu="2", gpu_limit=1).worker(...).obj()``."""

    def __init__(self, name: str, namespace: str = "default") -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"workerTemplate": {"spec": pod_spec()}}},
        }

    @property
    def _template(self) -> dict[str, Any]:
        template: dict[str, Any] = self._obj["spec"]["leaderWorkerTemplate"]
        return template

    def size(self, size: Any) -> LWSBuilder:
        self._template["size"] = size
        return self

    def replicas(self, replicas: int) -> LWSBuilder:
        self._obj["spec"]["replicas"] = replicas
        return self

    def leader(self, spec: dict[str, Any] | None = None, **container: Any) -> LWSBuilder:
        self._template["leaderTemplate"] = {"spec": spec if spec is not None else pod_spec(ctr(**container))}
        return self

    def worker(self, spec: dict[str, Any] | None = None, **container: Any) -> LWSBuilder:
        self._template["workerTemplate"] = {"spec": spec if spec is not None else pod_spec(ctr(**container))}
        return self

    def set(self, key: str, value: Any) -> LWSBuilder:
        """Set a raw key of ``spec.leaderWorkerTemplate`` (e.g. subGroupPolicy)."""
        self._template[key] = value
        return self

    def uid(self, uid: str) -> LWSBuilder:
        self._obj["metadata"]["uid"] = uid
        return self

    def pool(self, name: str) -> LWSBuilder:
        """Opt in: the label ``lws-gatekeeper.io/pool`` naming the pool."""
        self._obj["metadata"].setdefault("labels", {})[POOL_LABEL] = name
        return self

    def age(self, seconds: int) -> LWSBuilder:
        """Created ``seconds`` after T0."""
        moment = T0 + timedelta(seconds=seconds)
        self._obj["metadata"]["creationTimestamp"] = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
        return self

    def priority_class(self, name: str) -> LWSBuilder:
        """``priorityClassName`` in every pod template present."""
        for key in ("leaderTemplate", "workerTemplate"):
            if key in self._template:
                self._template[key]["spec"]["priorityClassName"] = name
        return self

    def deleting(self) -> LWSBuilder:
        self._obj["metadata"]["deletionTimestamp"] = "2025-01-02T00:00:00Z"
        return self

    def obj(self) -> dict[str, Any]:
        return self._obj

    def demand(self) -> GroupDemand:
        return group_demand(self._obj)


def lws(name: str, namespace: str = "default") -> LWSBuilder:
    return LWSBuilder(name, namespace)


class NodeBuilder:
    """``node("n1").labels(pool="a").alloc(gpu=1).taint("k", "v").obj()``."""

    def __init__(self, name: str) -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {}},
            "spec": {},
            "status": {
                "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }

    def labels(self, **labels: str) -> NodeBuilder:
        self._obj["metadata"]["labels"].update(labels)
        return self

    def label(self, key: str, value: str) -> NodeBuilder:
        self._obj["metadata"]["labels"][key] = value
        return self

    def alloc(self, **resources: Any) -> NodeBuilder:
        self._obj["status"]["allocatable"].update(_resources(resources))
        return self

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> NodeBuilder:
        self._obj["spec"].setdefault("taints", []).append({"key": key, "value": value, "effect": effect})
        return self

    def cordon(self) -> NodeBuilder:
        self._obj["spec"]["unschedulable"] = True
        return self

    def ready(self, status: str) -> NodeBuilder:
        self._obj["status"]["conditions"] = [{"type": "Ready", "status": status}]
        return self

    def obj(self) -> dict[str, Any]:
        return self._obj

    def parsed(self) -> Node:
        return parse_node(self._obj)


def node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def gpu_nodes(count: int, gpus: int = 1, prefix: str = "n", **labels: str) -> list[Node]:
    """``count`` ready nodes with ``gpus`` GPUs each, labelled ``pool=a`` unless told otherwise."""
    labels = labels or {"pool": "a"}
    return [node(f"{prefix}{i}").labels(**labels).alloc(gpu=gpus).parsed() for i in range(count)]


class PoolBuilder:
    """``pool("a").selector(pool="a").quota(gpu=4).strict().obj()``."""

    def __init__(self, name: str) -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": "lws-gatekeeper.io/v1alpha1",
            "kind": "Pool",
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"pool": name}, "namespaceSelector": {}},
        }

    def selector(self, **labels: str) -> PoolBuilder:
        self._obj["spec"]["nodeSelector"] = labels
        return self

    def quota(self, **resources: Any) -> PoolBuilder:
        self._obj["spec"]["quota"] = _resources(resources)
        return self

    def tolerations(self, *tolerations: dict[str, Any]) -> PoolBuilder:
        self._obj["spec"]["tolerations"] = list(tolerations)
        return self

    def namespaces(self, selector: dict[str, Any] | None) -> PoolBuilder:
        """``spec.namespaceSelector``; None removes it (no namespace may use the pool)."""
        if selector is None:
            self._obj["spec"].pop("namespaceSelector", None)
        else:
            self._obj["spec"]["namespaceSelector"] = selector
        return self

    def allowed_classes(self, *names: Any) -> PoolBuilder:
        """``spec.allowedPriorityClasses``."""
        self._obj["spec"]["allowedPriorityClasses"] = list(names)
        return self

    def levels(self, *keys: Any) -> PoolBuilder:
        """``spec.topology.levels``, widest first."""
        self._obj["spec"]["topology"] = {"levels": list(keys)}
        return self

    def strict(self) -> PoolBuilder:
        self._obj["spec"]["queueingStrategy"] = "StrictFIFO"
        return self

    def quota_only(self) -> PoolBuilder:
        """``spec.nodeFit: QuotaOnly``: an autoscaled pool, admitted on quota alone."""
        self._obj["spec"]["nodeFit"] = "QuotaOnly"
        return self

    def obj(self) -> dict[str, Any]:
        return self._obj

    def parsed(self) -> Pool:
        return parse_pool(self._obj)


def pool(name: str) -> PoolBuilder:
    return PoolBuilder(name)


def group_pod(
    name: str,
    revision: str = "v1",
    *,
    gated: bool = False,
    live: bool = True,
    terminating: bool = False,
    worker: int = 0,
) -> GroupPod:
    """What a pass reads of one pod of a group (``core.model.lws.GroupPod``); bound unless gated."""
    return GroupPod(
        name=name,
        live=live,
        terminating=terminating,
        gated=gated,
        bound=not gated,
        worker=worker,
        revision=revision,
    )


def read_pools(objs: list[dict[str, Any]]) -> Parsed[Pool]:
    """Pool objects as the controller's snapshot hands them to a decision."""
    return parse_each(objs, parse_pool)


def bound_pod(
    name: str, node_name: str, *, phase: str = "Running", namespace: str = "other", **resources: Any
) -> dict[str, Any]:
    """A pod bound to ``node_name`` (not necessarily ours) requesting ``resources``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": pod_spec(ctr(requests=_resources(resources)), node_name=node_name),
        "status": {"phase": phase},
    }


def waiting(
    name: str,
    index: int,
    demand: GroupDemand | InvalidDemand,
    *,
    pool: str = "a",
    priority: int = 0,
    age: int = 0,
    namespace: str = "default",
    classes: tuple[str, ...] = (),
    exclusive: str = "",
    topology: TopologyRequest | None = None,
    subgroups: Subgroups | None = None,
    gang: str = "",
    gang_size: int = 0,
) -> WaitingGroup:
    """A waiting group; ``age`` is seconds after T0 at which its LWS was created; ``exclusive``
    its LWS's exclusive topology key; ``topology`` the level its LWS asks for."""
    return WaitingGroup(
        key=GroupKey(namespace, name, index),
        pool=pool,
        demand=demand,
        created=T0 + timedelta(seconds=age),
        priority=priority,
        classes=classes,
        exclusive=exclusive,
        topology=topology,
        subgroups=subgroups,
        gang=gang,
        gang_size=gang_size,
    )


def groups(name: str, count: int, demand: GroupDemand, **kwargs: Any) -> list[WaitingGroup]:
    """Groups 0..count-1 of one LWS."""
    return [waiting(name, i, demand, **kwargs) for i in range(count)]


def lws_pod(
    lws_name: str,
    group: int,
    worker: int = 0,
    *,
    pool: str = "a",
    namespace: str = "default",
    gated: bool = True,
    node_name: str | None = None,
    phase: str = "Pending",
    deleting: bool = False,
    gpu_limit: Any = 1,
    revision: str | None = None,
) -> dict[str, Any]:
    """A pod of an LWS group as the LWS controller names and labels it (leader: ``vllm-0``,
    worker: ``vllm-0-1``), with the pool label and, unless told otherwise, the gate."""
    name = f"{lws_name}-{group}" if worker == 0 else f"{lws_name}-{group}-{worker}"
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {
            LWS_NAME_LABEL: lws_name,
            GROUP_INDEX_LABEL: str(group),
            WORKER_INDEX_LABEL: str(worker),
            POOL_LABEL: pool,
        },
    }
    if deleting:
        meta["deletionTimestamp"] = "2025-01-02T00:00:00Z"
    if revision is not None:
        meta["labels"][REVISION_LABEL] = revision
    # Made as the LWS controller makes it: by its leader StatefulSet, or its group's worker one
    # (``lws_statefulsets`` makes those).
    meta["uid"] = f"pod/{namespace}/{name}"
    sts = lws_name if worker == 0 else f"{lws_name}-{group}"
    meta["ownerReferences"] = [_controller_ref("StatefulSet", sts, f"sts/{namespace}/{sts}")]
    spec = pod_spec(ctr(gpu_limit=gpu_limit), node_name=node_name)
    if gated:
        spec["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def meta_of(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def labels_of(obj: dict[str, Any]) -> dict[str, Any]:
    return meta_of(obj).get("labels") or {}


def _controller_ref(kind: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "name": name, "uid": uid, "controller": True}


def lws_statefulsets(lwss: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The StatefulSets the LWS controller would have made for ``lwss`` and the groups of
    ``pods`` (made by ``lws_pod``): a leader StatefulSet owned by each LWS, a worker one per
    group owned by its leader pod. Pods they did not make stay strangers."""

    def sts(ns: str, name: str, lws_name: str, owner: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": f"sts/{ns}/{name}",
                "labels": {LWS_NAME_LABEL: lws_name},
                "ownerReferences": [owner],
            },
        }

    out: list[dict[str, Any]] = []
    for obj in lwss:
        m = obj["metadata"]
        if "name" not in m:
            continue
        ns, name = m.get("namespace", "default"), m["name"]
        out.append(sts(ns, name, name, _controller_ref("LeaderWorkerSet", name, m.get("uid", ""))))
        groups = {
            str(labels_of(p).get(GROUP_INDEX_LABEL))
            for p in pods
            if meta_of(p).get("namespace", "default") == ns and labels_of(p).get(LWS_NAME_LABEL) == name
        } - {"None"}
        for g in sorted(groups):
            leader = f"{name}-{g}"
            owner = _controller_ref("Pod", leader, f"pod/{ns}/{leader}")
            out.append(sts(ns, leader, name, owner))
    return out


def record(
    lws_obj: dict[str, Any],
    index: int,
    *,
    admitted: bool | None = None,
    reason: str = "WaitingForQuota",
    pool: str | None = None,
    demand: dict[str, str] | None = None,
    pods: int | None = None,
    placement: dict[str, str] | None = None,
    uid: str | None = None,
    revision: str | None = None,
    finalizers: list[str] | None = None,
    deleted: bool = False,
    version: str | None = None,
) -> dict[str, Any]:
    """The GroupAdmission record of group ``index`` of ``lws_obj`` (as the controller writes it).

    ``admitted`` None: just created, no status yet; True/False: the ``Admitted`` condition.
    ``uid`` overrides the LWS's UID (a record of an earlier LWS of the same name).
    ``finalizers``, ``deleted`` (a ``deletionTimestamp``) and ``version`` (a resourceVersion,
    and a UID of its own) as the API server would show them.
    """
    meta = lws_obj["metadata"]
    name, namespace = meta["name"], meta.get("namespace", "default")
    owner_uid = uid if uid is not None else meta["uid"]
    obj: dict[str, Any] = {
        "apiVersion": "lws-gatekeeper.io/v1alpha1",
        "kind": "GroupAdmission",
        "metadata": {
            "name": record_name(name, owner_uid, index),
            "namespace": namespace,
            "labels": {LWS_NAME_LABEL: name, GROUP_INDEX_LABEL: str(index)},
        },
        "spec": {"leaderWorkerSet": name, "leaderWorkerSetUID": owner_uid, "groupIndex": index},
    }
    if finalizers is not None:
        obj["metadata"]["finalizers"] = list(finalizers)
    if deleted:
        obj["metadata"]["deletionTimestamp"] = "2025-01-02T00:00:00Z"
    if version is not None:
        obj["metadata"]["resourceVersion"] = version
        obj["metadata"]["uid"] = f"record-{name}-{index}"
    if admitted is not None:
        status: dict[str, Any] = {
            "pool": pool if pool is not None else meta.get("labels", {}).get(POOL_LABEL, ""),
            "conditions": [
                {
                    "type": ADMITTED,
                    "status": "True" if admitted else "False",
                    "reason": "Admitted" if admitted else reason,
                    "message": "",
                }
            ],
        }
        if demand is not None:
            status["demand"] = demand
        if pods is not None:
            status["pods"] = pods
        if placement is not None:
            status["placement"] = placement
        if revision is not None:
            status["templateRevision"] = revision
        obj["status"] = status
    return obj
