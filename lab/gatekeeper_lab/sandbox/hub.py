"""A hub for the sandbox: etcd and kube-apiserver only, with the hub's CRDs and policies.

Why this exists: a Reservation shared by several member clusters is granted on a hub
cluster (``core.reservation``), and the end-to-end tests, the CLI (``sandbox hub up``)
and the members joining it (``Sandbox.up(hub=...)``) need a real one. A hub runs no
nodes, no scheduler and no controller manager: only the API server the members reach,
the CRDs of ``gatekeeper/crds/hub/``, the policy ``hub-member-claims``, the members'
RBAC, and the gatekeeper in its hub role (``lws-gatekeeper run --role hub``), which
grants claims. :meth:`Hub.join` gives a member its own identity on the hub: a client
certificate signed by the hub's CA for the user ``lws-gatekeeper:member:<name>``.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gatekeeper.controller import x509_build as x509util
from gatekeeper.render.admission import HUB_POLICY_FILES, load_policies
from gatekeeper_lab.sandbox import build, control_plane, etcd, process
from gatekeeper_lab.sandbox import gatekeeper as gk
from gatekeeper_lab.sandbox.folder import Folder
from gatekeeper_lab.sandbox.kubectl import Kubectl
from gatekeeper_lab.sandbox.manifests import (
    GATEKEEPER_NAMESPACE,
    HUB_MEMBER_USER_PREFIX,
    HUB_MEMBERS_GROUP,
    crd_manifests,
    hub_member_namespace,
    hub_member_rbac,
)
from gatekeeper_lab.sandbox.pki import make_pki
from gatekeeper_lab.sandbox.process import SandboxError, alive, free_ports, ours, ready

__all__ = ["GATEKEEPER", "Hub", "member_username"]

#: The process name of the hub's gatekeeper (``run --role hub``).
GATEKEEPER = "hub-gatekeeper"
_VALID = dt.timedelta(days=365)


def member_username(cluster: str) -> str:
    """The user a member cluster's gatekeeper is on the hub."""
    return HUB_MEMBER_USER_PREFIX + cluster


