"""The gatekeeper's pure decision core, in rooms that import downwards only.

Everything here is a function of plain data (Kubernetes objects as dicts, or the small
frozen values defined here) and does no I/O: no API calls, no sockets, no clock, no
asyncio. That keeps every admission decision reproducible in a unit test and lets the
I/O layer (watches, webhook, records, loops) stay thin: plan here, act in ``controller``.

The rooms, lowest first (each may import only those below it; ``pyproject.toml`` holds
the contract):

- ``kube``: the Kubernetes vocabulary (keys, objects, quantities, selectors);
- ``model``: the field's objects parsed (an LWS, its groups, demand, records, Pools, nodes);
- ``admission``: the arithmetic every backend shares (queue order, quota, fit, reasons,
  members);
- ``writes`` and ``plugin``: the pass's writes as data, and the plug-in contract;
- ``reservation``: the hub's ledger for a Reservation shared by several clusters;
- ``backends`` and ``checks``: the decisions, one folder each, independent of each other
  (the registry ``backends.BACKENDS`` lists the backends; the checks are Kueue
  AdmissionChecks).
"""
