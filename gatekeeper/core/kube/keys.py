"""Every key the gatekeeper reads or writes, in one place, each with a line that says what it is.

Why this exists: labels, annotations, API versions, condition types and reasons are a
contract with users, with the LWS controller, with Kueue and between the gatekeeper's own
parts. A typo in any of them silently disables something, so each is spelled once, here,
the way LWS keeps every key of its API in one documented file. The decision core, the
controller (its API resources are built from these), the webhook, the sandbox and the
tests import them from here; nothing else spells them.
"""

from __future__ import annotations

from typing import Final

# ----- the gatekeeper's own API --------------------------------------------------------

API_GROUP: Final = "lws-gatekeeper.io"
"""The API group of the gatekeeper's CRDs (and the prefix of its labels and annotations)."""
API_VERSION: Final = "v1alpha1"
"""The served version of the gatekeeper's CRDs."""
GATEKEEPER_API_VERSION: Final = f"{API_GROUP}/{API_VERSION}"
"""``apiVersion`` of ``Pool`` and ``GroupAdmission`` objects."""
POOL_KIND: Final = "Pool"
"""Cluster-scoped: a set of nodes, an optional quota and a queueing strategy."""
POOL_PLURAL: Final = "pools"
RECORD_KIND: Final = "GroupAdmission"
"""Namespaced, one per LWS group, owned by its LWS: whether the group holds its reservation."""
RECORD_PLURAL: Final = "groupadmissions"

HOLD_FINALIZER: Final = f"{API_GROUP}/group-pods"
"""Finalizer on every ``GroupAdmission`` (and, with the ``kueue`` backend, every Workload) the
gatekeeper makes: once deleted (by the garbage collector after its LWS, with its namespace, by
hand, or by the gatekeeper), it stays and its group keeps what it holds while any live pod of
the group is left; the gatekeeper removes the finalizer once the group has none."""

SCHEDULING_GATE: Final = f"{API_GROUP}/admission"
"""The scheduling gate every pod of an opted-in LWS is created with."""
POOL_LABEL: Final = f"{API_GROUP}/pool"
"""Opt-in label on the LWS (copied to its pod templates); its value names the pool, or with
the ``kueue`` backend the LocalQueue in the LWS's namespace."""
CHARGE_KEY: Final = f"{API_GROUP}/charged-to"
"""Key of the toleration a pod is let through with (``core.model.charge``): its value names the
group whose reservation the pod is charged to (``<LWS UID>.<group index>``). No update can
remove or change a toleration, so the charge follows the pod whatever its labels say."""

POOL_TAINT_KEY: Final = f"{API_GROUP}/pool"
"""Key of the taint of a closed pool's nodes (value: the Pool's name, with the ``kueue``
backend the ResourceFlavor's). Reserved: only the gatekeeper gives a pod a toleration that
tolerates it (``core.model.closed``), to the pods of a group admitted into that pool, from the
Pool's ``spec.tolerations`` (or the flavor's). The same string as ``POOL_LABEL``."""

TOPOLOGY_REQUIRED_ANNOTATION: Final = f"{API_GROUP}/topology-required"
"""On an LWS: a node label key, one of its Pool's ``spec.topology.levels``; each group is admitted
only into one domain of that level (nodes sharing the label's value) that holds all its pods, and
its pods are pinned there (``core.admission.topology``)."""
TOPOLOGY_PREFERRED_ANNOTATION: Final = f"{API_GROUP}/topology-preferred"
"""The same, preferred: one domain of that level if one has room, else of the next wider level,
else anywhere in the pool."""

GANG_LABEL: Final = f"{API_GROUP}/gang"
"""On an LWS: its groups are admitted with those of the other LWSs of its namespace that carry
the same value, as one unit (``core.admission.gangs``): a disaggregated slice's roles."""

GANG_SIZE_ANNOTATION: Final = f"{API_GROUP}/gang-size"
"""On an LWS of a gang (or a DisaggregatedSet role, from its role's metadata): how many LWSs the
gang has; its groups wait until that many are there (LWSs made a moment apart are not admitted
apart)."""

LWS_UID_ANNOTATION: Final = f"{API_GROUP}/leaderworkerset-uid"
"""On a Workload of the ``kueue`` backend: the UID of the LWS whose group it stands for."""
SPEC_HASH_ANNOTATION: Final = f"{API_GROUP}/spec-hash"
"""On a Workload of the ``kueue`` backend: digest of the spec it was made with, to see when the
LWS asks for another one."""
DEMAND_HASH_ANNOTATION: Final = f"{API_GROUP}/demand-hash"
"""On a Workload of the ``kueue`` backend: digest of the group's demand (requests per pod) it was
made for."""

# Conditions and reasons of the gatekeeper's own objects.
ADMITTED: Final = "Admitted"
"""Condition type on a ``GroupAdmission``: True while the group holds its reservation. Also the
reason it carries when admitted (the reasons of a waiting group are ``core.admission.reasons.Reason``)."""
POOL_VALID: Final = "Valid"
"""Condition type on a ``Pool``: False (reason ``InvalidSpec``) when its spec cannot be read."""
VALID_REASON: Final = "Valid"
INVALID_SPEC_REASON: Final = "InvalidSpec"

