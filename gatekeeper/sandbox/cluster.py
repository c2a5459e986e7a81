"""Run a real Kubernetes control plane as local processes: the sandbox.

Why this exists: every claim this project makes happens inside a cluster, and our
machines run no containers. So the sandbox starts the real binaries (built by
``build.py``) as background processes that outlive the command that started them:
etcd, kube-apiserver, kube-scheduler, kube-controller-manager, KWOK (fake nodes whose
pods turn Running and Ready without a kubelet) and the LeaderWorkerSet controller with
its webhooks served on loopback; on request also the real Kueue (``kueue.py``).
Everything a sandbox owns lives in one folder: certificates, etcd data, one log per
component, ``kubeconfig`` and ``state.json`` (ports and process ids), so ``down`` can
stop exactly what ``up`` started.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gatekeeper.render.admission import GATE_PROTECTION, load_policies, service_account_username
from gatekeeper.sandbox import build
from gatekeeper.sandbox.pki import Pki, make_pki
from gatekeeper.webhook.config import mutating_webhook_configuration

__all__ = [
    "Sandbox",
    "SandboxError",
    "default_dir",
    "fake_node",
]

#: Annotation that tells KWOK to manage a node.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"

#: Order of start; ``down`` stops in reverse.
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "lws-controller",
    "kueue-controller",
    "gatekeeper",
)

#: Namespace of the gatekeeper's Lease in the sandbox (the chart uses its release namespace).
GATEKEEPER_NAMESPACE = "lws-gatekeeper-system"


class SandboxError(RuntimeError):
    """The sandbox could not start or stop. The message names the component and shows its log."""


def default_dir(name: str = "default") -> Path:
    """Where a named sandbox keeps its files: ``$LWS_GATEKEEPER_SANDBOX_DIR`` or the cache folder."""
    env = os.environ.get("LWS_GATEKEEPER_SANDBOX_DIR")
    if env and name == "default":
        return Path(env)
    return build.cache_root() / "sandboxes" / name


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); look at its state.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def as_json_list(objects: Iterable[dict[str, Any]]) -> str:
    """Objects as one ``v1/List`` in JSON, for ``kubectl apply|create -f -``."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})


