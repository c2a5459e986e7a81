"""The ``volcano`` backend as the registry knows it (``core.backends.BACKENDS``)."""

from gatekeeper.core.backends.volcano.keys import VOLCANO_API_VERSION
from gatekeeper.core.backends.volcano.podgroup import volcano_pod_patch
from gatekeeper.core.backends.volcano.view import pool_view
from gatekeeper.core.plugin.backend import Backend

BACKEND = Backend(
    name="volcano",
    pool_kind="Volcano Queue",
    pool_view=pool_view,
    summary="the pool label names a Volcano Queue; one PodGroup per group, Volcano's scheduler "
    "decides and places.",
    renders="Volcano Queues",
    template="gatekeeper.core.backends.volcano:render.yaml.j2",
    render_context={"volcano_api_version": VOLCANO_API_VERSION},
    pod_patch=volcano_pod_patch,
)
