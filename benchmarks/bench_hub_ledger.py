"""How long one pass of the hub's ledger takes at the scale of 50 member clusters and 10,000 groups.

The hub's controller (``controller.hub``) hands every claim of a Reservation to
``core.reservation.decide`` on each pass (at least every 10 s, and after each burst of
changes). This times that decision, claims in, grants out, for one Reservation of
32,768 GPUs (4,096 8-GPU machines) and 10,000 claims of 8 GPUs from 50 members: 4,000
Granted, 6,000 Pending (96 of them fit). Printed: the pass without a memo (every claim
read again), the first and the next pass with the controller's ``ClaimMemo`` (claims
read once per resourceVersion), the same with 5 members gone (their 400 Granted claims
Orphaned), the memo's ratio against no memo, and the sizes of a claim and of the
Reservation's status (etcd's request limit is 1.5 MiB). Each figure is the median of 5.
Run: ``.venv/bin/python benchmarks/bench_hub_ledger.py``
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gatekeeper.core.kube.keys import GATEKEEPER_API_VERSION
from gatekeeper.core.reservation import ClaimMemo, claim_body, decide, status_body

CLAIMS = 10_000
CLUSTERS = 50
GRANTED = 4_000
GPUS = 8
RUNS = 5


def claim(i: int) -> dict[str, Any]:
    created = datetime(2026, 1, 1, tzinfo=UTC).timestamp() + i
    body = claim_body(
        reservation="p5-odcr",
        cluster=f"cluster-{i % CLUSTERS}",
        namespace=f"team-{i % 17}",
        lws=f"llama-{i // 8}",
        lws_uid=f"uid-{i // 8}",
        group=i % 8,
        demand={"nvidia.com/gpu": GPUS, "cpu": 96_000, "memory": 1024 * 2**30},
        priority=0,
        created=datetime.fromtimestamp(created, UTC),
    )
    body["metadata"] |= {"uid": f"claim-{i}", "resourceVersion": str(1000 + i)}
    if i < GRANTED:
        body["status"] = {"state": "Granted", "reason": "Granted"}
    return body


def median_ms(fn: Callable[[], object]) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    claims = [claim(i) for i in range(CLAIMS)]
    reservation = {
        "apiVersion": GATEKEEPER_API_VERSION,
        "kind": "Reservation",
        "metadata": {"name": "p5-odcr"},
        "spec": {"capacity": {"nvidia.com/gpu": str(4096 * GPUS)}},
    }
    now = datetime.now(UTC)
    gone = {f"cluster-{k}": "its heartbeat expired" for k in range(5)}
    bare = median_ms(lambda: decide(reservation, claims, now=now))
    memo = ClaimMemo()
    start = time.perf_counter()
    ledger = decide(reservation, claims, now=now, memo=memo)
    first = (time.perf_counter() - start) * 1000
    warm = median_ms(lambda: decide(reservation, claims, now=now, memo=memo))
    warm_gone = median_ms(lambda: decide(reservation, claims, gone=gone, now=now, memo=memo))
    moved = decide(reservation, claims, gone=gone, now=now, memo=memo)
    assert ledger.status is not None and moved.status is not None
    print(f"hub ledger, {CLAIMS:,} claims of {GPUS} GPUs from {CLUSTERS} members, {GRANTED:,} granted:")
    print(f"  one pass, no memo (every claim read):     {bare:8.0f} ms   (grants {len(ledger.grants)})")
    print(f"  first pass with the memo:                 {first:8.0f} ms")
    print(f"  next pass with the memo:                  {warm:8.0f} ms   ({warm / bare:.2f}x of no memo)")
    print(
        f"  next pass, 5 members gone:                {warm_gone:8.0f} ms   ({len(moved.changes)} orphaned)"
    )
    print(f"  a claim as a member creates it:           {len(json.dumps(claims[-1])):8d} bytes")
    body = status_body(moved.status)
    print(f"  the Reservation's status ({CLUSTERS} members):    {len(json.dumps(body)):8d} bytes")


if __name__ == "__main__":
    main()