def _ours(info: dict[str, Any]) -> bool:
    """Is the recorded process still the one we started (same program), not a reused pid?"""
    try:
        cmdline = Path(f"/proc/{int(info['pid'])}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    argv = [str(a) for a in info.get("argv") or []]
    # A launcher may exec the program it was given (``unshare ... sh -c ... exec kueue``):
    # the process is ours when its program is one of the words we started it with.
    return not argv or (bool(cmdline) and cmdline[0].decode(errors="replace") in argv)


def fake_node(
    name: str,
    *,
    gpus: int = 1,
    cpu: str = "8",
    memory: str = "32Gi",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A Node object that KWOK manages, with ``nvidia.com/gpu`` capacity."""
    resources = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        resources["nvidia.com/gpu"] = str(gpus)
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok", **(labels or {})},
        },
        "status": {"allocatable": dict(resources), "capacity": dict(resources)},
    }
    if taints:
        node["spec"] = {"taints": taints}
    return node


@dataclass
class Sandbox:
    """One sandbox cluster, identified by its folder."""

    dir: Path
    say: Callable[[str], None] = field(default=print, repr=False)

    # ---- paths -------------------------------------------------------------------
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
        """Links to every program of the sandbox, ``kubectl`` among them."""
        return self.dir / "bin"

    @property
    def pki(self) -> Pki:
        return Pki(self.dir / "pki")

    def state(self) -> dict[str, Any]:
        if not self.state_file.exists():
            return {}
        data: dict[str, Any] = json.loads(self.state_file.read_text())
        return data

    def _save(self, state: dict[str, Any]) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)

    # ---- status ------------------------------------------------------------------
    def running(self) -> dict[str, bool]:
        """Each recorded component and whether its process is alive."""
        procs = self.state().get("processes", {})
        return {name: _alive(int(info["pid"])) and _ours(info) for name, info in procs.items()}

    def is_up(self) -> bool:
        run = self.running()
        return bool(run) and all(run.values()) and self._healthy()

    def _ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_crt))
        ctx.load_cert_chain(str(self.pki.admin_crt), str(self.pki.admin_key))
        return ctx

    def _healthy(self) -> bool:
        port = self.state().get("ports", {}).get("apiserver")
        if not port:
            return False
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{port}/readyz", context=self._ssl(), timeout=2
            ) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def env(self) -> dict[str, str]:
        """Environment for a program driving the sandbox: its kubeconfig, its kubectl first on PATH."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run the sandbox's kubectl; on failure raise with its stderr."""
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
        self.kubectl(
            "apply", "--server-side", "--force-conflicts", "--field-manager=sandbox", "-f", "-", input=text
        )

    def create_nodes(self, nodes: Sequence[dict[str, Any]]) -> None:
        """Create fake nodes (``create``, not ``apply``: a Node's status is kept only on create)."""
        if nodes:
            self.kubectl(
                "create",
                "-f",
                "-",
                input=as_json_list(nodes),
            )

    # ---- up / down ---------------------------------------------------------------
    def up(
        self,
        *,
        nodes: int = 4,
        gpus_per_node: int = 1,
        labels: dict[str, str] | None = None,
        gatekeeper: bool = True,
        extra: Callable[[Sandbox], None] | None = None,
        with_kueue: bool = False,
    ) -> None:
        """Start the sandbox unless it is already running (then only report it).

        ``with_kueue`` also builds and runs the real Kueue (``kueue.py``), after LWS; on a
        running sandbox without it, Kueue is added.
        """
        start = time.monotonic()
        if self.is_up():
            self.say(f"sandbox already running in {self.dir}")
            if with_kueue and "kueue-controller" not in self.running():
                from gatekeeper.sandbox.kueue import start_kueue  # kueue.py imports this module

                kueue = build.build_all(["kueue"], say=self.say)
                self._link_bins(kueue)
                start_kueue(self, self.state(), kueue["kueue"])
            if gatekeeper and "gatekeeper" not in self.running():
                self._install_gatekeeper_objects()
                self.start_gatekeeper()
            return
        if self.state_file.exists():
            self.say("sandbox found half-running: stopping what is left, starting afresh")
            self.down(quiet=True)

        wanted = ["kubernetes", "etcd", "kwok", "lws", *(["kueue"] if with_kueue else [])]
        installed = build.build_all(wanted, say=self.say)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        self._link_bins(installed)
        pki = make_pki(self.dir / "pki")
        names = [
            "etcd",
            "etcd_peer",
            "apiserver",
            "scheduler",
            "kcm",
            "lws_webhook",
            "lws_health",
            "gk_webhook",
            "gk_metrics",
        ]
        ports = dict(zip(names, _free_ports(len(names)), strict=True))
        state: dict[str, Any] = {"ports": ports, "processes": {}, "started": time.time()}
        self._save(state)
        self._write_kubeconfig(ports["apiserver"], pki)

        try:
            self._start_etcd(state)
            self._start_apiserver(state, pki)
            self._wait("kube-apiserver", self._healthy, timeout=90, what="the API server to answer /readyz")
            self._start(
                state,
                "kube-controller-manager",
                [
                    str(self.bin_dir / "kube-controller-manager"),
                    f"--kubeconfig={self.kubeconfig}",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={ports['kcm']}",
                    f"--service-account-private-key-file={pki.sa_key}",
                    f"--root-ca-file={pki.ca_crt}",
                    "--use-service-account-credentials=false",
                    "--controllers=*",
                    "--kube-api-qps=200",
                    "--kube-api-burst=400",
                    "--concurrent-statefulset-syncs=10",
                    "--concurrent-gc-syncs=20",
                ],
            )
            self._start(
                state,
                "kube-scheduler",
                [
                    str(self.bin_dir / "kube-scheduler"),
                    f"--kubeconfig={self.kubeconfig}",
                    f"--authentication-kubeconfig={self.kubeconfig}",
                    f"--authorization-kubeconfig={self.kubeconfig}",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={ports['scheduler']}",
                    "--kube-api-qps=200",
                    "--kube-api-burst=400",
                ],
            )
            stages = installed["kwok"].files / "kustomize" / "stage"
            stage_files = (
                sorted((stages / "node" / "fast").glob("*.yaml"))
                + sorted((stages / "node" / "heartbeat-with-lease").glob("*.yaml"))
                + sorted((stages / "pod" / "fast").glob("*.yaml"))
            )
            stage_files = [p for p in stage_files if p.name != "kustomization.yaml"]
            self._start(
                state,
                "kwok",
                [
                    str(self.bin_dir / "kwok"),
                    f"--kubeconfig={self.kubeconfig}",
                    "--manage-all-nodes=false",
                    f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                    "--node-lease-duration-seconds=40",
                    "--cidr=10.244.0.1/16",
                    *[f"--config={p}" for p in stage_files],
                ],
            )
            self._start_lws(state, installed["lws"], pki)
            if with_kueue:
                from gatekeeper.sandbox.kueue import start_kueue  # kueue.py imports this module

                start_kueue(self, state, installed["kueue"])
            self._wait_apiservices()
            self._install_gatekeeper_objects()
            self.apply(sandbox_policies())
            self.kubectl("label", "namespace", "default", f"{POLICIES_LABEL}=enforce", "--overwrite")
            if gatekeeper:
                self.start_gatekeeper()
            self.create_nodes(
                [fake_node(f"gpu-node-{i}", gpus=gpus_per_node, labels=labels) for i in range(nodes)]
            )
            if extra is not None:
                extra(self)
        except Exception:
            self.say(f"sandbox failed to start; logs are in {self.log_dir}")
            self.down(quiet=True, keep_logs=True)
            raise
        state = self.state()  # start_gatekeeper() recorded its process meanwhile
        state["ready_seconds"] = round(time.monotonic() - start, 1)
        self._save(state)
        self.say(f"sandbox up in {time.monotonic() - start:.1f}s; logs in {self.log_dir}")

    def down(self, *, quiet: bool = False, keep_logs: bool = True) -> None:
        """Stop every process this sandbox started and remove its data (logs stay).

        Only processes that are still ours are signalled: after a reboot or a CI clean-up
        a recorded pid may belong to another program by now.
        """
        state = self.state()
        procs: dict[str, dict[str, Any]] = {
            name: info for name, info in state.get("processes", {}).items() if _ours(info)
        }
        order = [n for n in reversed(list(procs))]
        for name in order:
            pid = int(procs[name]["pid"])
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for name in order:
            pid = int(procs[name]["pid"])
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
        for name in order:
            pid = int(procs[name]["pid"])
            end = time.monotonic() + 5
            while _alive(pid) and time.monotonic() < end:
                time.sleep(0.1)
            if _alive(pid):
                raise SandboxError(f"{name} (pid {pid}) did not stop")
        for sub in ("etcd", "run"):
            path = self.dir / sub
            if path.exists():
                subprocess.run(["rm", "-rf", str(path)], check=False)
        if self.state_file.exists():
            self.state_file.unlink()
        if not keep_logs and self.log_dir.exists():
            subprocess.run(["rm", "-rf", str(self.log_dir)], check=False)
        if not quiet:
            self.say(f"sandbox in {self.dir} stopped ({len(order)} processes)")

    # ---- pieces ------------------------------------------------------------------
    def _link_bins(self, installed: dict[str, build.Installed]) -> None:
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        for inst in installed.values():
            for prog in inst.bin.iterdir():
                link = self.bin_dir / prog.name
                if link.is_symlink() or link.exists():
                    link.unlink()
                link.symlink_to(prog)

    def _write_kubeconfig(self, port: int, pki: Pki) -> None:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "sandbox",
                    "cluster": {
                        "server": f"https://127.0.0.1:{port}",
                        "certificate-authority": str(pki.ca_crt),
                    },
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {"client-certificate": str(pki.admin_crt), "client-key": str(pki.admin_key)},
                }
            ],
            "contexts": [{"name": "sandbox", "context": {"cluster": "sandbox", "user": "admin"}}],
            "current-context": "sandbox",
        }
        self.kubeconfig.write_text(yaml.safe_dump(cfg))
        self.kubeconfig.chmod(0o600)

    def _start(self, state: dict[str, Any], name: str, argv: list[str]) -> None:
        log = self.log_dir / f"{name}.log"
        with log.open("ab") as fh:
            fh.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
            fh.flush()
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.dir,
                env=self.env(),
            )
        state["processes"][name] = {"pid": proc.pid, "log": str(log), "argv": argv}
        self._save(state)
        time.sleep(0.2)
        if proc.poll() is not None:
            raise SandboxError(self._failure(name, f"exited at once with code {proc.returncode}"))

    def _failure(self, name: str, what: str) -> str:
        log = self.log_dir / f"{name}.log"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:]) if log.exists() else ""
        return f"{name} {what}. Last lines of {log}:\n{tail}"

    def _wait(self, name: str, ok: Callable[[], bool], *, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ok():
                return
            pid = self.state()["processes"].get(name, {}).get("pid")
            if pid and not _alive(int(pid)):
                raise SandboxError(self._failure(name, f"died while waiting for {what}"))
            time.sleep(0.25)
        raise SandboxError(self._failure(name, f"did not get ready in {timeout:.0f}s (waiting for {what})"))

    def _start_etcd(self, state: dict[str, Any]) -> None:
        p = state["ports"]
        data = self.dir / "etcd"
        self._start(
            state,
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=sandbox",
                f"--data-dir={data}",
                f"--listen-client-urls=http://127.0.0.1:{p['etcd']}",
                f"--advertise-client-urls=http://127.0.0.1:{p['etcd']}",
                f"--listen-peer-urls=http://127.0.0.1:{p['etcd_peer']}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{p['etcd_peer']}",
                f"--initial-cluster=sandbox=http://127.0.0.1:{p['etcd_peer']}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )

        def etcd_ok() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{p['etcd']}/health", timeout=1) as r:
                    return b'"health":"true"' in r.read()
            except OSError:
                return False

        self._wait("etcd", etcd_ok, timeout=30, what="/health")

    def _start_apiserver(self, state: dict[str, Any], pki: Pki) -> None:
        p = state["ports"]
        self._start(
            state,
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # A loopback advertise address is refused by the endpoint reconciler; nothing
                # reaches the API server through the `kubernetes` Service here anyway.
                "--endpoint-reconciler-type=none",
                f"--secure-port={p['apiserver']}",
                f"--tls-cert-file={pki.apiserver_crt}",
                f"--tls-private-key-file={pki.apiserver_key}",
                f"--client-ca-file={pki.ca_crt}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                "--enable-priority-and-fairness=false",
                "--max-requests-inflight=1000",
                "--max-mutating-requests-inflight=500",
                "--profiling=false",
                "--event-ttl=2h",
            ],
        )

    def _start_lws(self, state: dict[str, Any], lws: build.Installed, pki: Pki) -> None:
        p = state["ports"]
        crd_dir = lws.files / "config" / "crd" / "bases"
        self.apply("\n---\n".join(f.read_text() for f in sorted(crd_dir.glob("*.yaml"))))
        run = self.dir / "run"
        run.mkdir(exist_ok=True)
        config = {
            "apiVersion": "config.lws.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": p["lws_webhook"], "host": "127.0.0.1", "certDir": str(pki.webhook_dir)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{p['lws_health']}"},
            "clientConnection": {"qps": 200, "burst": 400},
        }
        cfg_path = run / "lws-config.yaml"
        cfg_path.write_text(yaml.safe_dump(config))
        self._start(
            state,
            "lws-controller",
            [
                str(self.bin_dir / "lws-controller"),
                f"--config={cfg_path}",
                f"--kubeconfig={self.kubeconfig}",
            ],
        )

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{p['lws_health']}/readyz", timeout=1) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        self._wait("lws-controller", ready, timeout=60, what="/readyz")
        self.apply(lws_webhooks(lws, f"https://127.0.0.1:{p['lws_webhook']}", pki.ca_crt.read_bytes()))

    # ---- the gatekeeper -----------------------------------------------------------
    def _install_gatekeeper_objects(self) -> None:
        """The CRDs (Pool objects can be applied with or without the gatekeeper) and its namespace."""
        self.apply(crd_manifests())
        self.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GATEKEEPER_NAMESPACE}}])

    def start_gatekeeper(
        self,
        name: str = "gatekeeper",
        *,
        register: bool = True,
        kubeconfig: Path | None = None,
        backend: str | None = None,
        args: Sequence[str] = (),
    ) -> None:
        """Run ``lws-gatekeeper run`` from this Python against the sandbox and register its webhook.

        Extra replicas (another ``name``) serve no webhook of the sandbox's own; they only
        campaign for the Lease, as a second replica of the chart would. ``kubeconfig``
        runs it with another identity than the admin's (the chart's ServiceAccount, say).
        ``backend`` is ``pools`` or ``kueue``; by default ``kueue`` when the sandbox runs
        Kueue, else ``pools`` (a restart keeps what the sandbox was started with).
        ``args`` are further flags of ``lws-gatekeeper run``.
        """
        state = self.state()
        if backend is None:
            backend = "kueue" if "kueue-controller" in state["processes"] else "pools"
        p = state["ports"]
        if "gk_webhook" not in p:  # a sandbox started by an older version, without a gatekeeper
            p["gk_webhook"], p["gk_metrics"] = _free_ports(2)
        webhook_port = p["gk_webhook"] if name == "gatekeeper" else _free_ports(1)[0]
        metrics_port = p["gk_metrics"] if name == "gatekeeper" else _free_ports(1)[0]
        self._start(
            state,
            name,
            [
                sys.executable,
                "-m",
                "gatekeeper",
                "run",
                f"--kubeconfig={kubeconfig or self.kubeconfig}",
                f"--cert-dir={self.pki.webhook_dir}",
                "--webhook-host=127.0.0.1",
                f"--webhook-port={webhook_port}",
                "--metrics-host=127.0.0.1",
                f"--metrics-port={metrics_port}",
                f"--lease-namespace={GATEKEEPER_NAMESPACE}",
                f"--identity={name}",
                f"--backend={backend}",
                *args,
            ],
        )
        state["processes"][name]["metrics"] = metrics_port
        state["processes"][name]["backend"] = backend
        self._save(state)

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=1) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        self._wait(name, ready, timeout=60, what="/readyz")
        if register and name == "gatekeeper":
            self.apply(
                [
                    mutating_webhook_configuration(
                        url=f"https://127.0.0.1:{webhook_port}", ca_bundle=self.pki.ca_crt.read_bytes()
                    )
                ]
            )

    def stop(self, name: str, *, kill: bool = False) -> None:
        """Stop one component (SIGTERM, or SIGKILL to simulate a crash) and forget it."""
        state = self.state()
        info = state["processes"].pop(name, None)
        if info is None or not _ours(info):
            self._save(state)
            return
        pid = int(info["pid"])
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL if kill else signal.SIGTERM)
        end = time.monotonic() + 15
        while _alive(pid) and time.monotonic() < end:
            time.sleep(0.05)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        self._save(state)

    def metrics(self, name: str = "gatekeeper") -> str:
        """The gatekeeper's /metrics text."""
        port = self.state()["processes"][name]["metrics"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def _wait_apiservices(self) -> None:
        """Wait until the API server serves the LWS API and the default namespace has its service account."""

        def ok() -> bool:
            res = self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False)
            lws = self.kubectl("get", "leaderworkersets", "-A", check=False)
            return res.returncode == 0 and lws.returncode == 0

        self._wait(
            "kube-controller-manager",
            ok,
            timeout=60,
            what="the default service account and the LeaderWorkerSet API",
        )


