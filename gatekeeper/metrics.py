"""Every metric the gatekeeper exports, in one file: names, help, labels, units.

Why this exists: an operator reads one place to learn what ``/metrics`` says, and the
names follow Prometheus' and Kubernetes' conventions in one place rather than module by
module: one prefix (``lws_gatekeeper_``), base units (seconds, bytes, cores: a ``resource``
label per series, never millicores beside bytes), ``_total`` on counters, and the same
name for what every backend does (``lws_gatekeeper_admissions_total{backend="kueue"}``,
not a metric per backend). docs/operations.md lists them, and what each name of the
earlier releases became (for anyone with alerts on the old names).

Who calls it: the modules that count (``controller``, ``webhook``) import the metric they
set from here; ``controller.app`` serves the default registry. The metrics that show the
leader's view of the cluster (``LEADER_VIEW``) are cleared when a replica stops leading,
so a standby's scrape never shows a stale pool.
"""

from __future__ import annotations

import contextlib
import platform
from collections.abc import Iterable, Mapping
from typing import Final

from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "ADMISSIONS",
    "ADMISSION_WAIT",
    "API_ERRORS",
    "API_FORBIDDEN",
    "API_REQUESTS",
    "BUILD_INFO",
    "CHECK_RECONCILE",
    "CHECK_WORKLOADS",
    "CHECK_WRITES",
    "EVENTS_DROPPED",
    "GATES_LIFTED_EARLY",
    "GIVE_BACKS",
    "GROUPS_HOLDING_PODS",
    "HUB_CLAIMED",
    "HUB_CLAIM_MOVES",
    "HUB_GRANTS",
    "HUB_MEMBERS_GONE",
    "LEADER",
    "LEADER_VIEW",
    "OTHER",
    "PODS_STOPPED",
    "POOL_LENT",
    "POOL_QUOTA",
    "POOL_USED",
    "PREFIX",
    "RECONCILE",
    "RECONCILE_STAGE",
    "SERIES_PER_GAUGE",
    "WAITING_GROUPS",
    "WATCH_BYTES",
    "WATCH_EVENTS",
    "WEBHOOK_CONNECTIONS_CLOSED",
    "WEBHOOK_LATENCY",
    "WEBHOOK_PASS_THROUGH",
    "WEBHOOK_REQUESTS",
    "WRITES",
    "Series",
    "base_value",
    "bounded",
    "build_info",
    "leading",
    "waiting_series",
]

PREFIX: Final = "lws_gatekeeper_"

# --- the process -----------------------------------------------------------------------

BUILD_INFO = Gauge(
    f"{PREFIX}build_info",
    "1, labelled with the gatekeeper's version, the Python it runs on, its backend and role",
    ["version", "python_version", "backend", "role"],
)
LEADER = Gauge(
    f"{PREFIX}leader",
    "1 while this replica holds the Lease and runs the admission loop, else 0 (every replica "
    "serves the webhook)",
)

# --- the webhook -----------------------------------------------------------------------

