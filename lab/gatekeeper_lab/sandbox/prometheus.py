"""A real Prometheus in the sandbox, scraping the sandbox's gatekeeper every second.

Why this exists: the chart ships a Grafana dashboard (``charts/lws-gatekeeper/files/
dashboards/``), and a dashboard is only as good as its queries. So ``sandbox up
--with-prometheus`` runs Prometheus' own server, built from its Go module (``pins.toml``,
component ``prometheus``), and ``tests/e2e/test_dashboard.py`` runs every panel's query
against it while groups are admitted and wait; ``scripts/dashboard-png`` draws the panels
from its answers. ``cluster.py`` only calls :func:`start_prometheus`; the tests and the
script ask it through :func:`query` and :func:`query_range` (its HTTP API).

One scrape job, the gatekeeper process of the sandbox (``gatekeeper.COMPONENT``) on its
metrics port (state ``ports.gk_metrics``; the port stays when the gatekeeper is restarted),
every second, so that a rate over a few seconds already has samples. Its time series
database lives in the sandbox's ``run/`` folder: ``down`` removes it with the rest.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import yaml

from gatekeeper_lab.sandbox.process import Runner, free_ports, ready

__all__ = [
    "CLUSTER",
    "COMPONENT",
    "JOB",
    "SCRAPE_SECONDS",
    "label_values",
    "query",
    "query_range",
    "scrape_config",
    "start_prometheus",
    "url_of",
]

#: The process name in the sandbox's state and logs (``logs/prometheus.log``).
COMPONENT = "prometheus"

#: The scrape job of the gatekeeper (its ``job`` label).
JOB = "lws-gatekeeper"

#: The ``cluster`` label of the scraped series, as a multi-cluster Prometheus adds one (the
#: dashboard's ``$cluster`` variable lists its values).
CLUSTER = "sandbox"

#: Seconds between two scrapes (and between two rule evaluations, though none is loaded).
SCRAPE_SECONDS = 1


def scrape_config(metrics_port: int) -> dict[str, Any]:
    """Prometheus' configuration: scrape the gatekeeper on loopback ``metrics_port`` every second."""
    every = f"{SCRAPE_SECONDS}s"
    return {
        "global": {"scrape_interval": every, "scrape_timeout": every, "evaluation_interval": every},
        "scrape_configs": [
            {
                "job_name": JOB,
                "metrics_path": "/metrics",
                "static_configs": [
                    {"targets": [f"127.0.0.1:{metrics_port}"], "labels": {"cluster": CLUSTER}}
                ],
            }
        ],
    }


def url_of(state: dict[str, Any]) -> str:
    """The base URL of the sandbox's Prometheus (its HTTP API is under ``/api/v1``)."""
    return f"http://127.0.0.1:{state['ports']['prometheus']}"


def start_prometheus(runner: Runner, state: dict[str, Any]) -> None:
    """Run ``prometheus`` as ``prometheus`` scraping the gatekeeper's port; wait for ``/-/ready``.

    ``state`` is the sandbox's state being built by ``up``; Prometheus' port is added to it.
    """
    ports = state["ports"]
    if "prometheus" not in ports:
        ports["prometheus"] = free_ports(1)[0]
    run = runner.run_dir
    run.mkdir(exist_ok=True)
    conf = run / "prometheus.yml"
    conf.write_text(yaml.safe_dump(scrape_config(int(ports["gk_metrics"])), sort_keys=False))
    runner.start(
        state,
        COMPONENT,
        [
            runner.program("prometheus"),
            f"--config.file={conf}",
            f"--storage.tsdb.path={run / 'prometheus-data'}",
            "--storage.tsdb.retention.time=1d",
            f"--web.listen-address=127.0.0.1:{ports['prometheus']}",
            "--log.level=info",
        ],
    )
    runner.save(state)
    readyz = f"{url_of(state)}/-/ready"
    runner.wait(COMPONENT, lambda: ready(readyz), timeout=60, what="/-/ready")


def _api(base: str, path: str, params: dict[str, str]) -> Any:
    """GET ``/api/v1/<path>`` of Prometheus at ``base``; the ``data`` of a success, else raise."""
    url = f"{base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # a bad query answers 400 with the reason in the body
        body = json.loads(exc.read() or b"{}")
    if body.get("status") != "success":
        raise ValueError(f"Prometheus refused {params.get('query')!r}: {body.get('error', body)}")
    return body["data"]


def query(base: str, expr: str, *, at: float | None = None) -> list[dict[str, Any]]:
    """An instant query: the ``result`` of ``/api/v1/query`` (a vector's samples)."""
    params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
    result: list[dict[str, Any]] = _api(base, "query", params)["result"]
    return result


def query_range(base: str, expr: str, *, start: float, end: float, step: float) -> list[dict[str, Any]]:
    """A range query: the ``result`` of ``/api/v1/query_range`` (one series per label set,
    each with ``values``, ``[unix seconds, "value"]`` pairs)."""
    params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
    result: list[dict[str, Any]] = _api(base, "query_range", params)["result"]
    return result


def label_values(base: str, label: str, *, match: str, start: float, end: float) -> list[str]:
    """The values of ``label`` on the series ``match`` selects between ``start`` and ``end``:
    what Grafana's ``label_values(match, label)`` variable lists."""
    params = {"match[]": match, "start": f"{start:.3f}", "end": f"{end:.3f}"}
    found: list[str] = _api(base, f"label/{urllib.parse.quote(label)}/values", params)
    return found
