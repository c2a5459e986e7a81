"""The controllers of the Kueue AdmissionChecks the gatekeeper serves, beside its backend.

Each check's module declares its ``CheckPlugin`` (``controller.plugin``) as ``PLUGIN`` and
registers it here with one line; ``app.controllers`` runs those whose ``run`` option is on.
"""

from collections.abc import Mapping

from gatekeeper.controller.checks.node_fit import PLUGIN as NODE_FIT
from gatekeeper.controller.checks.shared_reservation import PLUGIN as SHARED_RESERVATION
from gatekeeper.controller.plugin import CheckPlugin

__all__ = ["CHECKS"]

CHECKS: Mapping[str, CheckPlugin] = {p.name: p for p in (NODE_FIT, SHARED_RESERVATION)}
"""Every check's controller plug-in, by its AdmissionCheck controllerName."""
