"""The real Kueue in the sandbox: its CRDs, its manager, its webhooks on loopback.

Why this exists: the ``kueue`` backend and the node-fit AdmissionCheck are judged against
the real Kueue, and Kueue's own LeaderWorkerSet integration is what they are compared
with. So ``sandbox up --with-kueue`` runs the Kueue manager built from its Go module
(``pins.toml``) the way the sandbox runs the LWS controller: its internal certificate
management off, its webhooks served on a loopback port with the sandbox's webhook
certificate, and its webhook configurations taken from the module's own ``config/``
manifests (with their kustomize patches) and pointed at that port by URL. Everything
Kueue-specific lives here; ``cluster.py`` only calls :func:`start_kueue`.

Two things in Kueue's ``cmd/kueue`` shape how it is run:

- With internal certificate management off, the manager reads the metrics server's
  certificate from the hard-coded folder ``/etc/kueue/metrics/certs`` (there is no
  setting for it) and exits when it is missing, even with metrics off. The sandbox
  writes no file outside its folder: it runs Kueue in a private mount namespace
  (``unshare``) where an overlay on ``/etc`` adds that folder, holding the sandbox's
  webhook certificate. The host's ``/etc`` is untouched; Kueue is not modified.
- The visibility API server (feature gate ``VisibilityOnDemand``, on by default) reads
  its certificate from another hard-coded folder, ``/visibility``, and binds
  ``0.0.0.0:8082``. The sandbox turns that feature off; Workload status says what a
  pending workload waits for.

Which pods Kueue touches: only those in namespaces labelled
``kueue.x-k8s.io/managed=true`` (:data:`MANAGED_NAMESPACE_LABEL`). That is Kueue's
``managedJobsNamespaceSelector`` (v1beta2 of its Configuration; v1beta1's
``integrations.podOptions.namespaceSelector`` is gone), and, as Kueue's Helm chart does,
also the ``namespaceSelector`` of its job and pod webhooks, so a pod elsewhere never
reaches Kueue at all. Jobs carrying ``kueue.x-k8s.io/queue-name`` in other namespaces are
still reconciled by Kueue's job controller (Kueue's "weak exemption"), but none of their
webhooks run there, so use a labelled namespace.
"""

from __future__ import annotations

import base64
import copy
import os
import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from gatekeeper.core.kube.keys import KUEUE_MANAGED_NAMESPACE_LABEL
from gatekeeper_lab.sandbox import build
from gatekeeper_lab.sandbox.kubectl import Kubectl
from gatekeeper_lab.sandbox.manifests import webhooks_by_url
from gatekeeper_lab.sandbox.pki import Pki
from gatekeeper_lab.sandbox.process import Runner, SandboxError, free_ports, ready

__all__ = [
    "COMPONENT",
    "FRAMEWORKS",
    "KUEUE_NAMESPACE",
    "MANAGED_NAMESPACE_LABEL",
    "kueue_config",
    "kueue_crds",
    "kueue_webhooks",
    "managed_namespace_selector",
    "start_kueue",
]

#: The process name in the sandbox's state and logs (``logs/kueue-controller.log``).
COMPONENT = "kueue-controller"

#: Namespace Kueue believes it runs in (its webhooks' default selectors exclude it).
KUEUE_NAMESPACE = "kueue-system"

#: Label of the namespaces whose jobs and pods Kueue manages (value ``"true"``).
MANAGED_NAMESPACE_LABEL = KUEUE_MANAGED_NAMESPACE_LABEL

#: Kueue integrations the sandbox enables: plain Jobs, and Kueue's own LWS integration,
#: which turns each LWS group into a pod group (the ``pod`` integration, which Kueue
#: would enable implicitly for it anyway).
FRAMEWORKS = ("batch/job", "pod", "leaderworkerset.x-k8s.io/leaderworkerset")

#: Where ``cmd/kueue`` reads the metrics certificate when internal cert management is off.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")


def managed_namespace_selector() -> dict[str, Any]:
    """The namespaces Kueue manages: those labelled ``kueue.x-k8s.io/managed=true``."""
    return {"matchLabels": {MANAGED_NAMESPACE_LABEL: "true"}}


