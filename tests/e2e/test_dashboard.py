"""Every query of the chart's Grafana dashboard returns data from a real Prometheus during a scale-up.

Why this exists: a dashboard whose query names a metric wrongly, or aggregates away the
label its legend shows, draws an empty panel and nobody notices until an incident. So the
queries are taken from the chart's JSON (``lab/gatekeeper_lab/sandbox/dashboard.py``: no copy
here that could drift), with Grafana's variables filled in as Grafana would (``$pool``
this test's Pool, ``$cluster`` the label the sandbox's scrape adds, ``$backend`` pools,
``$__rate_interval`` 15 s), and sent to Prometheus 3.16.0 built from its
module (``prometheus_sandbox``: ``sandbox up --with-prometheus``), which scrapes the
sandbox's gatekeeper every second.

The scale-up: a Pool with a quota of 6 GPUs on 8 GPUs of nodes; LWS ``a`` (groups of two
one-GPU pods) scaled 1 -> 3 fills it, LWS ``b`` (2 groups) then waits; the API server is
stopped and started again meanwhile (the gatekeeper's watches and writes fail until it is
back: the API errors panel); ``a`` scaled back to 1 lets both of ``b``'s groups in. Each
panel's every query then has finite values over that window, and the values say what
happened: quota 6 and used 6, 2 groups waiting then none, ``b``'s wait in the admission
wait percentiles, the failed requests among the API errors.
"""

from __future__ import annotations

import math
import time
from typing import Any

from gatekeeper.core.kube.keys import POOL_LABEL
from gatekeeper_lab.sandbox import control_plane, dashboard
from gatekeeper_lab.sandbox.cluster import Sandbox, fake_node
from gatekeeper_lab.sandbox.prometheus import CLUSTER, SCRAPE_SECONDS, label_values, query, query_range
from tests.e2e.kueue_support import lws, make_namespace, new_tag, settled, wait

GPU = "nvidia.com/gpu"
NODES_LABEL = "lws-gatekeeper.io/test-nodes"
NOT_FED_HERE = frozenset({"Give-backs", "Shared reservation (hub)", "AdmissionCheck Workloads (Kueue)"})
"""Panels of what this scale-up does not do (no group is given back; no hub, no check runs):
their queries must be accepted by Prometheus and return nothing, or zeros, here. Their metrics are
scraped where they happen: ``test_preemption.py`` (give-backs), ``test_metrics_scraped.py``
(the kueue and volcano backends, the hub, node fit)."""
RATE_INTERVAL = "15s"
"""``$__rate_interval``: Grafana makes it at least four scrape intervals; 15 scrapes here."""


def _finite(series: list[dict[str, Any]]) -> list[float]:
    return [v for s in series for _, raw in s["values"] if math.isfinite(v := float(raw))]


def _now(base: str, expr: str) -> list[float]:
    """The values of ``expr``'s samples now."""
    return [float(r["value"][1]) for r in query(base, expr)]


def _scale(sb: Sandbox, ns: str, name: str, replicas: int) -> None:
    sb.kubectl("scale", f"leaderworkersets/{name}", "-n", ns, f"--replicas={replicas}")


