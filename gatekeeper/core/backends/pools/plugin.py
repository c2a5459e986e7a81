"""The ``pools`` backend as the registry knows it (``core.backends.BACKENDS``)."""

from gatekeeper.core.backends.pools.view import pool_view
from gatekeeper.core.kube.keys import GATEKEEPER_API_VERSION, POOL_KIND
from gatekeeper.core.plugin.backend import Backend

BACKEND = Backend(
    name="pools",
    pool_kind="Pool",
    pool_view=pool_view,
    summary="the pool label names one of the gatekeeper's own Pool objects, which decides.",
    renders="Pool objects",
    template="gatekeeper.core.backends.pools:render.yaml.j2",
    render_context={"api_version": GATEKEEPER_API_VERSION, "kind": POOL_KIND},
)
