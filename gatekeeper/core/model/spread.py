"""Hard pod topology spread constraints, read from a pod spec, and the bound pods they count.

Why this exists: a pod with ``topologySpreadConstraints`` and ``whenUnsatisfiable:
DoNotSchedule`` binds only to a node whose domain (its value of ``topologyKey``) would not
then hold more than ``maxSkew`` matching pods above the emptiest domain. A group whose pods
find room only against that rule can never be bound; admitting it would hold quota for
nothing. ``core.model.demand`` reads the constraints into each ``PodDemand`` (``parse_spreads``);
``core.admission.skew`` applies them in the node fit, as the filter does:

- the domains are those of the nodes the pod may count, every node of the cluster (cordoned
  and not ready ones too) that has all its constraints' keys: with ``nodeAffinityPolicy:
  Honor`` (the default) the nodes its node selector and required affinity accept, with
  ``nodeTaintsPolicy: Honor`` only nodes whose taints it tolerates (default: taints ignored);
- a domain's count is the pods matching ``labelSelector`` (plus ``matchLabelKeys``) in the
  pod's namespace bound to its nodes (``BoundPods``), plus the pods placed or held earlier in
  the pass (each pod counts for every rule of its group that selects it: ``counted_in``);
- the minimum is over those domains, 0 when there are fewer than ``minDomains``;
- a pod counts itself where the selector matches its own labels (its template's, and
  LWS's name label).

``matchLabelKeys`` naming LWS's group key or group index counts the group's own pods only
(the usual way to spread each group over hosts). Keys the gatekeeper cannot know before the
pod exists (``worker-index``, ``template-revision-hash``) are not modelled: a selector on
them is read as LWS would label the pod's template, which may miss pods (the docs list it).
``whenUnsatisfiable: ScheduleAnyway`` is scoring, not a filter: not modelled.

Pure: no I/O. Every number from the pod spec is bounded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.core.kube.fields import mapping, sequence, string
from gatekeeper.core.kube.keys import GROUP_INDEX_LABEL, GROUP_KEY_LABEL
from gatekeeper.core.kube.objects import as_map, is_live
from gatekeeper.core.kube.selectors import LabelSelector, is_label_key, parse_label_selector

__all__ = ["MAX_SPREADS", "BoundPods", "Spread", "parse_spreads"]

MAX_SPREADS = 16
"""Hard spread constraints read from one pod at most (more: the LWS is ``InvalidSpec``)."""

MAX_SKEW = 1_000_000
"""The largest ``maxSkew`` or ``minDomains`` read."""

_GROUP_KEYS = frozenset({GROUP_KEY_LABEL, GROUP_INDEX_LABEL})


@dataclass(frozen=True)
class Spread:
    """One hard topology spread constraint of a pod, ready to count."""

    namespace: str
    key: str
    """The ``topologyKey``: a node label key."""
    max_skew: int
    min_domains: int
    selector: LabelSelector | None
    """Which pods count (``labelSelector`` with ``matchLabelKeys`` folded in); None: none."""
    own: bool
    """The pod matches ``selector`` itself, so placing it adds one to its domain."""
    group_only: bool = False
    """``matchLabelKeys`` names LWS's group key or index: only the group's own pods count."""
    honor_affinity: bool = True
    honor_taints: bool = False

    @property
    def said(self) -> str:
        """The constraint in a record's words."""
        return f"maxSkew {self.max_skew} over {self.key}"


def parse_spreads(
    pod_spec: Mapping[str, Any], namespace: str, pod_labels: Mapping[str, str], where: str = "spec"
) -> tuple[Spread, ...]:
    """The hard (``DoNotSchedule``) topology spread constraints of a pod spec; raises
    ValueError naming ``where`` on one the API server would refuse, or past ``MAX_SPREADS``."""
    path = f"{where}.topologySpreadConstraints"
    items = sequence(pod_spec.get("topologySpreadConstraints"), path)
    out: list[Spread] = []
    for i, item in enumerate(items):
        entry = mapping(item, f"{path}[{i}]")
        if string(entry.get("whenUnsatisfiable"), f"{path}[{i}].whenUnsatisfiable") != "DoNotSchedule":
            continue
        out.append(_spread(entry, namespace, pod_labels, f"{path}[{i}]"))
        if len(out) > MAX_SPREADS:
            raise ValueError(f"{path}: more than {MAX_SPREADS} DoNotSchedule constraints")
    return tuple(out)