WEBHOOK_REQUESTS = Counter(
    f"{PREFIX}webhook_requests",
    "AdmissionReviews received, by webhook and result (patched, unchanged, allowed, denied, "
    "error, bad_request, too_large, busy, slow_body)",
    ["webhook", "result"],
)
WEBHOOK_LATENCY = Histogram(
    f"{PREFIX}webhook_request_duration_seconds",
    "Seconds from an AdmissionReview's arrival to its answer (any result), by webhook",
    ["webhook"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
WEBHOOK_CONNECTIONS_CLOSED = Counter(
    f"{PREFIX}webhook_connections_closed",
    "Webhook connections the server closed on a deadline: 'no_request' (no request head within "
    "the read deadline of the handshake), 'slow_body' (a body not read within it)",
    ["why"],
)
WEBHOOK_PASS_THROUGH = Counter(
    f"{PREFIX}webhook_pass_through",
    "Pod creates answered without the gate, their group holding its admission (answers, not pods)",
)

# --- the API server --------------------------------------------------------------------

API_REQUESTS = Counter(f"{PREFIX}api_requests", "API requests the gatekeeper made", ["verb", "resource"])
API_ERRORS = Counter(
    f"{PREFIX}api_errors",
    "API requests that failed, by verb, resource and code: the HTTP status (404, 409 and 422, and "
    "a 403 of an admission policy, are Conflicts, decided again next pass; 401, 429 and 5xx are "
    "retried; others, and a 403 of RBAC, are refused), or 'transport' when no answer came "
    "(connection refused or broken, a timeout, a broken stream)",
    ["verb", "resource", "code"],
)
API_FORBIDDEN = Counter(
    f"{PREFIX}api_forbidden",
    "API requests the gatekeeper's own RBAC does not allow, by verb and resource: nothing retries "
    "them until an admin grants the verb (the chart's ClusterRole has every verb the plans use)",
    ["verb", "resource"],
)
WATCH_EVENTS = Counter(
    f"{PREFIX}watch_events", "Watch events the informers received, by resource and type", ["resource", "type"]
)
WATCH_BYTES = Counter(
    f"{PREFIX}watch_bytes",
    "Size of the watch events the informers decoded (characters of their JSON, about bytes), by resource",
    ["resource"],
)
WRITES = Counter(
    f"{PREFIX}writes",
    "Writes of the passes' plans that went through, by resource and what they were for (the "
    "plan's tag, or the operation)",
    ["resource", "purpose"],
)
EVENTS_DROPPED = Counter(
    f"{PREFIX}events_dropped",
    "Events not posted: their namespace had its share of the minute (--max-events-per-namespace-per-minute)",
)

# --- every backend: the same names, a backend label -------------------------------------

ADMISSIONS = Counter(
    f"{PREFIX}admissions",
    "Groups admitted (their gates lifted), by backend and pool (the pool label's value: a Pool, "
    "a LocalQueue, a Queue)",
    ["backend", "pool"],
)
GIVE_BACKS = Counter(
    f"{PREFIX}give_backs",
    "Admitted groups given back, by backend, pool and reason: pools AdmissionTimeout, "
    "NotAsAdmitted, Preempted, Stranded; kueue Evicted (its Workload's admission cleared)",
    ["backend", "pool", "reason"],
)
PODS_STOPPED = Counter(
    f"{PREFIX}pods_stopped",
    "Pods the gatekeeper deleted because their group no longer holds its admission, by backend",
    ["backend"],
)
WAITING_GROUPS = Gauge(
    f"{PREFIX}waiting_groups",
    "Groups waiting for admission after the last pass, by backend and pool",
    ["backend", "pool"],
)
ADMISSION_WAIT = Histogram(
    f"{PREFIX}admission_wait_seconds",
    "Seconds from a group's first pod to its admission, by backend and pool",
    ["backend", "pool"],
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800, 7200),
)
RECONCILE = Histogram(
    f"{PREFIX}reconcile_duration_seconds", "Seconds of one admission pass, by backend", ["backend"]
)
RECONCILE_STAGE = Counter(
    f"{PREFIX}reconcile_stage_seconds",
    "Seconds spent in each stage of the admission passes (snapshot, decide, plan, execute), by backend",
    ["backend", "stage"],
)
GATES_LIFTED_EARLY = Counter(
    f"{PREFIX}gates_lifted_early",
    "Gates lifted between passes: pods born gated whose group already held its admission",
)
GROUPS_HOLDING_PODS = Gauge(
    f"{PREFIX}groups_holding_pods",
    "Admitted groups with gated pods their LeaderWorkerSet did not say (forged, past its size, "
    "or asking other than their role), by reason",
    ["reason"],
)

# --- the pools backend's Pools ------------------------------------------------------------

POOL_QUOTA = Gauge(
    f"{PREFIX}pool_quota",
    "A Pool's quota of a resource, in base units (cores, bytes, devices)",
    ["pool", "resource"],
)
POOL_USED = Gauge(
    f"{PREFIX}pool_used",
    "A Pool's quota held by admitted groups, in base units (cores, bytes, devices)",
    ["pool", "resource"],
)
POOL_LENT = Gauge(
    f"{PREFIX}pool_lent",
    "A Pool's quota held by groups of the other pools of its cohort, in base units (in pool_used too)",
    ["pool", "resource"],
)

# --- the hub ----------------------------------------------------------------------------

HUB_GRANTS = Counter(f"{PREFIX}hub_grants", "Claims granted by the hub", ["reservation"])
HUB_CLAIMED = Gauge(
    f"{PREFIX}hub_claimed",
    "Held in a Reservation by granted claims, in base units (cores, bytes, devices)",
    ["reservation", "resource"],
)
HUB_CLAIM_MOVES = Counter(
    f"{PREFIX}hub_claim_moves",
    "Claims moved by the hub because of members' heartbeats (Orphaned, Granted again, Released)",
    ["reservation", "state"],
)
HUB_MEMBERS_GONE = Gauge(f"{PREFIX}hub_members_gone", "Member clusters with claims whose heartbeat expired")

# --- Kueue AdmissionCheck controllers --------------------------------------------------------

CHECK_WORKLOADS = Gauge(
    f"{PREFIX}check_workloads",
    "Workloads with quota reserved whose checks of this controller are Ready or Pending, by check",
    ["check", "state"],
)
CHECK_WRITES = Counter(
    f"{PREFIX}check_writes", "Check states written, by check and state", ["check", "state"]
)
CHECK_RECONCILE = Histogram(
    f"{PREFIX}check_reconcile_duration_seconds", "Seconds of one pass of a check's controller", ["check"]
)

LEADER_VIEW: Final[tuple[Gauge, ...]] = (
    WAITING_GROUPS,
    GROUPS_HOLDING_PODS,
    POOL_QUOTA,
    POOL_USED,
    POOL_LENT,
    HUB_CLAIMED,
    CHECK_WORKLOADS,
)
"""Gauges of what the leader sees, by label; a replica that stops leading clears them (and
sets ``HUB_MEMBERS_GONE`` to 0)."""

SERIES_PER_GAUGE: Final = 100
"""Distinct label values one pass reports for a gauge keyed by a name a tenant chooses (the
backends' ``pool`` where it is a queue's name from a pod label, not a Pool); the
rest are summed under ``OTHER``, so no tenant can grow the scrape without bound."""
OTHER: Final = "_other"


def base_value(resource: str, units: int) -> float:
    """An amount in the decision core's units (millicores for ``cpu``, else base units) in
    Prometheus' base units: cores for ``cpu``, the amount itself otherwise."""
    return units / 1000 if resource == "cpu" else float(units)


def bounded(counts: Mapping[str, float], limit: int = SERIES_PER_GAUGE) -> dict[str, float]:
    """``counts`` with at most ``limit`` keys: the largest kept (ties by name), the rest summed
    under ``OTHER``."""
    if len(counts) <= limit:
        return dict(counts)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    kept = dict(ranked[: limit - 1])
    kept[OTHER] = kept.get(OTHER, 0.0) + sum(v for _, v in ranked[limit - 1 :])
    return kept


class Series:
    """The series one reporter set last time, so that what it no longer reports leaves the
    scrape (a deleted Pool, a resource gone from a quota, a queue with no group left)."""

    def __init__(self) -> None:
        self._before: set[tuple[Gauge, tuple[str, ...]]] = set()

    def publish(self, values: Iterable[tuple[Gauge, tuple[str, ...], float]]) -> None:
        """Set every value given; remove the series set before and not given now."""
        now: set[tuple[Gauge, tuple[str, ...]]] = set()
        for gauge, labels, value in values:
            gauge.labels(*labels).set(value)
            now.add((gauge, labels))
        for gauge, labels in self._before - now:
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)
        self._before = now


