"""What a pod, and a whole LWS group, asks of the cluster: effective requests by Kubernetes' rules.

The gatekeeper must know a group's demand *before* its pods exist (with
``startupPolicy: LeaderReady`` the workers are only created once the leader runs), so
the demand is computed from the LeaderWorkerSet templates, with the same rules the
API server and the kube-scheduler apply to real pods (``resource.PodRequests`` in
``k8s.io/component-helpers``):

* per container, a resource with a limit but no request is requested at its limit
  (the API server's defaulting; this is how ``nvidia.com/gpu: 1`` limits count);
* regular containers add up, and so do restartable init containers (sidecars,
  ``restartPolicy: Always``);
* each other init container needs its own request plus the sidecars started before
  it; the pod needs the larger of that peak and the steady-state sum;
* pod-level ``spec.resources`` (PodLevelResources) replace the aggregate for cpu,
  memory and hugepages-* (a pod-level limit without request stands in for the request
  only when no container requests that resource, as the API server defaults it);
* ``spec.overhead`` (or the RuntimeClass overhead the caller passes) is added last.

Amounts are in scheduler units (see ``quantity.to_units``), rounded up per pod as the
scheduler does. Devices a template asks through DRA claims are counted as the resource their
DeviceClass names, from the ResourceClaimTemplates the caller passes (``core.model.claims``;
what cannot be counted is refused). The requests a
namespace's LimitRanges give a container that names none (``core.model.limits``; added at
pod creation, invisible in the template) are added when the caller passes them. Not
modelled: in-place resize status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gatekeeper.core.kube.fields import integer, mapping, sequence, string
from gatekeeper.core.kube.keys import LWS_API_VERSION, LWS_NAME_LABEL
from gatekeeper.core.kube.quantity import QuantityLike, parse_quantity, to_units
from gatekeeper.core.kube.selectors import NodeConstraints, parse_label_map, parse_node_constraints
from gatekeeper.core.model.claims import NO_CLAIMS, ClaimBook, template_counts
from gatekeeper.core.model.limits import Defaults
from gatekeeper.core.model.spread import Spread, parse_spreads

#: Resource amounts in scheduler units (cpu: millicores; everything else: base units).
Resources = Mapping[str, int]

_POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})
MAX_GROUP_SIZE = 1000
"""The most pods one group (``spec.leaderWorkerTemplate.size``) may have: a larger group is
``InvalidSpec``. Multi-host inference spans a few nodes to a few dozen; the ceiling keeps
one LWS from making every pass build and place billions of pods."""


@dataclass(frozen=True)
class PodDemand:
    """One pod of a group: its role, effective requests and node constraints.

    ``requests`` holds only non-zero amounts and never ``pods``; treat it as immutable.
    """

    role: str
    requests: Resources
    constraints: NodeConstraints = field(default_factory=NodeConstraints)
    spreads: tuple[Spread, ...] = ()
    """Its hard topology spread constraints (``core.model.spread``), read from its LWS template."""
    counted_in: tuple[Spread, ...] = ()
    """The constraints of its group's pods whose selector matches it: where it is placed, it
    counts for them (a leader without constraints counts for its workers' rule)."""
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "_hash",
            hash(
                (self.role, frozenset(self.requests.items()), self.constraints, self.spreads, self.counted_in)
            ),
        )

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True)
class GroupDemand:
    """The demand of one LWS group: its pods (leader first), their total, and how many there are."""

    pods: tuple[PodDemand, ...]
    total: Resources = field(init=False, compare=False)
    pod_count: int = field(init=False, compare=False)
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.pods:
            raise ValueError("a group has at least one pod")
        total: dict[str, int] = {}
        for pod in self.pods:
            for name, amount in pod.requests.items():
                total[name] = total.get(name, 0) + amount
        object.__setattr__(self, "total", total)
        object.__setattr__(self, "pod_count", len(self.pods))
        object.__setattr__(self, "_hash", hash(self.pods))

    def __hash__(self) -> int:
        return self._hash

    def pods_needing(self, resource: str) -> int:
        """How many of the group's pods request ``resource``."""
        return sum(1 for pod in self.pods if pod.requests.get(resource, 0) > 0)


def _quantities(value: object, where: str) -> dict[str, Fraction]:
    result: dict[str, Fraction] = {}
    for name, raw in mapping(value, where).items():
        try:
            amount = parse_quantity(raw)
        except ValueError as err:
            raise ValueError(f"{where}[{name}]: {err}") from None
        if amount < 0:
            raise ValueError(f"{where}[{name}]: {raw!r} is negative")
        result[str(name)] = amount
    return result


def _add(into: dict[str, Fraction], other: Mapping[str, Fraction]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, Fraction(0)) + amount


def _max_into(into: dict[str, Fraction], other: Mapping[str, Fraction]) -> None:
    for name, amount in other.items():
        if name not in into or amount > into[name]:
            into[name] = amount


