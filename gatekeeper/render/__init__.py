"""Files a person installs beside the gatekeeper: pool objects per backend, admission policies.

Why this exists: describing the reserved pools once (``POOLS.yaml``) and getting the
objects each backend needs (``lws-gatekeeper render``) is the install step users repeat;
the admission policies of ``policies/`` need the gatekeeper's identity filled in before
they are applied. Both are pure text-to-objects work, no cluster I/O, so this package
sits just above ``gatekeeper.core`` and below everything that talks to a cluster.

- ``pools``: read and check the description, errors naming line and field;
- ``manifests``: render it with the jinja2 templates of ``templates/``;
- ``admission``: the policies of ``policies/`` as objects;
- ``cli``: the ``render`` command.
"""

from gatekeeper.render.admission import load_policies, service_account_username
from gatekeeper.render.manifests import RenderedPool, render, render_stream
from gatekeeper.render.pools import PoolsError, PoolsFile, PoolSpec, parse_pools

__all__ = [
    "PoolSpec",
    "PoolsError",
    "PoolsFile",
    "RenderedPool",
    "load_policies",
    "parse_pools",
    "render",
    "render_stream",
    "service_account_username",
]
