"""The DaemonSets' pods on a node a NodePool would launch, and the room they take there.

Why this exists: a node Karpenter launches runs, besides the pods it was bought for, one pod
of every DaemonSet whose pod template its labels and taints let there (node selector,
required node affinity, tolerations): Karpenter counts them when it sizes the node, and so
must the plan that admits a group onto nodes still to be bought. Without them a group whose
pods ask most of an instance type is admitted, Karpenter finds the type too small once the
DaemonSets are counted, and the group stays half placed until it is given back. The
``pools`` decision passes the DaemonSets (parsed here, one ``PodDemand`` each, bounded as any
pod's) to ``backends.pools.provisioning.Launcher``, which takes their requests and one pod slot each off
every launchable node's allocatable, and off a NodeClaim's room while its node comes up.
The condition taints a DaemonSet's pods tolerate by default (``not-ready``,
``unreachable``, ...) do not keep them off. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from gatekeeper.core.kube.objects import as_map, meta
from gatekeeper.core.model.demand import PodDemand, pod_demand
from gatekeeper.core.model.nodes import Node

__all__ = ["daemon_overhead", "daemon_set_view", "less_daemons", "parse_daemon_set"]

_META = ("name", "namespace", "uid", "resourceVersion")
_POD_SPEC = ("nodeSelector", "tolerations", "overhead", "priorityClassName", "runtimeClassName", "resources")
_CONTAINER = ("name", "resources", "restartPolicy")


def daemon_set_view(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the decisions read of a DaemonSet (every one of the cluster is cached): its name
    and version, and of its pod template the requests and the node constraints."""
    m = meta(obj)
    spec = as_map(as_map(as_map(obj.get("spec")).get("template")).get("spec"))
    view_spec: dict[str, Any] = {k: spec[k] for k in _POD_SPEC if k in spec}
    node_affinity = as_map(spec.get("affinity")).get("nodeAffinity")
    if node_affinity is not None:
        view_spec["affinity"] = {"nodeAffinity": node_affinity}
    for key in ("containers", "initContainers"):
        if isinstance(spec.get(key), list):
            view_spec[key] = [{k: as_map(c)[k] for k in _CONTAINER if k in as_map(c)} for c in spec[key]]
    return {"metadata": {k: m[k] for k in _META if k in m}, "spec": {"template": {"spec": view_spec}}}


def parse_daemon_set(obj: Mapping[str, Any]) -> PodDemand:
    """The pod a DaemonSet runs on each node it selects; ValueError when unreadable."""
    m = meta(obj)
    where = f"DaemonSet {m.get('namespace')}/{m.get('name')}: spec.template.spec"
    spec = as_map(as_map(as_map(obj.get("spec")).get("template")).get("spec"))
    return pod_demand("daemon", spec, where=where)


def daemon_overhead(daemons: Iterable[PodDemand], node: Node) -> dict[str, int]:
    """What the DaemonSets' pods that go to ``node`` ask together, ``pods`` included."""
    out: dict[str, int] = {}
    for daemon in daemons:
        c = daemon.constraints
        if not (
            c.matches_labels(node.name, node.labels)
            and c.tolerates(node.taints, ignore_condition_taints=True)
        ):
            continue
        for resource, amount in daemon.requests.items():
            out[resource] = out.get(resource, 0) + amount
        out["pods"] = out.get("pods", 0) + 1
    return out


def less_daemons(node: Node, daemons: Iterable[PodDemand]) -> Node:
    """``node`` with the room its DaemonSets' pods will take off its allocatable."""
    taken = daemon_overhead(daemons, node)
    if not taken:
        return node
    return replace(node, allocatable={r: max(a - taken.get(r, 0), 0) for r, a in node.allocatable.items()})
