"""What an LWS's pods show about gang placement: whole groups, stranded GPUs.

Why this exists: the demo, the end-to-end tests and the benchmarks all judge a
scale-up by the same two numbers the LWS issue's reporter cared about: how many
groups run whole, and how many GPUs are held by groups that cannot run. Reading them
off pod objects (plain dicts, as the API returns them) is kept here, in one place,
free of I/O, so each of those callers reports the same figures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.core.kube.keys import GROUP_INDEX_LABEL, LWS_NAME_LABEL, SCHEDULING_GATE

__all__ = ["GATE", "GROUP_INDEX_LABEL", "LWS_NAME_LABEL", "GroupView", "Verdict", "summarize"]

GATE = SCHEDULING_GATE
GPU = "nvidia.com/gpu"


def _index(value: object) -> int | None:
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None


def _gpus(pod: Mapping[str, Any]) -> int:
    total = 0
    for c in pod.get("spec", {}).get("containers", []):
        res = c.get("resources", {})
        val = res.get("requests", {}).get(GPU, res.get("limits", {}).get(GPU, 0))
        try:
            total += int(val)
        except (TypeError, ValueError):
            continue  # not a whole number of GPUs: the API server would have refused it
    return total


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status", {})
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", []))


@dataclass
class GroupView:
    """One LWS group as its pods show it."""

    lws: str
    index: int
    pods: int = 0
    bound: int = 0
    ready: int = 0
    gated: int = 0
    gpus_bound: int = 0

    def whole(self, size: int) -> bool:
        return self.ready == size


@dataclass
class Verdict:
    """The figures of one moment: whole groups, GPUs held, GPUs stranded."""

    size: int
    groups: dict[tuple[str, int], GroupView] = field(default_factory=dict)

    @property
    def whole_groups(self) -> int:
        return sum(1 for g in self.groups.values() if g.whole(self.size))

    @property
    def gpus_held(self) -> int:
        return sum(g.gpus_bound for g in self.groups.values())

    @property
    def gpus_stranded(self) -> int:
        """GPUs bound to pods of groups that are not running whole."""
        return sum(g.gpus_bound for g in self.groups.values() if not g.whole(self.size))

    @property
    def partial_groups(self) -> int:
        """Groups holding some capacity without running whole."""
        return sum(1 for g in self.groups.values() if g.bound and not g.whole(self.size))

    @property
    def gated_pods(self) -> int:
        return sum(g.gated for g in self.groups.values())

    def line(self, gpus_total: int | None = None) -> str:
        total = f" of {gpus_total}" if gpus_total is not None else ""
        return (
            f"whole groups running: {self.whole_groups}; "
            f"GPUs held: {self.gpus_held}{total}, stranded in incomplete groups: {self.gpus_stranded}; "
            f"partial groups: {self.partial_groups}; gated pods: {self.gated_pods}"
        )


def summarize(pods: Iterable[Mapping[str, Any]], size: int) -> Verdict:
    """Group LWS pods by (LWS name, group index) and count what each group holds."""
    verdict = Verdict(size=size)
    for pod in pods:
        meta = pod.get("metadata", {})
        labels = meta.get("labels", {})
        index = _index(labels.get(GROUP_INDEX_LABEL))
        if meta.get("deletionTimestamp") or index is None:
            continue  # leaving, or not an LWS group's pod (a forged label the fault tests make)
        key = (labels.get(LWS_NAME_LABEL, ""), index)
        g = verdict.groups.setdefault(key, GroupView(lws=key[0], index=key[1]))
        g.pods += 1
        if pod.get("spec", {}).get("nodeName") and pod.get("status", {}).get("phase") not in (
            "Succeeded",
            "Failed",
        ):
            g.bound += 1
            g.gpus_bound += _gpus(pod)
        if _ready(pod):
            g.ready += 1
        if any(s.get("name") == GATE for s in pod.get("spec", {}).get("schedulingGates", []) or []):
            g.gated += 1
    return verdict
