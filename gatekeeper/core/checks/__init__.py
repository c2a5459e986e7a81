"""Decisions of the Kueue AdmissionCheck controllers the gatekeeper serves.

Why this exists: an AdmissionCheck is a second opinion Kueue waits for before it admits
a Workload; it is not a backend (Kueue still decides) and serves any Workload, Kueue's
own included. ``node_fit``: every pod fits the free room of its flavor's nodes.
"""
