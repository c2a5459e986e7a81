"""The sandbox's kubectl with the admin identity: run it, server-side apply, create.

Why this exists: the components that install objects while they start (``lws.py``,
``kueue.py``, ``gatekeeper.py``) and ``cluster.py`` (its ``kubectl``/``apply``, which
the tests and benchmarks drive) all send objects the same way; this is that way, so the
components need no Sandbox to do it.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gatekeeper_lab.sandbox.manifests import as_json_list
from gatekeeper_lab.sandbox.process import SandboxError

__all__ = ["Kubectl"]


@dataclass(frozen=True)
class Kubectl:
    """The sandbox's ``kubectl`` (in ``bin_dir``) with its admin ``kubeconfig``."""

    bin_dir: Path
    kubeconfig: Path

    def run(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl; on failure (when ``check``) raise with its stderr."""
        res = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
        )
        if check and res.returncode != 0:
            raise SandboxError(f"kubectl {' '.join(args)} failed: {res.stderr.strip()}")
        return res

    def apply(self, objects: Iterable[dict[str, Any]] | str) -> None:
        """Server-side apply objects (dicts or YAML text) with the admin identity."""
        # Objects go as JSON: PyYAML writes strings such as 1e10 unquoted (a string in YAML
        # 1.1), which kubectl's YAML 1.2 reader takes for a number.
        text = objects if isinstance(objects, str) else as_json_list(objects)
        self.run(
            "apply", "--server-side", "--force-conflicts", "--field-manager=sandbox", "-f", "-", input=text
        )

    def create(self, objects: Sequence[dict[str, Any]]) -> None:
        """Create objects (``create``, not ``apply``: a Node's status is kept only on create)."""
        if objects:
            self.run("create", "-f", "-", input=as_json_list(objects))

    def wait_established(self, crds: Sequence[str], timeout: float = 60) -> None:
        """Wait until the CustomResourceDefinitions ``crds`` (names such as
        ``nodepools.karpenter.sh``) are Established.

        ``kubectl wait --for=condition=...`` fails at once, instead of waiting, on an object
        that has no ``status.conditions`` yet ("accessor error: <nil>"), as a CRD just
        applied may not on a loaded machine; that answer is retried until ``timeout``."""
        names = [f"crd/{name.removeprefix('crd/')}" for name in crds]
        deadline = time.monotonic() + timeout
        while True:
            left = max(1, int(deadline - time.monotonic()))
            res = self.run("wait", "--for=condition=Established", f"--timeout={left}s", *names, check=False)
            if res.returncode == 0:
                return
            if "accessor error" not in res.stderr or time.monotonic() >= deadline:
                raise SandboxError(f"kubectl wait for {' '.join(names)} Established: {res.stderr.strip()}")
            time.sleep(0.5)
