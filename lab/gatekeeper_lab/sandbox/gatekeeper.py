"""The gatekeeper in the sandbox: ``lws-gatekeeper run`` from this Python, its webhook on loopback.

Why this exists: the end-to-end tests, the demo and the benchmarks judge the gatekeeper
as it runs in a cluster: its own process, its Lease, its webhooks (mutating, and the
StatefulSet guard) registered by URL, its ``/metrics``. ``cluster.py`` installs its
objects (:func:`install_objects`) and runs it (:func:`start`) at the end of ``up``;
``Sandbox.start_gatekeeper`` (tests that restart it, add a replica or change its flags)
and ``Sandbox.metrics`` call here too.

With ``image`` (:class:`FromImage`), the same process runs as the chart's Deployment runs
it instead: from the image's unpacked root file system (``container.py``), with the
Deployment's command, args, environment, user and mounts, in-cluster configuration and
a token of the Deployment's ServiceAccount (``tests/e2e/test_image.py``).
"""

from __future__ import annotations

import re
import shutil
import ssl
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gatekeeper.webhook.config import mutating_webhook_configuration, validating_webhook_configuration
from gatekeeper_lab.sandbox.container import Bind, Spec
from gatekeeper_lab.sandbox.kubectl import Kubectl
from gatekeeper_lab.sandbox.manifests import GATEKEEPER_NAMESPACE, crd_manifests
from gatekeeper_lab.sandbox.pki import Pki
from gatekeeper_lab.sandbox.process import Runner, free_ports, ready

__all__ = [
    "COMPONENT",
    "PORTS",
    "SERVICE_ACCOUNT_DIR",
    "FromImage",
    "container_spec",
    "install_objects",
    "metrics",
    "start",
]

#: The process name of the sandbox's own gatekeeper (extra replicas get other names).
COMPONENT = "gatekeeper"

#: Its ports, by their names in the state's ``ports``.
PORTS = ("gk_webhook", "gk_metrics")


#: Where the kubelet mounts a pod's ServiceAccount token, CA and namespace.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class FromImage:
    """Run the gatekeeper as ``deployment`` (a Deployment of ``helm template``) runs it, from
    ``rootfs`` (the image unpacked) with ``config`` (the image config's ``config``)."""

    rootfs: Path
    config: Mapping[str, Any]
    deployment: Mapping[str, Any]

    @property
    def pod(self) -> Mapping[str, Any]:
        spec: Mapping[str, Any] = self.deployment["spec"]["template"]["spec"]
        return spec

    @property
    def container(self) -> Mapping[str, Any]:
        containers: list[Mapping[str, Any]] = self.pod["containers"]
        return containers[0]

    def port(self, name: str) -> int:
        return int(next(p["containerPort"] for p in self.container["ports"] if p["name"] == name))


def _expand(value: str, env: Mapping[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion in command, args and env (``$$`` escapes)."""
    pattern = r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)"
    return re.sub(pattern, lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), value)


def container_spec(
    image: FromImage,
    name: str,
    *,
    apiserver_port: int,
    folder: Path,
    secret_files: Mapping[str, bytes],
    token: str,
    ca: bytes,
) -> Spec:
    """The :class:`Spec` of the Deployment's container as a kubelet would run it as pod ``name``.

    The volumes' files go under ``folder``: each Secret volume holds ``secret_files`` (the
    sandbox's loopback webhook certificate), the ServiceAccount volume ``token`` and ``ca``.
    """
    pod, c = image.pod, image.container
    namespace = str(image.deployment["metadata"]["namespace"])
    fields = {"metadata.name": name, "metadata.namespace": namespace}
    env: dict[str, str] = dict(e.split("=", 1) for e in image.config.get("Env") or [])
    env["HOSTNAME"] = name
    for var in c.get("env") or []:
        if "value" in var:
            env[var["name"]] = _expand(str(var["value"]), env)
        else:
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
    env["KUBERNETES_SERVICE_HOST"] = "127.0.0.1"
    env["KUBERNETES_SERVICE_PORT"] = str(apiserver_port)
    command = c.get("command") or list(image.config.get("Entrypoint") or [])
    args = c.get("args") if "args" in c or "command" in c else image.config.get("Cmd")
    argv = [_expand(str(a), env) for a in [*command, *(args or [])]]
    ctx = {**pod.get("securityContext", {}), **c.get("securityContext", {})}
    user, _, group = str(image.config.get("User") or "0").partition(":")
    uid, gid = int(ctx.get("runAsUser", user)), int(ctx.get("runAsGroup", group or user))

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    tmpfs, binds = [], []
    for mount in c.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:
            tmpfs.append(mount["mountPath"])
        elif "secret" in volume:
            where = _files(folder / mount["name"], secret_files)
            binds.append(Bind(str(where), mount["mountPath"], bool(mount.get("readOnly", False))))
        else:
            raise ValueError(f"volume {mount['name']}: only emptyDir and secret volumes are run here")
    if pod.get("automountServiceAccountToken", True):
        files = {"token": token.encode(), "ca.crt": ca, "namespace": namespace.encode()}
        binds.append(Bind(str(_files(folder / "serviceaccount", files)), SERVICE_ACCOUNT_DIR, True))
    return Spec(
        rootfs=str(image.rootfs),
        argv=argv,
        env=env,
        uid=uid,
        gid=gid,
        workdir=str(c.get("workingDir") or image.config.get("WorkingDir") or "/"),
        read_only=bool(ctx.get("readOnlyRootFilesystem", False)),
        tmpfs=tmpfs,
        binds=binds,
    )


def _files(folder: Path, files: Mapping[str, bytes]) -> Path:
    """A volume's files, readable by the pod's user (as a Secret's default mode 0644 makes them)."""
    folder.mkdir(parents=True)
    folder.chmod(0o755)
    for fname, data in files.items():
        (folder / fname).write_bytes(data)
        (folder / fname).chmod(0o644)
    return folder


def install_objects(kubectl: Kubectl) -> None:
    """The CRDs (Pool objects can be applied with or without the gatekeeper) and its namespace."""
    kubectl.apply(crd_manifests())
    kubectl.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GATEKEEPER_NAMESPACE}}])


