"""The loops of the backends: each runs its backend's decision from ``core.backends`` and carries it out.

Each backend's module declares its ``ControllerPlugin`` (``controller.plugin``) as ``PLUGIN``
and registers it here with one line; ``PLUGINS`` names the same backends, in the same order,
as ``core.backends.BACKENDS`` (a unit test checks it). docs/adding-a-backend.md is the
checklist.
"""

from collections.abc import Mapping

from gatekeeper.controller.backends.kueue import PLUGIN as KUEUE
from gatekeeper.controller.backends.pools import PLUGIN as POOLS
from gatekeeper.controller.backends.volcano import PLUGIN as VOLCANO
from gatekeeper.controller.plugin import ControllerPlugin

__all__ = ["PLUGINS"]

PLUGINS: Mapping[str, ControllerPlugin] = {p.name: p for p in (POOLS, KUEUE, VOLCANO)}
"""Every backend's controller plug-in, by name."""
