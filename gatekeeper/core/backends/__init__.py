"""One decision module per quota authority, side by side and independent of each other.

Why this exists: each backend decides, from a snapshot of the cluster, which LWS groups
may run and what to write; none imports another (an import-linter contract says so), and
all build on the shared concepts of ``gatekeeper.core`` (groups, records, demand, node
fit, queue order, the gate). Each registers itself here with one line: its ``plugin``
module's ``BACKEND`` (``core.plugin.backend.Backend``), which ``BACKENDS`` lists in the order the
CLI offers them, the first being the default. docs/adding-a-backend.md is the checklist.
"""

from gatekeeper.core.backends.kueue.plugin import BACKEND as KUEUE
from gatekeeper.core.backends.pools.plugin import BACKEND as POOLS
from gatekeeper.core.backends.volcano.plugin import BACKEND as VOLCANO
from gatekeeper.core.plugin.backend import Registry

__all__ = ["BACKENDS"]

BACKENDS = Registry((POOLS, KUEUE, VOLCANO))
"""Every backend, by name."""
