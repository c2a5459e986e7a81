"""The shared-reservation Kueue AdmissionCheck: ``decide`` is the pass, ``writes`` its plan of writes."""

from gatekeeper.core.checks.shared_reservation.decide import (
    Activation,
    SharedReservationActions,
    decide_shared_reservation,
)
from gatekeeper.core.checks.shared_reservation.writes import plan_writes

__all__ = ["Activation", "SharedReservationActions", "decide_shared_reservation", "plan_writes"]