def start(
    runner: Runner,
    pki: Pki,
    kubectl: Kubectl,
    name: str = COMPONENT,
    *,
    backend: str,
    register: bool = True,
    kubeconfig: Path | None = None,
    args: Sequence[str] = (),
    image: FromImage | None = None,
) -> None:
    """Run a gatekeeper process as ``name``, wait for its ``/readyz``, register its webhook.

    Only the process named :data:`COMPONENT` uses the sandbox's gatekeeper ports and, if
    ``register``, its webhook; others get fresh ports. ``backend`` is ``pools`` or
    ``kueue``. See ``Sandbox.start_gatekeeper``. With ``image`` the Deployment's own
    command, args (ports among them) and identity are used instead of ``backend``,
    ``kubeconfig`` and ``args``.
    """
    state = runner.load()
    p = state["ports"]
    if "gk_webhook" not in p:  # a sandbox started by an older version, without a gatekeeper
        p["gk_webhook"], p["gk_metrics"] = free_ports(2)
    webhook_port = p["gk_webhook"] if name == COMPONENT else free_ports(1)[0]
    metrics_port = p["gk_metrics"] if name == COMPONENT else free_ports(1)[0]
    if image is not None:
        webhook_port, metrics_port = image.port("webhook"), image.port("metrics")
        pod = image.pod
        account = str(pod.get("serviceAccountName") or "default")
        namespace = str(image.deployment["metadata"]["namespace"])
        token = kubectl.run("create", "token", account, "-n", namespace, "--duration=2h").stdout.strip()
        spec = container_spec(
            image,
            name,
            apiserver_port=p["apiserver"],
            folder=runner.run_dir / name,
            secret_files={f.name: f.read_bytes() for f in pki.webhook_dir.iterdir()},
            token=token,
            ca=pki.ca_crt.read_bytes(),
        )
        spec_file = runner.run_dir / name / "spec.json"
        spec.write(spec_file)
        argv = [sys.executable, "-m", "gatekeeper_lab.sandbox.container", str(spec_file)]
        backend = next((a.split("=", 1)[1] for a in spec.argv if a.startswith("--backend=")), backend)
    else:
        argv = [
            sys.executable,
            "-m",
            "gatekeeper",
            "run",
            f"--kubeconfig={kubeconfig or runner.kubeconfig}",
            f"--cert-dir={pki.webhook_dir}",
            "--webhook-host=127.0.0.1",
            f"--webhook-port={webhook_port}",
            "--metrics-host=127.0.0.1",
            f"--metrics-port={metrics_port}",
            f"--lease-namespace={GATEKEEPER_NAMESPACE}",
            f"--identity={name}",
            f"--backend={backend}",
            *args,
        ]
    runner.start(state, name, argv)
    secure = "--metrics-secure" in (spec.argv if image is not None else argv)
    state["processes"][name]["metrics"] = metrics_port
    state["processes"][name]["metrics_scheme"] = "https" if secure else "http"
    state["processes"][name]["backend"] = backend
    runner.save(state)
    readyz = f"{'https' if secure else 'http'}://127.0.0.1:{metrics_port}/readyz"
    runner.wait(
        name, lambda: ready(readyz, context=UNVERIFIED if secure else None), timeout=60, what="/readyz"
    )
    if register and name == COMPONENT:
        url, ca = f"https://127.0.0.1:{webhook_port}", pki.ca_crt.read_bytes()
        # The guard's exempt users are the chart's: the sandbox runs the LWS controller and
        # kube-controller-manager as the users they have in a cluster.
        kubectl.apply(
            [
                mutating_webhook_configuration(url=url, ca_bundle=ca),
                validating_webhook_configuration(url=url, ca_bundle=ca),
            ]
        )


UNVERIFIED = ssl.create_default_context()
"""How the sandbox reads a gatekeeper's HTTPS metrics port: its certificate is self-signed at
start, with nothing to verify it against (as a ServiceMonitor's ``insecureSkipVerify``)."""
UNVERIFIED.check_hostname = False
UNVERIFIED.verify_mode = ssl.CERT_NONE


def metrics(runner: Runner, name: str = COMPONENT) -> str:
    """The ``/metrics`` text of the gatekeeper process ``name`` (over HTTPS, not verified,
    when it serves it so: ``--metrics-secure``, where a token is needed: the image test sends
    its own)."""
    info = runner.load()["processes"][name]
    request = urllib.request.Request(
        f"{info.get('metrics_scheme', 'http')}://127.0.0.1:{info['metrics']}/metrics"
    )
    with urllib.request.urlopen(request, timeout=5, context=UNVERIFIED) as r:
        return str(r.read().decode())
