"""The sandbox: a real Kubernetes control plane run as local processes, for tests, demo and benchmarks.

Why this exists: every claim of the project is proved inside a real cluster, and our
machines run no containers (see ``cluster.py``). Its modules, from the top down:

- ``cluster.py``: :class:`~gatekeeper_lab.sandbox.cluster.Sandbox`, the orchestrator the CLI,
  the demo, the tests and the benchmarks use (``up``, ``down``, ``status``, ``kubectl``...).
- one module per component, each started by ``cluster.py``: ``etcd.py``,
  ``control_plane.py`` (kube-apiserver, kube-controller-manager, kube-scheduler),
  ``kwok.py``, ``lws.py``, ``kueue.py``, ``karpenter.py``, ``volcano.py``, ``prometheus.py``
  and ``gatekeeper.py``.
- ``kubectl.py`` (the admin's kubectl), ``manifests.py`` (the objects it applies) and
  ``process.py`` (ports, start, wait, the ready probe, stop), which the components share.
- beside them: ``build.py`` (the programs, from pinned Go modules), ``pki.py`` (the
  certificates), ``observe.py`` and ``replay.py`` (judging and replaying scenarios),
  ``dashboard.py`` and ``dashboard_png.py`` (the chart's Grafana dashboard as queries, and
  drawn from a Prometheus' answers).

A module imports only modules below it; none imports another's private names.
"""