#: Namespaces labelled ``<this>=enforce`` have the sandbox's admission policies enforced.
POLICIES_LABEL = "sandbox.lws-gatekeeper.io/policies"


def sandbox_policies() -> list[dict[str, Any]]:
    """Gate protection and the pool-label check of ``policies/``, as ``up`` installs them.

    Who may remove the gate: the sandbox's gatekeeper, which runs with the admin
    certificate (CN=sandbox-admin), and the chart's default ServiceAccount in
    GATEKEEPER_NAMESPACE (the chart's RBAC test runs the gatekeeper as that account). Not
    the gate-injection policies: the sandbox gates with the webhook. The bindings act in
    the namespaces labelled POLICIES_LABEL=enforce (``up`` labels ``default``), not in
    every namespace: the policy tests install and prove their own copies in their own
    namespaces (an LWS with an empty label made before the policy, another identity
    allowed to ungate), which a sandbox-wide copy would overrule. Their names end in
    ``-sandbox``, so that the files' own objects (the chart's) can still be created beside.
    """
    objects = load_policies(
        [GATE_PROTECTION, "pool-label"],
        allowed_usernames=["sandbox-admin", service_account_username(GATEKEEPER_NAMESPACE, "lws-gatekeeper")],
    )
    for obj in objects:
        obj["metadata"]["name"] += "-sandbox"
        if obj["kind"].endswith("Binding"):
            obj["spec"]["policyName"] += "-sandbox"
            match = obj["spec"].setdefault("matchResources", {})
            match["namespaceSelector"] = {"matchLabels": {POLICIES_LABEL: "enforce"}}
    return objects