# Reasons the ``kueue`` backend writes on a record (besides Kueue's own, which it mirrors).
WAITING_FOR_KUEUE: Final = "WaitingForKueue"
"""Its Workload is being made, or Kueue has not evaluated it yet."""
EVICTED_REASON: Final = "Evicted"
"""Kueue evicted its Workload; its pods are stopped and it waits again."""
WAITING_FOR_CHECKS: Final = "WaitingForAdmissionChecks"
"""Kueue reserved quota; an AdmissionCheck is not Ready yet."""
ADOPTING_REASON: Final = "Adopting"
"""A group admitted by the ``pools`` backend (its pods running) whose new Workload Kueue has not
admitted yet: its pods are kept, and it is still ``Admitted``."""

# Events.
EVENT_SOURCE: Final = "lws-gatekeeper"
"""``source.component`` and ``reportingInstance`` of the Events the gatekeeper posts."""
EVENT_REPORTER: Final = f"{API_GROUP}/gatekeeper"
"""``reportingComponent`` of those Events."""

# ----- LeaderWorkerSet (sigs.k8s.io/lws), read only -------------------------------------

LWS_API_VERSION: Final = "leaderworkerset.x-k8s.io/v1"
LWS_KIND: Final = "LeaderWorkerSet"
LWS_NAME_LABEL: Final = "leaderworkerset.sigs.k8s.io/name"
"""On every pod of an LWS: the LWS's name."""
GROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-index"
"""On every pod of an LWS: the index of its group (0..replicas-1). The gatekeeper writes it
on its records and Workloads too."""
WORKER_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/worker-index"
"""On every pod of an LWS: its index in the group; 0 is the leader."""
POD_INDEX_LABEL: Final = "apps.kubernetes.io/pod-index"
"""Set by the StatefulSet controller on each pod it makes: its ordinal (a leader's is its
group index). The webhook may see a leader before LWS's pod webhook gives it the group
index label."""
REVISION_LABEL: Final = "leaderworkerset.sigs.k8s.io/template-revision-hash"
"""The LWS template revision a pod was made from (the leader's, copied to its workers)."""
GROUP_KEY_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-key"
"""On every pod of an LWS: a hash unique to its group (LWS's pod webhook writes it). The
exclusive placement's pod affinity and anti-affinity select on it."""
EXCLUSIVE_TOPOLOGY_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/exclusive-topology"
"""On an LWS (and copied to its pods): a node label key; each group runs alone in one domain
of it (nodes sharing that label's value), kept there by the required pod affinity and
anti-affinity LWS's pod webhook writes (``core.admission.exclusive``)."""
SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
"""The same for each subgroup of ``subGroupPolicy.subGroupSize`` pods (copied to its pods): each
subgroup alone in one domain, against every pod of the namespace with another subgroup's key
(``core.admission.subgroups``)."""
SUBGROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/subgroup-index"
"""On a pod of an LWS with ``subGroupPolicy``: its subgroup's index in its group (LWS's pod
webhook writes it; ``core.model.lws.subgroups`` splits a group the same way)."""
SUBGROUP_KEY_LABEL: Final = "leaderworkerset.sigs.k8s.io/subgroup-key"
"""On a pod of an LWS with ``subGroupPolicy``: a hash unique to its subgroup (LWS's pod webhook
writes it); the subgroup exclusive placement's affinity and anti-affinity select on it."""

# ----- DisaggregatedSet (LWS's KEP-766: one LWS per role of a disaggregated server) ----------

DISAGGREGATED_SET_LABEL: Final = "disaggregatedset.x-k8s.io/name"
"""On each role LWS a DisaggregatedSet makes: the DisaggregatedSet's name."""
DISAGGREGATED_REVISION_LABEL: Final = "disaggregatedset.x-k8s.io/revision"
"""On each role LWS a DisaggregatedSet makes: the revision of the set it was made for."""
DISAGGREGATED_SLICE_LABEL: Final = "disaggregatedset.x-k8s.io/slice"
"""On role LWSs of one slice (KEP-846): every group of every role of the slice is one unit."""

# ----- Kueue (sigs.k8s.io/kueue) ---------------------------------------------------------

