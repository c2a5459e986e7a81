"""Where a sandbox cluster or a sandbox hub keeps its files, and how its processes run.

Why this exists: a sandbox (``cluster.Sandbox``) and a hub (``hub.Hub``) are each one
folder holding the same things: ``state.json`` (its processes and ports), ``kubeconfig``
(the admin's), ``logs/``, ``bin/`` (links to its programs) and ``pki/``. Both derive
these paths, and the ``Runner`` that starts their processes, from :class:`Folder`.
"""

from __future__ import annotations

from pathlib import Path

from gatekeeper_lab.sandbox.pki import Pki
from gatekeeper_lab.sandbox.process import Runner

__all__ = ["Folder"]


class Folder:
    """The paths of a sandbox folder ``dir`` (a dataclass field of the class that uses it)."""

    dir: Path

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def log_dir(self) -> Path:
        return self.dir / "logs"

    @property
    def bin_dir(self) -> Path:
        """Links to every program of the folder's processes, ``kubectl`` among them."""
        return self.dir / "bin"

    @property
    def pki(self) -> Pki:
        return Pki(self.dir / "pki")

    @property
    def runner(self) -> Runner:
        """How the folder's processes are started, waited for and recorded."""
        return Runner(
            dir=self.dir,
            log_dir=self.log_dir,
            bin_dir=self.bin_dir,
            kubeconfig=self.kubeconfig,
            state_file=self.state_file,
        )