def _container_requests(container: object, where: str, defaults: Defaults) -> dict[str, Fraction]:
    resources = mapping(mapping(container, where).get("resources"), f"{where}.resources")
    requests = _quantities(resources.get("requests"), f"{where}.resources.requests")
    for name, limit in _quantities(resources.get("limits"), f"{where}.resources.limits").items():
        requests.setdefault(name, limit)  # API server defaulting: request = limit
    for name, amount in defaults.items():
        requests.setdefault(name, amount)  # then the LimitRanger's, where neither is named
    return requests


def _is_pod_level(resource: str) -> bool:
    return resource in _POD_LEVEL_RESOURCES or resource.startswith("hugepages-")


def pod_requests(
    pod_spec: Mapping[str, Any],
    *,
    overhead: Mapping[str, QuantityLike] | None = None,
    where: str = "spec",
    defaults: Defaults | None = None,
) -> dict[str, int]:
    """Effective requests of a pod spec, in scheduler units, zero amounts dropped.

    ``overhead`` is the RuntimeClass ``overhead.podFixed`` of the pod's
    ``runtimeClassName``, used when the spec has no ``overhead`` of its own (templates
    never do; the RuntimeClass admission plugin fills it in at pod creation).
    ``defaults`` are the requests the namespace's LimitRanges give a container that names
    none (``core.model.limits``); a pod already made has them in its spec.
    Raises ValueError naming the field for malformed specs.
    """
    given: Defaults = defaults or {}
    total: dict[str, Fraction] = {}
    requested: set[str] = set()
    containers = sequence(pod_spec.get("containers"), f"{where}.containers")
    for i, container in enumerate(containers):
        requests = _container_requests(container, f"{where}.containers[{i}]", given)
        requested.update(requests)
        _add(total, requests)

    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for i, container in enumerate(sequence(pod_spec.get("initContainers"), f"{where}.initContainers")):
        ctx = f"{where}.initContainers[{i}]"
        requests = _container_requests(container, ctx, given)
        requested.update(requests)
        if string(mapping(container, ctx).get("restartPolicy"), f"{ctx}.restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            _max_into(init_peak, sidecars)
        else:
            running = dict(requests)
            _add(running, sidecars)
            _max_into(init_peak, running)
    _max_into(total, init_peak)

    pod_resources = mapping(pod_spec.get("resources"), f"{where}.resources")
    pod_level_requests = _quantities(pod_resources.get("requests"), f"{where}.resources.requests")
    pod_level_limits = _quantities(pod_resources.get("limits"), f"{where}.resources.limits")
    for name, amount in pod_level_limits.items():
        if _is_pod_level(name) and name not in pod_level_requests and name not in requested:
            total[name] = amount
    for name, amount in pod_level_requests.items():
        if _is_pod_level(name):
            total[name] = amount

    own_overhead = pod_spec.get("overhead")
    if own_overhead is not None:
        _add(total, _quantities(own_overhead, f"{where}.overhead"))
    elif overhead is not None:
        _add(total, _quantities(overhead, "RuntimeClass overhead.podFixed"))

    units = {name: to_units(name, amount) for name, amount in total.items() if name != "pods"}
    return {name: amount for name, amount in units.items() if amount > 0}


def pod_demand(
    role: str,
    pod_spec: Mapping[str, Any],
    *,
    overhead: Mapping[str, QuantityLike] | None = None,
    where: str = "spec",
    defaults: Defaults | None = None,
    spread_as: tuple[str, Mapping[str, str]] | None = None,
) -> PodDemand:
    """A ``PodDemand`` for a pod spec: effective requests plus node constraints; with
    ``spread_as`` (its namespace and labels) its hard topology spread constraints too."""
    return PodDemand(
        role=role,
        requests=pod_requests(pod_spec, overhead=overhead, where=where, defaults=defaults),
        constraints=parse_node_constraints(pod_spec, where),
        spreads=parse_spreads(pod_spec, spread_as[0], spread_as[1], where) if spread_as else (),
    )


def _template_demand(
    role: str,
    template: Mapping[str, Any],
    where: str,
    runtime_class_overhead: Mapping[str, Mapping[str, QuantityLike]],
    defaults: Defaults | None,
    claims: tuple[str, ClaimBook],
    lws_name: str = "",
) -> PodDemand:
    spec = template.get("spec")
    if spec is None:
        raise ValueError(f"{where}.spec: missing")
    spec = mapping(spec, f"{where}.spec")
    if not sequence(spec.get("containers"), f"{where}.spec.containers"):
        raise ValueError(f"{where}.spec.containers: a pod needs at least one container")
    devices = template_counts(claims[0], spec, claims[1], f"{where}.spec")
    runtime_class = string(spec.get("runtimeClassName"), f"{where}.spec.runtimeClassName")
    overhead = runtime_class_overhead.get(runtime_class) if runtime_class else None
    spread_as = (claims[0], _template_labels(template, lws_name, where))
    pod = pod_demand(
        role, spec, overhead=overhead, where=f"{where}.spec", defaults=defaults, spread_as=spread_as
    )
    if not devices:
        return pod
    requests = dict(pod.requests)
    for resource, count in devices.items():
        requests[resource] = requests.get(resource, 0) + count
    return PodDemand(role=role, requests=requests, constraints=pod.constraints, spreads=pod.spreads)


def _template_labels(template: Mapping[str, Any], lws_name: str, where: str) -> dict[str, str]:
    """The labels a pod made from ``template`` has that the gatekeeper can know before it exists:
    the template's, and LWS's name label."""
    labels = parse_label_map(mapping(template.get("metadata"), f"{where}.metadata").get("labels"), where)
    labels[LWS_NAME_LABEL] = lws_name
    return labels


def _counted(pod: PodDemand, rules: tuple[Spread, ...], labels: Mapping[str, str]) -> PodDemand:
    """``pod`` with the constraints of its group that count it (``PodDemand.counted_in``)."""
    counted = tuple(r for r in rules if r.selector is not None and r.selector.matches(labels))
    if not counted:
        return pod
    return PodDemand(pod.role, pod.requests, pod.constraints, pod.spreads, counted)


def group_demand(
    lws: Mapping[str, Any],
    *,
    runtime_class_overhead: Mapping[str, Mapping[str, QuantityLike]] | None = None,
    container_defaults: Defaults | None = None,
    claim_book: ClaimBook = NO_CLAIMS,
) -> GroupDemand:
    """The demand of one group of a LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``).

    A group is the leader pod plus ``size - 1`` worker pods (``size`` defaults to 1).
    The leader uses ``leaderTemplate`` when present, else ``workerTemplate``.
    ``subGroupPolicy`` only partitions the group for exclusive placement; it does not
    change what the group asks for. ``runtime_class_overhead`` maps RuntimeClass names
    to their ``overhead.podFixed``; ``container_defaults`` are the requests the LWS's
    namespace's LimitRanges give a container that names none (``core.model.limits``);
    ``claim_book`` what its DRA claims ask (``core.model.claims``).
    Raises ValueError naming the LWS and the field.
    """
    meta = lws.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    namespace, name = meta.get("namespace"), meta.get("name")
    label = f"LeaderWorkerSet {namespace}/{name}" if namespace else f"LeaderWorkerSet {name}"
    try:
        api_version = lws.get("apiVersion")
        if api_version is not None and api_version != LWS_API_VERSION:
            raise ValueError(f"apiVersion: expected {LWS_API_VERSION}, got {api_version!r}")
        spec = mapping(lws.get("spec"), "spec")
        where = "spec.leaderWorkerTemplate"
        template = spec.get("leaderWorkerTemplate")
        if template is None:
            raise ValueError(f"{where}: missing")
        template = mapping(template, where)
        size = integer(template.get("size"), f"{where}.size", 1)
        if size < 1:
            raise ValueError(f"{where}.size: must be at least 1, got {size}")
        if size > MAX_GROUP_SIZE:
            raise ValueError(
                f"{where}.size: at most {MAX_GROUP_SIZE} pods per group are supported, got {size}"
            )
        worker_template = template.get("workerTemplate")
        if worker_template is None:
            raise ValueError(f"{where}.workerTemplate: missing")
        overheads = runtime_class_overhead or {}
        claims = (str(namespace or ""), claim_book)
        worker_where = f"{where}.workerTemplate"
        leader_template = template.get("leaderTemplate")
        if leader_template is None:
            leader = _template_demand(
                "leader",
                mapping(worker_template, worker_where),
                worker_where,
                overheads,
                container_defaults,
                claims,
                str(name or ""),
            )
        else:
            leader_where = f"{where}.leaderTemplate"
            leader = _template_demand(
                "leader",
                mapping(leader_template, leader_where),
                leader_where,
                overheads,
                container_defaults,
                claims,
                str(name or ""),
            )
        worker = None
        if size > 1:
            worker = _template_demand(
                "worker",
                mapping(worker_template, worker_where),
                worker_where,
                overheads,
                container_defaults,
                claims,
                str(name or ""),
            )
        rules = tuple(dict.fromkeys((*leader.spreads, *(worker.spreads if worker else ()))))
        if rules:
            leader_tpl = mapping(leader_template if leader_template is not None else worker_template, where)
            leader = _counted(leader, rules, _template_labels(leader_tpl, str(name or ""), where))
            if worker is not None:
                worker_labels = _template_labels(mapping(worker_template, where), str(name or ""), where)
                worker = _counted(worker, rules, worker_labels)
        pods = [leader, *([worker] * (size - 1) if worker is not None else [])]
    except ValueError as err:
        raise ValueError(f"{label}: {err}") from None
    return GroupDemand(tuple(pods))
