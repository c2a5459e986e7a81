"""The demo's shared part (``lws-gatekeeper demo --shared``) run as a test.

Why this exists: the seed's second case is the demo's to show, so the demo itself must
hold what it claims, on a real hub and two real member clusters (the ``shared_hub``
fixture's): a reservation of 4 one-GPU machines that both clusters launch from, an LWS
of groups of two (LeaderReady) scaled from 0 to 2 in both at once. Without the gatekeeper
the machines go to the four leaders and every group is half-placed; with it exactly two
whole groups run across the two clusters, the other two leaders are gated (their workers
are made once they run), and no machine serves part of a group.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gatekeeper_lab import demo_shared as demo

from .conftest import SharedHub


@pytest.fixture
def demo_members(shared_hub: SharedHub) -> Iterator[SharedHub]:
    yield shared_hub
    for sb in shared_hub.members.values():
        for ns in (demo.WITHOUT, demo.WITH):
            sb.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false")
        sb.kubectl("delete", "nodes", "-l", demo.MACHINE_LABEL, "--ignore-not-found")
        sb.kubectl("delete", "pools.lws-gatekeeper.io", demo.POOL, "--ignore-not-found")
    shared_hub.hub.kubectl("delete", "reservation", demo.RESERVATION, "--ignore-not-found")


def test_the_demo_replays_the_shared_reservation_case(demo_members: SharedHub) -> None:
    start = time.monotonic()
    without, with_gk = demo.run(demo_members.hub, demo_members.members)
    print(f"demo --shared parts took {time.monotonic() - start:.1f}s (the hub and members already up)")
    assert sum(v.machines for v in without) == demo.MACHINES, "the reservation runs out"
    assert sum(v.half_placed for v in without) == 4, "without the gatekeeper every group is half-placed"
    assert sum(v.whole for v in without) == 0, "and none runs whole"
    assert sum(v.whole for v in with_gk) == 2, "exactly two whole groups across the clusters"
    assert sum(v.half_placed for v in with_gk) == 0
    assert sum(v.gated for v in with_gk) == 2, "the other groups' leaders gated"
    assert sum(v.machines for v in with_gk) == demo.MACHINES, "each machine serves a whole group"