def test_every_panel_query_returns_data_during_a_scale_up(prometheus_sandbox: Sandbox) -> None:
    sb = prometheus_sandbox
    base = sb.prometheus_url()
    tag = new_tag()
    pool = f"dash-{tag}"
    start = time.time()
    sb.create_nodes([fake_node(f"{tag}-{i}", gpus=2, labels={NODES_LABEL: tag}) for i in range(4)])
    sb.apply(
        [
            {
                "apiVersion": "lws-gatekeeper.io/v1alpha1",
                "kind": "Pool",
                "metadata": {"name": pool},
                "spec": {
                    "nodeSelector": {NODES_LABEL: tag},
                    "namespaceSelector": {},
                    "queueingStrategy": "BestEffortFIFO",
                    "quota": {GPU: 6},
                },
            }
        ]
    )
    make_namespace(sb, tag, managed=False)
    labels = {POOL_LABEL: pool}
    sb.apply([lws("a", tag, labels, replicas=1, size=2, gpus_per_pod=1)])
    wait("a's first group running", lambda: settled(sb, tag, running=1, gated=0, size=2, lws_name="a"))
    # Prometheus must hold the pod webhook's series before the scale-up makes more requests: a
    # rate needs two samples around an increase (with a quick sandbox every pod so far can be
    # made before its first scrape, and the latency panel had no increase to see).
    pod_calls = 'lws_gatekeeper_webhook_request_duration_seconds_count{webhook="pods"}'
    wait("Prometheus to scrape the pod webhook's first calls", lambda: query(base, pod_calls))
    _scale(sb, tag, "a", 3)
    wait("a's 3 groups running", lambda: settled(sb, tag, running=3, gated=0, size=2, lws_name="a"))
    sb.apply([lws("b", tag, labels, replicas=2, size=2, gpus_per_pod=1)])
    wait("b's 2 groups gated", lambda: settled(sb, tag, running=0, gated=2, size=2, lws_name="b"))
    waiting = f'lws_gatekeeper_waiting_groups{{backend="pools",pool="{pool}"}}'
    wait(
        "Prometheus to see 2 groups waiting",
        lambda: [r for r in query(base, waiting) if r["value"][1] == "2"],
    )

    # The API server stops mid scale-up and starts again: the gatekeeper's requests fail meanwhile
    # (refused while it is away: transport; 429 while its watch cache warms up).
    failed = "sum(lws_gatekeeper_api_errors_total)"
    before = sum(_now(base, failed))
    sb.restart(control_plane.APISERVER)
    wait("the failed requests counted and scraped", lambda: sum(_now(base, failed)) > before)

    _scale(sb, tag, "a", 1)
    wait(
        "b's 2 groups admitted",
        lambda: settled(sb, tag, running=2, gated=0, size=2, lws_name="b"),
        timeout=120,
    )
    wait("Prometheus to see none waiting", lambda: [r for r in query(base, waiting) if r["value"][1] == "0"])
    time.sleep(3 * SCRAPE_SECONDS)
    end = time.time()
    print(f"window for scripts/dashboard-png: --start {start:.0f} --end {end:.0f} --pool {pool}")

    board = dashboard.load()
    # the resource variable's default; the cluster label the sandbox's scrape adds
    chosen = {"cluster": [CLUSTER], "backend": ["pools"], "pool": [pool], "resource": [GPU]}
    answers: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for t in dashboard.targets(board):
        expr = dashboard.promql(t.expr, rate_interval=RATE_INTERVAL, chosen=chosen)
        series = query_range(base, expr, start=start, end=end, step=SCRAPE_SECONDS)  # PromQL accepted
        answers[(t.panel, t.ref)] = series
        if t.panel in NOT_FED_HERE:
            assert set(_finite(series)) <= {0.0}, f"{t.panel!r} has data in a pools sandbox: {expr}"
            continue
        assert _finite(series), f"panel {t.panel!r} query {t.ref} returned no data: {expr}"
    for var in dashboard.variables(board):
        listed = label_values(base, var.label, match=var.metric, start=start, end=end)
        assert set(chosen[var.name]) <= set(listed), (var, listed)

    def values(panel: str, ref: str, **match: str) -> list[float]:
        picked = [s for s in answers[(panel, ref)] if match.items() <= s["metric"].items()]
        return _finite(picked)

    assert set(values("Pool quota and usage", "A", resource=GPU)) == {6.0}
    used = values("Pool quota and usage", "B", resource=GPU)
    assert max(used) == 6.0 and used[-1] == 6.0, used
    assert {s["metric"]["resource"] for s in answers[("Pool quota and usage", "B")]} == {GPU}
    share = answers[("Pool usage, share of quota", "A")]
    assert {s["metric"]["resource"] for s in share} == {GPU}, "only what the Pool has a quota of"
    assert max(_finite(share)) == 1.0
    waits = values("Waiting groups", "A", pool=pool)
    assert max(waits) == 2.0 and waits[-1] == 0.0, waits
    assert max(values("Admissions", "A", pool=pool)) > 0
    # b's groups waited from their creation through the API server's restart to a's scale-down
    assert max(values("Admission wait time", "C")) >= 2.0
    assert values("Webhook latency", "A", webhook="pods") and values("Webhook latency", "B", webhook="pods")
    assert max(values("Webhook reviews", "A", webhook="pods", result="patched")) > 0
    assert max(values("Pass duration", "C")) > 0
    assert values("Replicas: leader and version", "A")[-1] == 1.0, "one replica leads"
    [info] = answers[("Replicas: leader and version", "B")]
    assert info["metric"]["backend"] == "pools" and info["metric"]["version"], info
    errors = {s["metric"]["code"] for s in answers[("API errors", "A")]}
    assert max(values("API errors", "A")) > 0, errors
