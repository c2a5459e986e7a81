"""The field's objects, parsed: an LWS and its groups, their demand, the records, Pools, nodes.

One module per concept: ``group`` (a group's key), ``lws`` (what is read of an LWS and
its pods), ``groups`` (the groups of an LWS and their pods), ``demand`` (a group's whole
demand from the LWS spec), ``record`` (the ``GroupAdmission``), ``pool`` (the ``Pool``),
``nodes`` (nodes and what runs on them), ``closed`` (closed pools' taint), ``gating``
(the gate as patches), ``charge`` (the mark that ties a pod let through to its group),
``owned`` (the StatefulSets an LWS controls). Built on ``core.kube`` only.
"""