@dataclass
class Hub(Folder):
    """One sandbox hub, identified by its folder (its kubeconfig is ``<dir>/kubeconfig``)."""

    dir: Path
    say: Callable[[str], None] = field(default=print, repr=False)

    @classmethod
    def of_kubeconfig(cls, kubeconfig: Path, say: Callable[[str], None] = print) -> Hub:
        """The sandbox hub whose admin kubeconfig this is (``hub up`` printed it)."""
        hub = cls(kubeconfig.resolve().parent, say)
        if not hub.pki.ca_key.exists():
            raise SandboxError(f"{kubeconfig} is not the kubeconfig of a sandbox hub (no {hub.pki.ca_key})")
        return hub

    def state(self) -> dict[str, Any]:
        return self.runner.load()

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """The hub's kubectl with its admin identity."""
        return Kubectl(self.bin_dir, self.kubeconfig).run(*args, input=input, check=check)

    def metrics(self) -> str:
        """The ``/metrics`` text of the hub's gatekeeper that holds the Lease (of the first, when
        none holds it)."""
        leader = self.kubectl(
            "get", "lease", "lws-gatekeeper", "-n", "lws-gatekeeper-system",
            "-o", "jsonpath={.spec.holderIdentity}", check=False,
        ).stdout.strip()  # fmt: skip
        procs = self.state().get("processes", {})
        return gk.metrics(self.runner, leader if leader in procs else GATEKEEPER)

    def running(self) -> dict[str, bool]:
        procs = self.state().get("processes", {})
        return {name: alive(int(info["pid"])) and ours(info) for name, info in procs.items()}

    def is_up(self) -> bool:
        run = self.running()
        port = self.state().get("ports", {}).get("apiserver")
        return bool(run) and all(run.values()) and control_plane.apiserver_ready(port, self.pki)

    def up(self, *, gatekeeper: bool = True, args: tuple[str, ...] = (), audit: bool = False) -> None:
        """Start the hub (or report the one that runs): etcd, kube-apiserver, the hub's CRDs,
        policies and member RBAC, and unless ``gatekeeper`` is False the hub's gatekeeper.
        ``audit`` has its API server write an audit log of every write, as a member's does
        (``control_plane.AUDIT_LOG`` in its log folder), restarting it to turn it on if need be."""
        if self.is_up():
            self.say(f"hub running in {self.dir}")
            if audit and not self.state().get("audit"):
                self._turn_on_audit()
            return
        if self.state_file_exists():
            self.say("hub found half-running: stopping what is left, starting afresh")
            self.down(quiet=True)
        start = time.monotonic()
        installed = build.build_all(["kubernetes", "etcd"], say=self.say)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.runner.log_dir.mkdir(exist_ok=True)
        self.runner.rotate_logs()
        build.link_bins(self.bin_dir, installed)
        pki = make_pki(self.dir / "pki")
        names = [*etcd.PORTS, "apiserver", "hub_metrics"]
        ports = dict(zip(names, free_ports(len(names)), strict=True))
        state: dict[str, Any] = {
            "ports": ports,
            "processes": {},
            "started": time.time(),
            "hub": True,
            "audit": audit,
        }
        self.runner.save(state)
        control_plane.write_kubeconfig(self.kubeconfig, ports["apiserver"], pki)
        try:
            etcd.start(self.runner, state)
            control_plane.start_apiserver(self.runner, state, pki)
            self._install()
            if gatekeeper:
                self.start_gatekeeper(args)
        except Exception:
            self.say(f"hub failed to start; logs are in {self.runner.log_dir}")
            self.down(quiet=True)
            raise
        self.say(f"hub up in {time.monotonic() - start:.1f}s; logs in {self.runner.log_dir}")

    def _turn_on_audit(self) -> None:
        state = self.state()
        state["audit"] = True
        self.runner.save(state)
        info = state["processes"][control_plane.APISERVER]
        if ours(info):
            process.stop(int(info["pid"]))
        control_plane.start_apiserver(self.runner, state, self.pki)

    def state_file_exists(self) -> bool:
        return self.runner.state_file.exists()

    def _install(self) -> None:
        kubectl = Kubectl(self.bin_dir, self.kubeconfig)

        def crds_served() -> bool:
            kubectl.apply(crd_manifests("crds/hub"))
            res = kubectl.run("get", "reservations,reservationclaims", "-A", check=False)
            return res.returncode == 0

        self.runner.wait(control_plane.APISERVER, crds_served, timeout=60, what="the hub's CRDs to be served")
        kubectl.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GATEKEEPER_NAMESPACE}}])
        kubectl.apply(hub_member_rbac())
        kubectl.apply(load_policies(HUB_POLICY_FILES))

    def start_gatekeeper(self, args: tuple[str, ...] = (), name: str = GATEKEEPER) -> None:
        """Run ``lws-gatekeeper run --role hub`` against the hub (its Lease on the hub)."""
        state = self.state()
        port = state["ports"]["hub_metrics"] if name == GATEKEEPER else free_ports(1)[0]
        self.runner.start(
            state,
            name,
            [
                sys.executable,
                "-m",
                "gatekeeper",
                "run",
                "--role=hub",
                f"--kubeconfig={self.kubeconfig}",
                "--metrics-host=127.0.0.1",
                f"--metrics-port={port}",
                f"--lease-namespace={GATEKEEPER_NAMESPACE}",
                f"--identity={name}",
                *args,
            ],
        )
        state["processes"][name]["metrics"] = port
        self.runner.save(state)
        url = f"http://127.0.0.1:{port}/readyz"
        self.runner.wait(name, lambda: ready(url), timeout=60, what="/readyz")

    def interrupt(self, name: str) -> None:
        """Stop one of the hub's processes (SIGTERM) but keep its record and data, to be
        started again by :meth:`start_again`: the hub's API server down, say."""
        info = self.state()["processes"][name]
        if ours(info):
            process.stop(int(info["pid"]))

    def start_again(self, name: str) -> None:
        """Start an interrupted process with the command it was started with; wait for the API
        server (it may have been the one)."""
        state = self.state()
        self.runner.restart(state, name)
        port = state["ports"]["apiserver"]
        self.runner.wait(
            name, lambda: control_plane.apiserver_ready(port, self.pki), timeout=90, what="the hub to answer"
        )

    def stop(self, name: str, *, kill: bool = False) -> None:
        """Stop one of the hub's processes (SIGKILL: a crash) and forget it."""
        state = self.state()
        info = state["processes"].pop(name, None)
        if info is not None and ours(info):
            process.stop(int(info["pid"]), kill=kill)
        self.runner.save(state)

    def down(self, *, quiet: bool = False) -> None:
        """Stop every process of the hub and remove its data (logs and certificates stay)."""
        procs = {n: i for n, i in self.state().get("processes", {}).items() if ours(i)}
        process.stop_all(procs)
        for path in (self.dir / etcd.DATA_DIR, self.runner.run_dir):
            if path.exists():
                subprocess.run(["rm", "-rf", str(path)], check=False)
        if self.runner.state_file.exists():
            self.runner.state_file.unlink()
        if not quiet:
            self.say(f"hub in {self.dir} stopped ({len(procs)} processes)")

    def join(
        self, cluster: str, folder: Path, *, user: str | None = None, group: str = HUB_MEMBERS_GROUP
    ) -> Path:
        """A member's own kubeconfig for the hub, in ``folder``: a client certificate signed by
        the hub's CA for ``lws-gatekeeper:member:<cluster>`` (group ``lws-gatekeeper:members``),
        or for ``user`` in ``group``; and the member's namespace on the hub with its RBAC there,
        as the chart makes them for each of ``hub.members``. Joining again issues a new
        certificate and key in place (a rotation, as a Secret updated by a certificate issuer
        would be)."""
        Kubectl(self.bin_dir, self.kubeconfig).apply(hub_member_namespace(cluster))
        folder.mkdir(parents=True, exist_ok=True)
        ca_cert = x509.load_pem_x509_certificate(self.pki.ca_crt.read_bytes())
        ca_key = serialization.load_pem_private_key(self.pki.ca_key.read_bytes(), password=None)
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
            raise SandboxError(f"{self.pki.ca_key}: not the EC key a sandbox CA has")
        key = x509util.new_key()
        now = dt.datetime.now(dt.UTC)
        cert = x509util.leaf_certificate(
            ca_cert,
            ca_key,
            key,
            x509util.name(user or member_username(cluster), group),
            not_before=now - dt.timedelta(minutes=5),
            not_after=now + _VALID,
            client=True,
        )
        crt, key_file = folder / "member.crt", folder / "member.key"
        key_file.write_bytes(x509util.key_pem(key))
        key_file.chmod(0o600)
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        port = self.state()["ports"]["apiserver"]
        cfg = yaml.safe_load(self.kubeconfig.read_text())
        cfg["users"] = [
            {"name": "member", "user": {"client-certificate": str(crt), "client-key": str(key_file)}}
        ]
        cfg["contexts"] = [{"name": "hub", "context": {"cluster": "sandbox", "user": "member"}}]
        cfg["current-context"] = "hub"
        cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
        path = folder / "kubeconfig"
        path.write_text(yaml.safe_dump(cfg))
        path.chmod(0o600)
        return path