def _spread(entry: Mapping[str, Any], namespace: str, pod_labels: Mapping[str, str], where: str) -> Spread:
    key = entry.get("topologyKey")
    if not is_label_key(key):
        raise ValueError(f"{where}.topologyKey: not a node label key")
    skew, least = _count(entry.get("maxSkew"), f"{where}.maxSkew"), 1
    if entry.get("minDomains") is not None:
        least = _count(entry.get("minDomains"), f"{where}.minDomains")
    selector: LabelSelector | None = None
    if entry.get("labelSelector") is not None:
        selector = parse_label_selector(entry.get("labelSelector"), f"{where}.labelSelector")
    group_only = False
    for i, label in enumerate(sequence(entry.get("matchLabelKeys"), f"{where}.matchLabelKeys")):
        if not is_label_key(label):
            raise ValueError(f"{where}.matchLabelKeys[{i}]: not a label key")
        if label in _GROUP_KEYS:
            group_only = True
        elif label in pod_labels and selector is not None:
            selector = LabelSelector(
                tuple(sorted({*selector.match_labels, (str(label), pod_labels[str(label)])})),
                selector.expressions,
            )
    policies = {}
    for name in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        value = entry.get(name)
        if value not in (None, "Honor", "Ignore"):
            raise ValueError(f"{where}.{name}: Honor or Ignore")
        policies[name] = value
    return Spread(
        namespace=namespace,
        key=str(key),
        max_skew=skew,
        min_domains=least,
        selector=selector,
        own=selector is not None and selector.matches(pod_labels),
        group_only=group_only,
        honor_affinity=policies["nodeAffinityPolicy"] != "Ignore",
        honor_taints=policies["nodeTaintsPolicy"] == "Honor",
    )


def _count(value: object, where: str) -> int:
    if type(value) is not int or not 1 <= value <= MAX_SKEW:
        raise ValueError(f"{where}: not a whole number from 1 to {MAX_SKEW}")
    return value


@dataclass
class BoundPods:
    """The live pods bound to nodes, by namespace, counted per node for a selector on demand."""

    pods: Sequence[Mapping[str, Any]] = ()
    _by_namespace: dict[str, list[tuple[str, Mapping[str, str]]]] | None = field(default=None, repr=False)
    _counted: dict[tuple[str, LabelSelector], Counter[str]] = field(default_factory=dict, repr=False)

    def on_nodes(self, namespace: str, selector: LabelSelector) -> Counter[str]:
        """Per node name: how many of the namespace's bound live pods ``selector`` matches."""
        found = self._counted.get((namespace, selector))
        if found is None:
            found = Counter(
                node for node, labels in self._index().get(namespace, ()) if selector.matches(labels)
            )
            self._counted[(namespace, selector)] = found
        return found

    def _index(self) -> dict[str, list[tuple[str, Mapping[str, str]]]]:
        if self._by_namespace is None:
            self._by_namespace = {}
            for pod in _bound(self.pods):
                meta = as_map(pod.get("metadata"))
                labels = {str(k): str(v) for k, v in as_map(meta.get("labels")).items()}
                node = str(as_map(pod.get("spec")).get("nodeName"))
                self._by_namespace.setdefault(str(meta.get("namespace") or ""), []).append((node, labels))
        return self._by_namespace


def _bound(pods: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    for pod in pods:
        node = as_map(pod.get("spec")).get("nodeName")
        if (
            isinstance(node, str)
            and node
            and is_live(pod)
            and not as_map(pod.get("metadata")).get("deletionTimestamp")
        ):
            yield pod
