"""Builders of Kueue Workloads for the AdmissionChecks' table tests.

Why this exists: the node-fit and shared-reservation checks' tests describe Workloads in
a line each (``workload("w").pod_set("leader", 1, gpus=2).reserved().check("Pending").obj()``);
this builds the API-shaped dicts Kueue would hold.
"""

from __future__ import annotations

from typing import Any

from core_builders import GPU, ctr, pod_spec

NS = "team"
FLAVOR = "gpu-a"
KUEUE = "kueue.x-k8s.io/v1beta2"
CHECK = "node-fit"


def gpu_spec(gpus: int) -> dict[str, Any]:
    return pod_spec(ctr(cpu="1", memory="1Gi", gpu=gpus))


class WorkloadBuilder:
    """``workload("w").pod_set("leader", 1, gpus=2).reserved().check("Pending").obj()``."""

    def __init__(self, name: str, namespace: str = NS) -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": KUEUE,
            "kind": "Workload",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{name}",
                "creationTimestamp": "2025-01-01T00:00:00Z",
            },
            "spec": {"podSets": [], "priority": 0, "queueName": "lq"},
            "status": {},
        }
        self._flavor = FLAVOR

    def pod_set(
        self, name: str, count: int, *, gpus: int = 1, spec: dict[str, Any] | None = None
    ) -> WorkloadBuilder:
        self._obj["spec"]["podSets"].append(
            {"name": name, "count": count, "template": {"spec": spec or gpu_spec(gpus)}}
        )
        return self

    def age(self, seconds: int) -> WorkloadBuilder:
        """Created ``seconds`` before 2025-01-01T01:00:00Z (older = larger)."""
        minutes, secs = divmod(3600 - seconds, 60)
        self._obj["metadata"]["creationTimestamp"] = f"2025-01-01T00:{minutes:02d}:{secs:02d}Z"
        return self

    def priority(self, value: int) -> WorkloadBuilder:
        self._obj["spec"]["priority"] = value
        return self

    def flavor(self, name: str) -> WorkloadBuilder:
        self._flavor = name
        return self

    def labels(self, **labels: str) -> WorkloadBuilder:
        self._obj["metadata"]["labels"] = labels
        return self

    def owner(self, kind: str, name: str, uid: str) -> WorkloadBuilder:
        self._obj["metadata"].setdefault("ownerReferences", []).append(
            {"apiVersion": "v1", "kind": kind, "name": name, "uid": uid}
        )
        return self

    def reserved(self, counts: dict[str, int] | None = None) -> WorkloadBuilder:
        """Quota reserved (QuotaReserved=True, status.admission on the builder's flavor)."""
        assignments = []
        for ps in self._obj["spec"]["podSets"]:
            psa: dict[str, Any] = {"name": ps["name"], "flavors": {GPU: self._flavor, "cpu": self._flavor}}
            if counts and ps["name"] in counts:
                psa["count"] = counts[ps["name"]]
            assignments.append(psa)
        self._obj["status"]["admission"] = {"clusterQueue": "cq", "podSetAssignments": assignments}
        self.condition("QuotaReserved", "True")
        return self

    def condition(self, kind: str, status: str) -> WorkloadBuilder:
        self._obj["status"].setdefault("conditions", []).append(
            {
                "type": kind,
                "status": status,
                "reason": kind,
                "message": "",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
            }
        )
        return self

    def check(self, state: str = "Pending", message: str = "", name: str = CHECK) -> WorkloadBuilder:
        self._obj["status"].setdefault("admissionChecks", []).append(
            {"name": name, "state": state, "message": message, "lastTransitionTime": "2025-01-01T00:00:00Z"}
        )
        return self

    def obj(self) -> dict[str, Any]:
        return self._obj


def workload(name: str, namespace: str = NS) -> WorkloadBuilder:
    return WorkloadBuilder(name, namespace)
