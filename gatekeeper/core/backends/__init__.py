"""One decision module per quota authority, side by side and independent of each other.

Why this exists: each backend decides, from a snapshot of the cluster, which LWS groups
may run and what to write; none imports another (an import-linter contract says so), and
all build on the shared concepts of ``gatekeeper.core`` (groups, records, demand, node
fit, queue order, the gate). ``pools``: the gatekeeper's own ``Pool`` objects decide.
``kueue``: one Kueue Workload per group, Kueue's ClusterQueues decide.
"""
