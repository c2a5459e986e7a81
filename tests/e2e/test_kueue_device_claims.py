"""kueue backend: GPUs asked through DRA claims count against the ClusterQueue's quota.

Why this exists: Kueue counts a Workload's pod-set requests, and DRA claims only with its own
alpha gate and a mapping from DeviceClass to resource in its configuration (off here, as it is
by default). The gatekeeper makes each group's Workload, so it writes the devices a pod's
claims ask (counted by their DeviceClass's ``extendedResourceName``) into the pod set as
requests of that resource: Kueue's quota then counts them whatever its gates say. Here a
ClusterQueue of 2 GPUs, nodes whose GPUs a DRA driver publishes in ResourceSlices, and an LWS
of two groups of two pods that ask one GPU each through a claim: one group runs whole, the
other waits gated on Kueue.
"""

from __future__ import annotations

import json

from gatekeeper.core.kube.keys import POOL_LABEL
from gatekeeper_lab.sandbox.cluster import Sandbox

from . import attack_table
from .kueue_support import lws, make_queue, settled, wait, workloads
from .test_device_claims import DRIVER, GPU, claim_template, device_class, device_slice, with_claims
from .watch import Watch

CLASS = f"kueue.{DRIVER}"


def test_gpus_asked_through_dra_claims_count_in_the_workload_kueue_admits(
    kueue_sandbox: Sandbox, kueue_attack_watch: Watch
) -> None:
    sb = kueue_sandbox
    q = make_queue(sb, gpus=2, nodes=4, gpus_per_node=0, managed=False)
    kueue_attack_watch.pool(q.labels, 2)
    selector = ",".join(f"{k}={v}" for k, v in q.labels.items())
    listed = json.loads(sb.kubectl("get", "nodes", "-l", selector, "-o", "json").stdout)
    nodes = [n["metadata"]["name"] for n in listed["items"]]
    slices = [{**device_slice(n), "metadata": {"name": f"{n}-kueue"}} for n in nodes]
    sb.apply([device_class(CLASS), *slices])
    try:
        sb.apply([claim_template(q.namespace, device_class=CLASS)])
        body = lws("dra", q.namespace, {POOL_LABEL: q.local_queue}, replicas=2, size=2, gpus_per_pod=0)
        sb.apply([with_claims(body, q.namespace)])
        wait(
            "one group running whole, one gated", lambda: settled(sb, q.namespace, running=1, gated=1, size=2)
        )
        asked = [
            c["resources"]["requests"].get(GPU)
            for w in workloads(sb, q.namespace)
            for ps in w["spec"]["podSets"]
            for c in ps["template"]["spec"]["containers"]
        ]
        assert asked == ["1"] * 4, asked  # two Workloads, leader and worker pod sets, 1 GPU a pod
        attack_table.add(
            "kueue: GPUs asked through DRA claims (1 a pod), ClusterQueue quota 2",
            "counted in the Workload: 1 group in, 1 waits",
            "Workloads ask nvidia.com/gpu 1 a pod; one group running whole, the other gated on Kueue",
        )
    finally:
        sb.kubectl("delete", "lws", "--all", "-n", q.namespace, "--wait=false")
        sb.kubectl("delete", "resourceslices", *[s["metadata"]["name"] for s in slices], "--ignore-not-found")
        sb.kubectl("delete", "deviceclass", CLASS, "--ignore-not-found")