def waiting_series(
    backend: str, groups: Iterable[tuple[str, bool]]
) -> list[tuple[Gauge, tuple[str, ...], float]]:
    """``WAITING_GROUPS`` of one backend's pass from each group's (pool, waiting): a pool with
    groups and none waiting reads 0; at most ``SERIES_PER_GAUGE`` pools (``bounded``)."""
    counts: dict[str, float] = {}
    for pool, waiting in groups:
        counts[pool] = counts.get(pool, 0.0) + (1.0 if waiting else 0.0)
    return [(WAITING_GROUPS, (backend, pool), n) for pool, n in sorted(bounded(counts).items())]


def build_info(version: str, backend: str, role: str) -> None:
    """Set ``lws_gatekeeper_build_info`` for this process, and ``lws_gatekeeper_leader`` to 0
    until it leads (once, at start)."""
    BUILD_INFO.clear()
    BUILD_INFO.labels(version, platform.python_version(), backend, role).set(1)
    LEADER.set(0)


def leading(now: bool) -> None:
    """Say whether this replica leads; on losing the lead, clear the leader's gauges."""
    LEADER.set(1 if now else 0)
    if not now:
        for gauge in LEADER_VIEW:
            gauge.clear()
        HUB_MEMBERS_GONE.set(0)  # no labels: a series of its own, always scraped
