"""The lab of lws-gatekeeper: what develops and proves the product, shipped apart from it.

Why this exists: the product (``gatekeeper``: the controller, webhook, decision core,
``render`` and the user commands) is what a cluster runs; this package is what its
developers and its tests run: ``sandbox`` (real Kubernetes components as local
processes), ``image`` (the product's image, built without an engine) and the demos. It is
its own distribution (``lab/pyproject.toml``), installed by the development set-up; it
imports the product, and the product never imports it (an import-linter contract).
"""
