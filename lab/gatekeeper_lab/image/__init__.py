"""The project's own container image, built without an engine (``build.py``) as an OCI layout (``oci.py``).

Why this exists: the chart runs ``lws-gatekeeper`` from an image, and this package makes
that image from pinned Debian packages and wheels, reproducibly, where no container
engine runs and no image registry is reachable. ``lws-gatekeeper image build``
(``./scripts/image``) and the image's end-to-end test call it.
"""