def kueue_config(
    *,
    webhook_port: int,
    health_port: int,
    metrics_port: int,
    cert_dir: Path,
) -> dict[str, Any]:
    """Kueue's Configuration (``config.kueue.x-k8s.io/v1beta2``, what v0.19 reads) for the sandbox.

    Unknown fields are errors there (Kueue decodes strictly), so this holds only fields of
    that version. Every server binds loopback; one replica, no leader election.
    """
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": managed_namespace_selector(),
        "internalCertManagement": {"enable": False},
        "leaderElection": {"leaderElect": False},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        # HTTPS with the sandbox's webhook certificate (valid for 127.0.0.1); a scrape
        # needs a bearer token allowed to GET /metrics (Kueue checks it with a TokenReview).
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "clientConnection": {"qps": 200, "burst": 400},
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "featureGates": {"VisibilityOnDemand": False},
    }


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _kustomization(folder: Path) -> dict[str, Any]:
    data = yaml.safe_load((folder / "kustomization.yaml").read_text())
    if not isinstance(data, dict):
        raise SandboxError(f"{folder / 'kustomization.yaml'} is not a mapping")
    return data


def kueue_crds(kueue: build.Installed, base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's CRDs, with the conversion webhooks its kustomization enables pointed at a URL.

    Five CRDs serve both v1beta1 and v1beta2 and convert between them through the
    manager's ``/convert``; ``config/components/crd/kustomization.yaml`` lists the
    patches that say so (the commented-out ones stay out, as in a release install).
    """
    folder = kueue.files / "config" / "components" / "crd"
    kust = _kustomization(folder)
    crds = {d["metadata"]["name"]: d for res in kust.get("resources", []) for d in _docs(folder / res)}
    ca = base64.b64encode(ca_pem).decode()
    for entry in kust.get("patches", []):
        patch_path = entry.get("path") if isinstance(entry, dict) else None
        if not patch_path:
            raise SandboxError(f"unexpected patch in {folder / 'kustomization.yaml'}: {entry}")
        for patch in _docs(folder / patch_path):
            name = patch["metadata"]["name"]
            conversion = patch.get("spec", {}).get("conversion")
            if name not in crds or conversion is None or set(patch.get("spec", {})) != {"conversion"}:
                raise SandboxError(f"unexpected patch {patch_path} for {name}")
            conversion = copy.deepcopy(conversion)
            client = conversion["webhook"]["clientConfig"]
            conversion["webhook"]["clientConfig"] = {
                "url": base_url + client["service"]["path"],
                "caBundle": ca,
            }
            crds[name].setdefault("spec", {})["conversion"] = conversion
    return list(crds.values())


_FIELD_PATH = re.compile(r"webhooks\.\[name=([^\]]+)\]\.([A-Za-z]+)")


def _webhook(doc: dict[str, Any], name: str) -> dict[str, Any]:
    hook: dict[str, Any]
    for hook in doc["webhooks"]:
        if hook["name"] == name:
            return hook
    raise SandboxError(f"no webhook {name!r} in {doc['metadata']['name']}")


def _select(doc: dict[str, Any], field_path: str) -> tuple[dict[str, Any], str]:
    """The webhook and key named by a kustomize field path ``webhooks.[name=X].field``."""
    match = _FIELD_PATH.fullmatch(field_path)
    if match is None:
        raise SandboxError(f"unexpected kustomize field path {field_path!r}")
    return _webhook(doc, match[1]), match[2]


def kueue_webhooks(kueue: build.Installed, base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, as its kustomization builds them, pointed at a URL.

    ``config/components/webhook/kustomization.yaml`` gives the pod webhook a
    namespaceSelector and copies it to every job webhook. Its value is replaced by
    :func:`managed_namespace_selector`, as Kueue's Helm chart replaces it by the
    configured ``managedJobsNamespaceSelector``; every other selector stays as shipped.
    """
    folder = kueue.files / "config" / "components" / "webhook"
    kust = _kustomization(folder)
    docs = [
        d
        for res in kust.get("resources", [])
        for d in _docs(folder / res)
        if d["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    ]
    by_key = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    for entry in kust.get("patches", []):
        patch = yaml.safe_load(entry["patch"]) if isinstance(entry, dict) and "patch" in entry else None
        target = by_key.get((patch["kind"], patch["metadata"]["name"])) if patch else None
        if patch is None or target is None:
            raise SandboxError(f"unexpected patch in {folder / 'kustomization.yaml'}: {entry}")
        for hook_patch in patch.get("webhooks", []):
            hook = _webhook(target, hook_patch["name"])
            for key, value in hook_patch.items():
                if key == "namespaceSelector":
                    value = managed_namespace_selector()
                hook[key] = copy.deepcopy(value)
    for rep in kust.get("replacements", []):
        src = rep["source"]
        parent, key = _select(by_key[(src["kind"], src["name"])], src["fieldPath"])
        value = parent[key]
        for tgt in rep["targets"]:
            doc = by_key[(tgt["select"]["kind"], tgt["select"]["name"])]
            for field_path in tgt["fieldPaths"]:
                hook, hook_key = _select(doc, field_path)
                hook[hook_key] = copy.deepcopy(value)
    return webhooks_by_url(docs, prefix="kueue-", base_url=base_url, ca_pem=ca_pem)


def _launcher(run: Path, cert_dir: Path) -> list[str]:
    """argv prefix that runs a program in a private mount namespace where METRICS_CERT_DIR exists.

    An overlay on ``/etc`` whose upper layer (in the sandbox's ``run/``) holds
    ``kueue/metrics/certs/tls.{crt,key}``: the process sees the host's ``/etc`` plus that
    folder, nothing else changes and nothing is written outside the sandbox. As root a
    mount namespace is enough; otherwise an unprivileged user namespace maps the user
    to root inside it (needs Linux 5.11+ for overlayfs there).
    """
    unshare = shutil.which("unshare")
    if unshare is None:
        raise SandboxError("Kueue needs the 'unshare' command (util-linux) for its metrics certificate")
    upper, work = run / "kueue-etc" / "upper", run / "kueue-etc" / "work"
    certs = upper / METRICS_CERT_DIR.relative_to("/etc")
    shutil.rmtree(run / "kueue-etc", ignore_errors=True)
    certs.mkdir(parents=True)
    work.mkdir()
    for name in ("tls.crt", "tls.key"):
        shutil.copyfile(cert_dir / name, certs / name)
    userns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    script = 'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc && shift 2 && exec "$@"'
    namespace = [unshare, *userns, "--mount", "--propagation", "private"]
    return [*namespace, "sh", "-c", script, "sh", str(upper), str(work)]


def start_kueue(
    runner: Runner, state: dict[str, Any], installed: build.Installed, pki: Pki, kubectl: Kubectl
) -> None:
    """Install Kueue's CRDs, run its manager as ``kueue-controller``, wait for it, register its webhooks.

    ``state`` is the sandbox's state being built by ``up``; Kueue's ports are added to it.
    """
    ports = state["ports"]
    names = [n for n in ("kueue_webhook", "kueue_health", "kueue_metrics") if n not in ports]
    ports.update(zip(names, free_ports(len(names)), strict=True))
    base_url = f"https://127.0.0.1:{ports['kueue_webhook']}"
    ca_pem = pki.ca_crt.read_bytes()
    kubectl.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}}])
    crds = kueue_crds(installed, base_url, ca_pem)
    kubectl.apply(crds)
    # The manager exits at once if an API it indexes is not served yet.
    names = [f"crd/{c['metadata']['name']}" for c in crds]
    kubectl.wait_established(names)

    run = runner.run_dir
    run.mkdir(exist_ok=True)
    cfg_path = run / "kueue-config.yaml"
    cfg_path.write_text(
        yaml.safe_dump(
            kueue_config(
                webhook_port=ports["kueue_webhook"],
                health_port=ports["kueue_health"],
                metrics_port=ports["kueue_metrics"],
                cert_dir=pki.webhook_dir,
            )
        )
    )
    runner.start(
        state,
        COMPONENT,
        [
            *_launcher(run, pki.webhook_dir),
            runner.program("kueue"),
            f"--config={cfg_path}",
            f"--kubeconfig={runner.kubeconfig}",
        ],
    )
    readyz = f"http://127.0.0.1:{ports['kueue_health']}/readyz"
    runner.wait(COMPONENT, lambda: ready(readyz), timeout=120, what="/readyz (its webhook server listening)")
    kubectl.apply(kueue_webhooks(installed, base_url, ca_pem))
