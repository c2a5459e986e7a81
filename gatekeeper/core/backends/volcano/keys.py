"""Volcano's names (volcano.sh) that the ``volcano`` backend reads and writes.

Why this exists: they belong to this backend alone, so they live in its folder rather than in
the shared ``core.kube.keys``; the backend's decision, its writes, its controller and ``why`` import
them from here.
"""

from typing import Final

VOLCANO_API_VERSION: Final = "scheduling.volcano.sh/v1beta1"
"""Volcano ``Queue`` objects (``render --backend volcano``) and ``PodGroup`` objects (the
``volcano`` backend)."""
POD_GROUP_PLURAL: Final = "podgroups"
"""Volcano's ``PodGroup`` (``scheduling.volcano.sh/v1beta1``), one per group with the volcano backend."""
VOLCANO_SCHEDULER_NAME: Final = "volcano"
"""``spec.schedulerName`` of the pods Volcano's scheduler schedules (its default name)."""
VOLCANO_GROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
"""Pod annotation naming the PodGroup (same namespace) a pod belongs to, for Volcano."""
VOLCANO_INQUEUE: Final = "Inqueue"
"""PodGroup ``status.phase`` once Volcano's enqueue action found its minResources fit its Queue."""
VOLCANO_RUNNING: Final = "Running"
"""PodGroup ``status.phase`` once at least ``minMember`` of its pods are placed."""
QUEUE_PLURAL: Final = "queues"
"""Volcano's ``Queue`` (cluster-scoped), which the pool label names with the volcano backend."""
