"""The names users see (from the design's user-facing contract), defined once.

The decision core itself only needs the LWS and Pool API versions, but the I/O layer,
the chart templates' tests and the docs all spell these strings; a typo in any of them
silently disables the gatekeeper, so they live in one place.
"""

from __future__ import annotations

SCHEDULING_GATE = "lws-gatekeeper.io/admission"
"""The scheduling gate every pod of an opted-in LWS is created with."""
POOL_LABEL = "lws-gatekeeper.io/pool"
"""Opt-in label on the LWS; its value names the pool."""
API_GROUP = "lws-gatekeeper.io"
API_VERSION = "v1alpha1"
