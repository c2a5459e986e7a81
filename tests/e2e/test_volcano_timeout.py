"""With the ``volcano`` backend, a group Volcano let in whose pods can never be made gives its
Queue's room back.

Why this exists: Volcano lets a group's PodGroup in (``Inqueue``) on its ``minResources``,
before its pods exist, and keeps that room in its Queue while the PodGroup lives. Here the
pods name a ServiceAccount that does not exist, so the API server refuses every pod the
StatefulSets make; the group held the Queue's room for ever. The gatekeeper runs here with
``--admission-timeout-seconds=20``: 20 s after the admission, the group's record says
``AdmissionTimeout`` and why, its PodGroup is deleted (the room comes back), and a healthy LWS
on the same Queue then runs whole while the broken group waits out its retry (120 s here).
"""

from __future__ import annotations

from typing import Any

from gatekeeper_lab.sandbox.cluster import Sandbox
from tests.e2e.conftest import gatekeeper_running_as
from tests.e2e.kueue_support import condition, items, new_tag, records, settled, wait
from tests.e2e.test_volcano_backend import _lws, _setup, _show

ADMISSION_TIMEOUT = "AdmissionTimeout"
ARGS = ["--admission-timeout-seconds=20", "--never-fit-retry-seconds=120"]


def test_a_group_whose_pods_are_never_made_gives_its_queues_room_back(volcano_sandbox: Sandbox) -> None:
    sb = volcano_sandbox
    ns = _setup(sb, new_tag(), nodes=2, gpus_per_node=2, queue_gpus=2)
    with gatekeeper_running_as(sb, backend="volcano", args=ARGS):
        broken = _lws(ns, "broken", replicas=1, size=2)
        for role in ("leaderTemplate", "workerTemplate"):
            broken["spec"]["leaderWorkerTemplate"][role]["spec"]["serviceAccountName"] = "missing"
        sb.apply([broken])
        try:

            def admitted() -> bool:
                return any(condition(r, "Admitted").get("status") == "True" for r in records(sb, ns))

            wait("the broken group let in by Volcano", admitted, timeout=90)
            first = {pg["metadata"]["uid"] for pg in items(sb, "podgroups.scheduling.volcano.sh", "-n", ns)}

            def given_back() -> dict[str, Any] | None:
                return next(
                    (
                        r
                        for r in records(sb, ns)
                        if condition(r, "Admitted").get("reason") == "AdmissionTimeout"
                    ),
                    None,
                )

            record = wait("the record to say AdmissionTimeout", given_back, timeout=90)
            said = condition(record, "Admitted")["message"]
            assert "got 0 of its 2 pods bound within 20 s of its admission" in said, said
            assert record["status"]["retries"] >= 1 and record["status"].get("retryAt")

            def withdrawn() -> bool:
                now = {pg["metadata"]["uid"] for pg in items(sb, "podgroups.scheduling.volcano.sh", "-n", ns)}
                return not (first & now)

            wait("its PodGroup deleted (the Queue's room back)", withdrawn, timeout=60)
            sb.apply([_lws(ns, "healthy", replicas=1, size=2)])
            wait(
                "the healthy LWS running whole in the room given back",
                lambda: settled(sb, ns, running=1, gated=0, size=2, lws_name="healthy"),
                timeout=120,
            )
            again = next(r for r in records(sb, ns) if r["spec"]["leaderWorkerSet"] == "broken")
            assert condition(again, "Admitted").get("reason") == ADMISSION_TIMEOUT, "waits out its retry"
            print(f"given back: {said}")
        finally:
            _show(sb, ns)
