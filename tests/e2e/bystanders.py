"""Another tenant, who did nothing: its group must run whatever an attacker just did.

Why this exists: an attack that leaves its own tenant within quota can still stop the
gatekeeper for everyone (a wedged pass, a crash loop, a pool's arithmetic poisoned). Each
attack test ends by making one group of 2 one-GPU pods for a tenant of its own, on nodes and
a quota of its own, in the attacked sandbox, and waits for it to run whole
(``watch.watching``'s ``others``). One function per backend: the bystander's quota is what
that backend admits into (a Pool, a ClusterQueue, a Volcano Queue).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gatekeeper.core.kube.keys import POOL_LABEL
from gatekeeper_lab.sandbox.cluster import Sandbox
from gatekeeper_lab.sandbox.manifests import fake_node

from .kueue_support import lws, make_namespace, make_queue, new_tag, settled, wait
from .watch import Others

TIMEOUT = 90.0
"""How long another tenant's group may take to run whole after it was made."""

TAINT = "lws-gatekeeper.io/test-bystander"


def _runs_whole(sb: Sandbox, namespace: str, make: Callable[[], None]) -> str:
    start = time.monotonic()
    make()
    wait(
        "another tenant's group running whole",
        lambda: settled(sb, namespace, running=1, gated=0, size=2),
        timeout=TIMEOUT,
    )
    return f"yes, in {time.monotonic() - start:.0f} s"


def in_pools(sb: Sandbox) -> Others:
    """A tenant with a Pool of 2 GPUs over 2 nodes of its own (tainted, the Pool tolerating it)."""

    def others() -> str:
        tag = new_tag()
        namespace, pool = f"others-{tag}", f"others-{tag}"
        sb.create_nodes(
            [
                fake_node(
                    f"others-{tag}-{i}",
                    gpus=1,
                    labels={TAINT: tag},
                    taints=[{"key": TAINT, "value": tag, "effect": "NoSchedule"}],
                )
                for i in range(2)
            ]
        )
        toleration = {"key": TAINT, "operator": "Equal", "value": tag, "effect": "NoSchedule"}
        sb.apply(
            [
                {
                    "apiVersion": "lws-gatekeeper.io/v1alpha1",
                    "kind": "Pool",
                    "metadata": {"name": pool},
                    "spec": {
                        "nodeSelector": {TAINT: tag},
                        "namespaceSelector": {},
                        "tolerations": [toleration],
                        "quota": {"nvidia.com/gpu": 2},
                    },
                }
            ]
        )
        make_namespace(sb, namespace, managed=False)
        try:
            return _runs_whole(
                sb,
                namespace,
                lambda: sb.apply(
                    [lws("others", namespace, {POOL_LABEL: pool}, replicas=1, size=2, gpus_per_pod=1)]
                ),
            )
        finally:
            sb.kubectl("delete", "namespace", namespace, "--wait=false")
            sb.kubectl("delete", "pool", pool, "--ignore-not-found", "--wait=false")
            sb.kubectl("delete", "nodes", "-l", f"{TAINT}={tag}", "--wait=false")

    return others


def in_kueue(sb: Sandbox) -> Others:
    """A tenant with a ClusterQueue of 2 GPUs over 2 nodes of its own."""

    def others() -> str:
        q = make_queue(sb, gpus=2, nodes=2, gpus_per_node=1, managed=False)
        body = lws("others", q.namespace, {POOL_LABEL: q.local_queue}, replicas=1, size=2, gpus_per_pod=1)
        try:
            return _runs_whole(sb, q.namespace, lambda: sb.apply([body]))
        finally:
            sb.kubectl("delete", "namespace", q.namespace, "--wait=false")

    return others


def in_volcano(sb: Sandbox) -> Others:
    """A tenant with a Volcano Queue of capability 2 GPUs over 2 nodes of its own."""
    from .test_volcano_backend import _lws, _setup

    def others() -> str:
        namespace = _setup(sb, new_tag(), nodes=2, gpus_per_node=1, queue_gpus=2)
        try:
            return _runs_whole(
                sb, namespace, lambda: sb.apply([_lws(namespace, "others", replicas=1, size=2)])
            )
        finally:
            sb.kubectl("delete", "namespace", namespace, "--wait=false")

    return others
