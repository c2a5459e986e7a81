"""With the ``kueue`` backend, a group Kueue admitted whose pods can never be made gives its
quota back.

Why this exists: Kueue admits a group's Workload on its LWS's spec, before its pods exist.
Here the pods name a ServiceAccount that does not exist, so the API server refuses every pod
the StatefulSets make; the group held its ClusterQueue's quota for ever, since Kueue's own
``waitForPodsReady`` reads a condition only its job integrations set. The gatekeeper runs
here with ``--admission-timeout-seconds=20``: 20 s after the admission, the group's record
says ``AdmissionTimeout`` and why, its Workload is deleted (the quota comes back), and a new
one is made after the retry delay.
"""

from __future__ import annotations

from typing import Any

from gatekeeper.core.kube.keys import POOL_LABEL
from gatekeeper_lab.sandbox.cluster import Sandbox
from tests.e2e.conftest import gatekeeper_running_as
from tests.e2e.kueue_support import condition, lws, make_queue, records, wait, workloads


def test_a_group_whose_pods_are_never_made_gives_its_quota_back(kueue_sandbox: Sandbox) -> None:
    sb = kueue_sandbox
    q = make_queue(sb, gpus=4, nodes=4, gpus_per_node=1, managed=False)
    with gatekeeper_running_as(sb, backend="kueue", args=["--admission-timeout-seconds=20"]):
        body = lws("broken", q.namespace, {POOL_LABEL: q.local_queue}, replicas=1, size=2, gpus_per_pod=1)
        template = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]  # the leader's too
        template["spec"]["serviceAccountName"] = "missing"
        sb.apply([body])
        first = wait(
            "its Workload admitted by Kueue",
            lambda: next(
                (w for w in workloads(sb, q.namespace) if condition(w, "Admitted").get("status") == "True"),
                None,
            ),
        )

        def given_back() -> dict[str, Any] | None:
            return next(
                (
                    r
                    for r in records(sb, q.namespace)
                    if condition(r, "Admitted").get("reason") == "AdmissionTimeout"
                ),
                None,
            )

        record = wait("the record to say AdmissionTimeout", given_back, timeout=90)
        said = condition(record, "Admitted")["message"]
        assert "got 0 of its 2 pods bound within 20 s of its admission" in said, said
        assert record["status"]["retries"] >= 1 and record["status"].get("retryAt")

        def replaced() -> bool:
            uids = {w["metadata"]["uid"] for w in workloads(sb, q.namespace)}
            return first["metadata"]["uid"] not in uids

        wait("its first Workload deleted (its quota back)", replaced, timeout=60)
        print(f"given back: {said}")
