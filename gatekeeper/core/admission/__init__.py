"""The admission arithmetic every backend shares, pure.

``queue`` (waiting and admitted groups, and the order waiting groups are served in),
``quota`` and ``fit`` (does a whole group fit a quota, and the nodes), ``reasons`` and
``messages`` (why a group waits, for machines and for people), ``members`` and
``membership`` (which pods an LWS made, and each group's members, strangers and
charges as every pass starts from them), ``intruders`` (pods on a closed pool's nodes
that no admission let there) and ``conformance`` (does a gated pod ask what its role
was admitted with). Built on ``core.model`` and ``core.kube``.
"""
