"""What an attack did to the cluster, measured while it ran: the attack table's last columns.

Why this exists: an attack row says what the tenant was told, but the promise is about GPUs:
the attacked pool's nodes never hold more than its quota, no group is left half-placed (a
leader holding GPUs while its workers cannot bind), and another tenant's group is admitted
and runs as if nothing happened. `watching` samples the pods on the attacked pool's nodes
(or, with no pool, in the attacked namespaces) every second while the attack runs, then
starts another tenant's group (``others``) and waits for it; each row the test adds
meanwhile (``attack_table.add``) gets the three figures, and the test fails if one of them
breaks the promise. The arithmetic is here as pure functions, tested in
``tests/unit/test_attack_watch.py``.

Who calls it: the attack tests, through ``watching`` with a bystander from
``tests/e2e/bystanders.py`` for their sandbox.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gatekeeper.core.kube.keys import GROUP_INDEX_LABEL, LWS_NAME_LABEL, WORKER_INDEX_LABEL

from . import attack_table

GPU = "nvidia.com/gpu"
SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
STRANDED_AFTER = 15.0
"""Seconds a group may stay partly bound before its bound GPUs count as stranded: a group's
pods bind one by one in a second or two, and an LWS restarts a group in a few seconds."""

GroupId = tuple[str, str, str]
"""(namespace, LWS name, group index)."""


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """The GPUs a pod asks: its containers' requests (or limits, which default them), and an
    init container's if larger, as the scheduler counts them."""

    def of(container: Mapping[str, Any]) -> int:
        res = container.get("resources") or {}
        value = (res.get("requests") or {}).get(GPU, (res.get("limits") or {}).get(GPU, 0))
        return int(value)

    spec = pod.get("spec") or {}
    main = sum(of(c) for c in spec.get("containers") or [])
    init = max((of(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def holds(pod: Mapping[str, Any]) -> bool:
    """A pod holds its node's GPUs from its binding until it ends (a deleting pod still runs)."""
    return bool((pod.get("spec") or {}).get("nodeName")) and (pod.get("status") or {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )


@dataclass(frozen=True)
class Sample:
    """One look at the attacked namespaces: GPUs held, and the GPUs held by each group of an LWS
    that has some but not all of its ``size`` pods bound."""

    at: float
    bound: int
    partial: Mapping[GroupId, int]


def claimed_devices(claims: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Pod UID -> the devices allocated to the DRA claims reserved for it: the GPUs a pod holds
    through claims rather than container requests."""
    held: dict[str, int] = {}
    for claim in claims:
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        for consumer in status.get("reservedFor") or []:
            if consumer.get("resource") == "pods" and results:
                uid = str(consumer.get("uid"))
                held[uid] = held.get(uid, 0) + len(results)
    return held


def sample(
    pods: Iterable[Mapping[str, Any]],
    at: float,
    on: Collection[str] | None = None,
    devices: Mapping[str, int] | None = None,
) -> Sample:
    """``bound``: the GPUs of the pods bound to a node in ``on`` (any node if None), their DRA
    claims' devices (``devices``, by pod UID) included; ``partial``:
    the groups with such a pod whose bound pods are fewer than their size. A group whose only
    pod is its leader, not Ready yet, is not partial: under ``LeaderReady`` its LWS makes the
    workers once the leader is Ready (under ``LeaderCreated`` they exist from the start). Nor is
    a group whose held pods are all being deleted: it is on its way out (given back, or scaled
    away), its GPUs counted in ``bound`` and held against its quota until its pods are gone,
    however long a tenant's finalizer or grace period keeps them."""
    bound = 0
    held: dict[GroupId, list[int]] = {}
    staying: set[GroupId] = set()
    size: dict[GroupId, int] = {}
    watched: set[GroupId] = set()
    loading: dict[GroupId, bool] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
        name, index = labels.get(LWS_NAME_LABEL), labels.get(GROUP_INDEX_LABEL)
        group = (str(meta.get("namespace", "")), str(name), str(index)) if name and index else None
        stated = str(notes.get(SIZE_ANNOTATION, ""))
        if group is not None and stated.isdigit():
            size[group] = max(size.get(group, 0), int(stated))
        if group is not None:
            lone_leader = labels.get(WORKER_INDEX_LABEL, "0") == "0" and not ready(pod)
            loading[group] = loading.get(group, True) and lone_leader
        if not holds(pod):
            continue
        gpus = pod_gpus(pod) + (devices or {}).get(str(meta.get("uid")), 0)
        if on is None or (pod.get("spec") or {}).get("nodeName") in on:
            bound += gpus
            if group is not None:
                watched.add(group)
        if group is not None:
            held.setdefault(group, []).append(gpus)
            if not meta.get("deletionTimestamp"):
                staying.add(group)
    partial = {
        g: sum(gpus)
        for g, gpus in held.items()
        if g in watched
        and g in size
        and len(gpus) < size[g]
        and sum(gpus)
        and not loading.get(g)
        and g in staying
    }
    return Sample(at=at, bound=bound, partial=partial)


def peak(samples: Sequence[Sample]) -> int:
    return max((s.bound for s in samples), default=0)


def stranded(samples: Sequence[Sample], after: float = STRANDED_AFTER) -> int:
    """The most GPUs held at one time by groups that had been partly bound for ``after`` seconds
    or more without a break."""
    since: dict[GroupId, float] = {}
    worst = 0
    for s in samples:
        since = {g: since.get(g, s.at) for g in s.partial}
        worst = max(worst, sum(gpus for g, gpus in s.partial.items() if s.at - since[g] >= after))
    return worst


Others = Callable[[], str]
"""Starts another tenant's group in a namespace and pool of its own, waits until it runs whole,
says how long that took, and cleans up after itself; raises if it does not run."""


@dataclass
class Watch:
    """A running watch. The test says, once it has made them, what the quota holds: ``pool``
    (the nodes of a Pool or flavor, by label, and its quota). Until then, and for an attack with
    no pool, the watched namespaces' pods are counted. ``others`` may be replaced by a test whose
    other tenant is already there (a hub's other member)."""

    kubectl: Sequence[str]
    namespaces: list[str]
    quota: int | None
    others: Others
    nodes: dict[str, str] | None = None
    samples: list[Sample] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    skipped: bool = False
    """The test skipped before it said what the quota holds (on an existing cluster, where it
    needed the sandbox): nothing is judged, no row is kept."""

    def pool(self, nodes: Mapping[str, str], quota: int) -> None:
        """Count the GPUs bound on the nodes with labels ``nodes`` (in any namespace: an intruder
        is counted too) against ``quota``."""
        self.nodes, self.quota = dict(nodes), quota

    def _get(self, *args: str) -> Any:
        res = subprocess.run([*self.kubectl, "get", *args, "-o", "json"], capture_output=True, text=True)
        if res.returncode != 0:
            self.failures.append(res.stderr.strip())
            return None
        return json.loads(res.stdout)["items"]

    def look(self) -> None:
        nodes = self.nodes
        if nodes is not None:
            selector = ",".join(f"{k}={v}" for k, v in nodes.items())
            names, pods = self._get("nodes", "-l", selector), self._get("pods", "-A")
            claims = self._get("resourceclaims.resource.k8s.io", "-A")
            if names is None or pods is None or claims is None:
                return
            on = {n["metadata"]["name"] for n in names}
            self.samples.append(sample(pods, time.monotonic(), on, claimed_devices(claims)))
            return
        found: list[Mapping[str, Any]] = []
        for ns in list(self.namespaces):
            got = self._get("pods", "-n", ns)
            if got is None:
                return
            found.extend(got)
        self.samples.append(sample(found, time.monotonic()))


@contextlib.contextmanager
def watching(
    kubectl: Path,
    kubeconfig: Path,
    namespaces: Sequence[str],
    *,
    others: Others,
    quota: int | None = None,
    every: float = 1.0,
) -> Iterator[Watch]:
    """Sample ``namespaces`` every ``every`` seconds while the block runs; then run ``others``.
    The rows added to the attack table inside the block get the peak against ``quota``, the
    stranded GPUs and what became of the other tenant, and the block fails unless the peak is
    within the quota, nothing was stranded and the other tenant's group ran."""
    watch = Watch(
        kubectl=[str(kubectl), f"--kubeconfig={kubeconfig}"],
        namespaces=list(namespaces),
        quota=quota,
        others=others,
    )
    first_row = len(attack_table.ROWS)
    attack_table.WATCHING.append(watch)
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            watch.look()
            stop.wait(every)

    sampler = threading.Thread(target=run, name="attack-watch", daemon=True)
    sampler.start()
    try:
        yield watch
    finally:
        stop.set()
        sampler.join()
        attack_table.WATCHING.remove(watch)
    if watch.skipped:
        del attack_table.ROWS[first_row:]
        return
    watch.look()
    went_on = watch.others()
    top, left = peak(watch.samples), stranded(watch.samples)
    assert watch.quota is not None, "an attack watch needs the quota its peak is held to"
    attack_table.measure(first_row, f"{top} of {watch.quota}", str(left), went_on)
    assert not watch.failures, f"the watch could not read the pods: {watch.failures[0]}"
    assert len(watch.samples) >= 2, "the watch took fewer than two samples"
    where = f"on nodes {watch.nodes}" if watch.nodes is not None else f"in {watch.namespaces}"
    assert top <= watch.quota, f"{top} GPUs bound {where} against a quota of {watch.quota}"
    assert not left, f"{left} GPUs held by groups left partly bound for {STRANDED_AFTER:.0f} s or more"