KUEUE_API_VERSION: Final = "kueue.x-k8s.io/v1beta2"
#: Karpenter's NodePools and NodeClaims (read by pools with ``spec.nodePools``).
KARPENTER_API_VERSION: Final = "karpenter.sh/v1"
"""Workload, ResourceFlavor, AdmissionCheck, ClusterQueue, LocalQueue: served by Kueue v0.19 (its
storage version there; v1beta1 is deprecated) and the only one from v0.20 on."""
WORKLOAD_PLURAL: Final = "workloads"
KUEUE_POD_GROUP_KEY: Final = "kueue.x-k8s.io/pod-group-name"
"""Label or annotation of the pods of one of Kueue's pod groups: the Workload's name."""
KUEUE_PODSET_LABEL: Final = "kueue.x-k8s.io/podset"
"""Label Kueue sets on a pod: the pod set it fills."""
KUEUE_ROLE_ANNOTATION: Final = "kueue.x-k8s.io/role-hash"
"""Annotation of a pod of a Kueue pod group: its role (pod set)."""
KUEUE_MANAGED_NAMESPACE_LABEL: Final = "kueue.x-k8s.io/managed"
"""The sandbox's Kueue manages only namespaces with this label set to ``true``."""
KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: Final = "kueue.x-k8s.io/podset-required-topology"
"""On an LWS template (Kueue's Topology Aware Scheduling): its pod set lies in one domain of
this node label key (a level of the flavor's Topology), or is not admitted."""
KUEUE_PREFERRED_TOPOLOGY_ANNOTATION: Final = "kueue.x-k8s.io/podset-preferred-topology"
"""As ``podset-required-topology``, but Kueue may go to wider levels when no domain holds it."""
KUEUE_UNCONSTRAINED_TOPOLOGY_ANNOTATION: Final = "kueue.x-k8s.io/podset-unconstrained-topology"
"""``"true"``: a pod set placed by Kueue's Topology Aware Scheduling with no compactness asked."""
KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION: Final = "kueue.x-k8s.io/podset-slice-required-topology"
"""With ``podset-slice-size``: each slice of that many pods of the pod set lies in one domain."""
KUEUE_SLICE_SIZE_ANNOTATION: Final = "kueue.x-k8s.io/podset-slice-size"
"""Pods per slice for ``podset-slice-required-topology``."""
KUEUE_PODSET_GROUP_ANNOTATION: Final = "kueue.x-k8s.io/podset-group-name"
"""Pod sets (leader and workers) of one group name are placed in one domain together."""

# Workload condition types (Kueue's).
QUOTA_RESERVED: Final = "QuotaReserved"
EVICTED: Final = "Evicted"
FINISHED: Final = "Finished"
REQUEUED: Final = "Requeued"
KUEUE_ADMITTED: Final = "Admitted"
# AdmissionCheck condition type (Kueue's) and check states of a Workload.
ACTIVE: Final = "Active"
CHECK_READY: Final = "Ready"
CHECK_PENDING: Final = "Pending"
CHECK_RETRY: Final = "Retry"
CHECK_REJECTED: Final = "Rejected"

# The node-fit AdmissionCheck, served by the gatekeeper.
NODE_FIT_CONTROLLER: Final = f"{API_GROUP}/node-fit"
"""``spec.controllerName`` of the AdmissionChecks the gatekeeper's node-fit check serves."""
NODE_FIT_FIELD_MANAGER: Final = "lws-gatekeeper-node-fit"
"""Server-side apply field manager of the node-fit check's writes."""
NODE_FIT_ACTIVE_REASON: Final = "NodeFitActive"
NODE_FIT_ACTIVE_MESSAGE: Final = (
    "lws-gatekeeper checks that every pod of a workload fits the free room of its flavor's nodes "
    "before the workload is admitted"
)
# The shared-reservation AdmissionCheck, served by the gatekeeper with --hub-kubeconfig.
SHARED_RESERVATION_CONTROLLER: Final = f"{API_GROUP}/shared-reservation"
"""``spec.controllerName`` of the AdmissionChecks that admit a Workload once a Reservation on
the hub (named by the check's ``spec.parameters``) granted its claim."""
SHARED_RESERVATION_FIELD_MANAGER: Final = "lws-gatekeeper-shared-reservation"
SHARED_RESERVATION_ACTIVE_REASON: Final = "SharedReservationActive"
SHARED_RESERVATION_INVALID_REASON: Final = "InvalidParameters"
NEVER_FITS: Final = "can never fit"
"""How the message of a node-fit check that can never pass begins: "can never fit, even on empty
nodes: ...". The ``kueue`` backend reads it on its own Workloads to give their quota back."""
NO_NODE_FITS: Final = "can never fit: no node"
"""How it begins when no node of the flavor accepts the pods at all."""

# ----- the sandbox ------------------------------------------------------------------------

KWOK_NODE: Final = "kwok.x-k8s.io/node"
"""Annotation (value ``fake``) that makes KWOK run a Node and its pods without a kubelet."""
SANDBOX_POLICIES_LABEL: Final = f"sandbox.{API_GROUP}/policies"
"""Namespace label of the sandbox: with the value SANDBOX_POLICIES_OFF, its admission policies
(enforced in every other namespace, as a chart install does) do not act in that namespace."""
SANDBOX_POLICIES_OFF: Final = "off"
"""The value of SANDBOX_POLICIES_LABEL that leaves a namespace out of the sandbox's policies."""

# ----- Kubernetes ------------------------------------------------------------------------

PRIORITY_CLASS_API_VERSION: Final = "scheduling.k8s.io/v1"
PRIORITY_CLASS_GROUP: Final = "scheduling.k8s.io"
LEASE_API_VERSION: Final = "coordination.k8s.io/v1"
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
"""Pod phases in which a pod holds nothing."""
