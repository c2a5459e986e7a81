"""The node-fit Kueue AdmissionCheck: ``decide`` is the pass, ``writes`` its plan of writes."""

from gatekeeper.core.checks.node_fit.decide import CheckUpdate, NodeFitActions, decide_node_fit
from gatekeeper.core.checks.node_fit.writes import plan_writes

__all__ = ["CheckUpdate", "NodeFitActions", "decide_node_fit", "plan_writes"]
