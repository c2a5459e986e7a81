"""Which nodes a pod may land on: nodeSelector, required node affinity, taints and tolerations.

Node fit is only meaningful if it uses the same node eligibility rules as the
kube-scheduler's NodeAffinity and TaintToleration filters; otherwise the gatekeeper
would admit a group onto nodes its pods can never be bound to. This module models
those rules on plain label dicts, as small hashable values so that the planner can
cache "which nodes does this kind of pod accept" once per planning pass.

Modelled: ``spec.nodeSelector``; ``requiredDuringSchedulingIgnoredDuringExecution``
node selector terms (``matchExpressions`` with In, NotIn, Exists, DoesNotExist, Gt, Lt,
and ``matchFields`` on ``metadata.name``); taints with effects NoSchedule and NoExecute
against tolerations (operators Equal and Exists, empty key, empty effect).
Not modelled here: preferred (soft) affinity, pod (anti-)affinity, topology spread (hard
constraints are, in ``core.model.spread`` and ``core.admission.skew``), and
numeric toleration operators; they can only make the scheduler *more* restrictive.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gatekeeper.core.kube.fields import mapping as _mapping
from gatekeeper.core.kube.fields import sequence as _list
from gatekeeper.core.kube.fields import string as _str

#: Taints added by the node lifecycle controller for transient node conditions.
CONDITION_TAINT_PREFIX = "node.kubernetes.io/"
# Every pod gets NoExecute tolerations for these from the DefaultTolerationSeconds
# admission plugin, so they never stop a pod from being scheduled.
_DEFAULT_TOLERATED_NOEXECUTE = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
_FILTERING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
_FIELD_OPERATORS = frozenset({"In", "NotIn"})
_SET_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


@dataclass(frozen=True)
class Taint:
    """A node taint (``spec.taints[]``)."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class Toleration:
    """A pod toleration (``spec.tolerations[]``); empty key/effect mean "any"."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Same rule as ``v1.Toleration.ToleratesTaint``."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return False


@dataclass(frozen=True)
class Requirement:
    """One ``matchExpressions`` / ``matchFields`` entry of a node selector term."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, value: str | None) -> bool:
        """Does a node whose label (or field) ``key`` is ``value`` (None: absent) satisfy this?"""
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if value is None or len(self.values) != 1:
            return False
        try:
            have, want = int(value), int(self.values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want


@dataclass(frozen=True)
class NodeSelectorTerm:
    """A node selector term: all of its requirements must hold (an empty term matches nothing)."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False
        if not all(req.matches(labels.get(req.key)) for req in self.expressions):
            return False
        return all(req.matches(name if req.key == "metadata.name" else None) for req in self.fields)


@dataclass(frozen=True)
class NodeConstraints:
    """Everything about a pod that restricts the nodes it may run on.

    Hashable, so pods with identical constraints share one eligibility computation.
    ``affinity`` is the tuple of required node selector terms (ORed), or None if the
    pod has no required node affinity.
    """

    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    affinity: tuple[NodeSelectorTerm, ...] | None = None

    def matches_labels(self, name: str, labels: Mapping[str, str]) -> bool:
        """nodeSelector and required node affinity, as the NodeAffinity filter applies them."""
        if any(labels.get(key) != value for key, value in self.node_selector):
            return False
        return self.affinity is None or any(term.matches(name, labels) for term in self.affinity)

    def tolerates(self, taints: Sequence[Taint], *, ignore_condition_taints: bool = False) -> bool:
        """Does the pod tolerate every NoSchedule/NoExecute taint, as the TaintToleration filter asks?

        With ``ignore_condition_taints`` the transient ``node.kubernetes.io/*`` taints
        (not-ready, unreachable, unschedulable, pressure) are ignored: used to decide
        whether a node could *ever* take the pod.
        """
        for taint in taints:
            if taint.effect not in _FILTERING_EFFECTS:
                continue
            if ignore_condition_taints and taint.key.startswith(CONDITION_TAINT_PREFIX):
                continue
            if taint.effect == "NoExecute" and taint.key in _DEFAULT_TOLERATED_NOEXECUTE:
                continue
            if not any(toleration.tolerates(taint) for toleration in self.tolerations):
                return False
        return True


@dataclass(frozen=True)
class LabelSelector:
    """A ``metav1.LabelSelector`` (``matchLabels`` and ``matchExpressions``, ANDed).

    The empty selector matches every set of labels, as in Kubernetes.
    """

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(key) != value for key, value in self.match_labels):
            return False
        return all(req.matches(labels.get(req.key)) for req in self.expressions)


def parse_label_selector(value: object, where: str) -> LabelSelector:
    """A ``metav1.LabelSelector``; raises ValueError naming ``where``."""
    obj = _mapping(value, where)
    unknown = sorted(set(obj) - {"matchLabels", "matchExpressions"})
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r}")
    labels = parse_label_map(obj.get("matchLabels"), f"{where}.matchLabels")
    expressions = _requirements(obj.get("matchExpressions"), f"{where}.matchExpressions", _SET_OPERATORS)
    for i, req in enumerate(expressions):
        if (req.operator in ("In", "NotIn")) != bool(req.values):
            raise ValueError(
                f"{where}.matchExpressions[{i}].values: required for In and NotIn, "
                "and must be empty for Exists and DoesNotExist"
            )
    return LabelSelector(tuple(sorted(labels.items())), expressions)


def parse_label_map(value: object, where: str) -> dict[str, str]:
    """A ``{label: value}`` map such as a nodeSelector; raises ValueError naming ``where``."""
    result: dict[str, str] = {}
    for key, item in _mapping(value, where).items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise ValueError(f"{where}: expected string keys and values, got {key!r}: {item!r}")
        result[key] = item
    return result


def parse_taints(value: object, where: str = "spec.taints") -> tuple[Taint, ...]:
    """Parse a Node's ``spec.taints``."""
    taints = []
    for i, item in enumerate(_list(value, where)):
        entry = _mapping(item, f"{where}[{i}]")
        taints.append(
            Taint(
                key=_str(entry.get("key"), f"{where}[{i}].key"),
                value=_str(entry.get("value"), f"{where}[{i}].value"),
                effect=_str(entry.get("effect"), f"{where}[{i}].effect"),
            )
        )
    return tuple(taints)


def parse_tolerations(value: object, where: str = "spec.tolerations") -> tuple[Toleration, ...]:
    """Parse a pod spec's ``tolerations``."""
    tolerations = []
    for i, item in enumerate(_list(value, where)):
        entry = _mapping(item, f"{where}[{i}]")
        tolerations.append(
            Toleration(
                key=_str(entry.get("key"), f"{where}[{i}].key"),
                operator=_str(entry.get("operator"), f"{where}[{i}].operator", "Equal"),
                value=_str(entry.get("value"), f"{where}[{i}].value"),
                effect=_str(entry.get("effect"), f"{where}[{i}].effect"),
            )
        )
    return tuple(tolerations)


def _requirements(value: object, where: str, operators: frozenset[str]) -> tuple[Requirement, ...]:
    result = []
    for i, item in enumerate(_list(value, where)):
        entry = _mapping(item, f"{where}[{i}]")
        operator = _str(entry.get("operator"), f"{where}[{i}].operator")
        if operator not in operators:
            raise ValueError(f"{where}[{i}].operator: unsupported operator {operator!r}")
        values = tuple(_str(v, f"{where}[{i}].values") for v in _list(entry.get("values"), f"{where}[{i}]"))
        result.append(
            Requirement(key=_str(entry.get("key"), f"{where}[{i}].key"), operator=operator, values=values)
        )
    return tuple(result)


def parse_required_node_affinity(
    affinity: object, where: str = "spec.affinity"
) -> tuple[NodeSelectorTerm, ...] | None:
    """The required node selector terms of a pod spec's ``affinity`` (None when there are none)."""
    node_affinity = _mapping(_mapping(affinity, where).get("nodeAffinity"), f"{where}.nodeAffinity")
    where = f"{where}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    terms = []
    for i, item in enumerate(_list(_mapping(required, where).get("nodeSelectorTerms"), where)):
        term = _mapping(item, f"{where}.nodeSelectorTerms[{i}]")
        prefix = f"{where}.nodeSelectorTerms[{i}]"
        terms.append(
            NodeSelectorTerm(
                expressions=_requirements(
                    term.get("matchExpressions"), f"{prefix}.matchExpressions", _LABEL_OPERATORS
                ),
                fields=_requirements(term.get("matchFields"), f"{prefix}.matchFields", _FIELD_OPERATORS),
            )
        )
    return tuple(terms)


def parse_node_constraints(pod_spec: Mapping[str, Any], where: str = "spec") -> NodeConstraints:
    """The node constraints of a pod spec (nodeSelector, required node affinity, tolerations)."""
    selector = parse_label_map(pod_spec.get("nodeSelector"), f"{where}.nodeSelector")
    return NodeConstraints(
        node_selector=tuple(sorted(selector.items())),
        tolerations=parse_tolerations(pod_spec.get("tolerations"), f"{where}.tolerations"),
        affinity=parse_required_node_affinity(pod_spec.get("affinity"), f"{where}.affinity"),
    )


_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_label_key(key: object) -> bool:
    """Is ``key`` a label key the API server accepts (``[prefix/]name``)?"""
    prefix, _, name = key.rpartition("/") if isinstance(key, str) else ("", "", "")
    return (
        isinstance(key, str)
        and bool(_LABEL_NAME.fullmatch(name))
        and (not prefix or (len(prefix) <= 253 and bool(_DNS_SUBDOMAIN.fullmatch(prefix))))
    )
