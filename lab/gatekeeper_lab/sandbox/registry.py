"""A real OCI registry in the sandbox: go-containerregistry's, served by ``crane``.

Why this exists: a user installs the gatekeeper as Kueue users install Kueue, from an OCI
registry: the chart with ``helm install oci://...`` and the image by digest. So
``sandbox up --with-registry`` runs ``crane registry serve`` (``pins.toml``, component
``crane``) on loopback, its blobs in the sandbox's ``run/`` folder (``down`` removes them),
and the tests push the project's image (``crane push``) and chart (``helm push``) there and
install from it (``tests/e2e/test_registry_install.py``). Plain HTTP on loopback: crane and
Helm are told so (``--insecure``, ``--plain-http``). ``cluster.py`` only calls
:func:`start_registry`; callers ask :func:`address_of` where it listens.
"""

from __future__ import annotations

from typing import Any

from gatekeeper_lab.sandbox.process import Runner, free_ports, ready

__all__ = ["COMPONENT", "address_of", "start_registry"]

#: The process name in the sandbox's state and logs (``logs/registry.log``).
COMPONENT = "registry"


def address_of(state: dict[str, Any]) -> str:
    """``host:port`` of the sandbox's registry, as image and chart references start."""
    return f"127.0.0.1:{state['ports'][COMPONENT]}"


def start_registry(runner: Runner, state: dict[str, Any]) -> None:
    """Run ``crane registry serve`` on a free loopback port, storing blobs on disk; wait until
    it answers the registry API's version check (``GET /v2/``)."""
    ports = state["ports"]
    if COMPONENT not in ports:
        ports[COMPONENT] = free_ports(1)[0]
    blobs = runner.run_dir / "registry-blobs"
    blobs.mkdir(parents=True, exist_ok=True)  # crane writes uploads there and makes no folder
    runner.start(
        state,
        COMPONENT,
        [
            runner.program("crane"),
            "registry",
            "serve",
            f"--address={address_of(state)}",
            f"--disk={blobs}",
        ],
    )
    runner.save(state)
    runner.wait(COMPONENT, lambda: ready(f"http://{address_of(state)}/v2/"), timeout=30, what="/v2/")
