"""The ``kueue`` backend as the registry knows it (``core.backends.BACKENDS``)."""

from gatekeeper.core.backends.kueue.view import pool_view
from gatekeeper.core.kube.keys import KUEUE_API_VERSION
from gatekeeper.core.plugin.backend import Backend

BACKEND = Backend(
    name="kueue",
    pool_kind="ClusterQueue",
    pool_view=pool_view,
    summary="the pool label names a Kueue LocalQueue; one Kueue Workload per group, Kueue's "
    "ClusterQueue decides.",
    renders="a ResourceFlavor, a ClusterQueue and LocalQueues",
    template="gatekeeper.core.backends.kueue:render.yaml.j2",
    render_context={"kueue_api_version": KUEUE_API_VERSION},
)