def crd_manifests() -> str:
    """The project's CRDs (Pool, GroupAdmission) as one YAML stream."""
    base = resources.files("gatekeeper").joinpath("crds")
    return "\n---\n".join(
        base.joinpath(name).read_text()
        for name in sorted(p.name for p in base.iterdir())
        if name.endswith(".yaml")
    )


def lws_webhooks(lws: build.Installed, base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """LWS's webhook configurations (its manifests and kustomize patches), pointed at a URL."""
    webhook_dir = lws.files / "config" / "webhook"
    docs = [d for d in yaml.safe_load_all((webhook_dir / "manifests.yaml").read_text()) if d]
    patches = {
        "MutatingWebhookConfiguration": webhook_dir / "mutating-patch.yaml",
        "ValidatingWebhookConfiguration": webhook_dir / "validating-patch.yaml",
    }
    for doc in docs:
        patch_file = patches.get(doc["kind"])
        if patch_file is not None and patch_file.exists():
            for op in yaml.safe_load(patch_file.read_text()):
                parts = op["path"].strip("/").split("/")
                if op["op"] != "replace" or len(parts) != 2 or parts[0] != "webhooks":
                    raise SandboxError(f"unexpected patch in {patch_file}: {op}")
                doc["webhooks"][int(parts[1])] = op["value"]
    return webhooks_by_url(docs, prefix="lws-", base_url=base_url, ca_pem=ca_pem)


def webhooks_by_url(
    docs: list[dict[str, Any]], *, prefix: str, base_url: str, ca_pem: bytes
) -> list[dict[str, Any]]:
    """Webhook configurations made for an in-cluster Service, sent to ``base_url`` instead.

    Each webhook keeps its Service's path and trusts ``ca_pem``; each configuration's name
    gets ``prefix`` (as its project's kustomize namePrefix does). Changes ``docs`` in place.
    """
    ca = base64.b64encode(ca_pem).decode()
    for doc in docs:
        doc["metadata"]["name"] = prefix + doc["metadata"]["name"]
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": base_url + path, "caBundle": ca}
    return docs
