"""The sandbox's own certificates: one CA, serving and client certificates, SA keys, and
the kubeconfigs that carry the client certificates.

Why this exists: a real control plane talks TLS everywhere and the API server calls
webhooks over TLS only, so the sandbox needs a small PKI of its own. Everything is
made once per sandbox folder with ``cryptography`` and reused on the next ``up``.
Components that admission tells apart by their user (the LWS controller, the garbage
collector) get identities of their own (:func:`identity_kubeconfig`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gatekeeper.controller import x509_build as x509util

__all__ = ["Pki", "client_identity", "identity_kubeconfig", "make_pki", "write_kubeconfig"]

_VALID = dt.timedelta(days=365)


@dataclass(frozen=True)
class Pki:
    """Paths of every file the sandbox's components read."""

    dir: Path

    @property
    def ca_crt(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def apiserver_crt(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def apiserver_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def admin_crt(self) -> Path:
        return self.dir / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.dir / "admin.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    @property
    def webhook_dir(self) -> Path:
        """``tls.crt`` and ``tls.key`` for webhook servers on loopback (controller-runtime's names)."""
        return self.dir / "webhook"


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(x509util.key_pem(key))
    path.chmod(0o600)


_RENEW_BEFORE = dt.timedelta(days=1)
"""A kept sandbox's webhook certificate valid for less than this is issued again."""


def _valid_for(crt: Path) -> dt.timedelta:
    try:
        cert = x509.load_pem_x509_certificate(crt.read_bytes())
    except (OSError, ValueError):
        return dt.timedelta(0)
    return cert.not_valid_after_utc - dt.datetime.now(dt.UTC)


def _ca(pki: Pki) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The sandbox's CA certificate and key, as ``make_pki`` wrote them."""
    ca_cert = x509.load_pem_x509_certificate(pki.ca_crt.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{pki.ca_key}: not the EC key the sandbox makes")
    return ca_cert, ca_key


def _renew_webhook(pki: Pki) -> None:
    """Issue the webhook servers' certificate again, with the sandbox's own CA (which every
    component already trusts). A kept sandbox folder can hold one about to expire, or a
    short-lived one a test wrote and could not put back (killed mid-way): every webhook
    call of the sandbox would fail."""
    ca_cert, ca_key = _ca(pki)
    now = dt.datetime.now(dt.UTC)
    key = x509util.new_key()
    cert = x509util.leaf_certificate(
        ca_cert,
        ca_key,
        key,
        x509util.name("sandbox-webhooks"),
        not_before=now - dt.timedelta(minutes=5),
        not_after=min(now + _VALID, ca_cert.not_valid_after_utc),
        server_names=["127.0.0.1", "localhost"],
    )
    _write_key(pki.webhook_dir / "tls.key", key)
    (pki.webhook_dir / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def client_identity(pki: Pki, stem: str, user: str) -> tuple[Path, Path]:
    """A client certificate and key for ``user`` in ``system:masters`` (``<stem>.crt``,
    ``<stem>.key``), issued with the sandbox's CA unless they exist already.

    A component that a webhook or policy tells apart by its user name (the LWS controller,
    kube-controller-manager) runs as the user it has in a real cluster, not as the admin.
    """
    crt, key_path = pki.dir / f"{stem}.crt", pki.dir / f"{stem}.key"
    if crt.exists() and key_path.exists() and _valid_for(crt) >= _RENEW_BEFORE:
        return crt, key_path
    ca_cert, ca_key = _ca(pki)
    now = dt.datetime.now(dt.UTC)
    key = x509util.new_key()
    cert = x509util.leaf_certificate(
        ca_cert,
        ca_key,
        key,
        x509util.name(user, "system:masters"),
        not_before=now - dt.timedelta(minutes=5),
        not_after=min(now + _VALID, ca_cert.not_valid_after_utc),
        server_names=(),
        client=True,
    )
    _write_key(key_path, key)
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return crt, key_path


def write_kubeconfig(path: Path, port: int, pki: Pki, client: tuple[Path, Path] | None = None) -> None:
    """The admin's kubeconfig for the API server on ``port`` (readable by the owner only);
    with ``client`` (certificate, key), that client's instead."""
    crt, key = client or (pki.admin_crt, pki.admin_key)
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
                "user": {"client-certificate": str(crt), "client-key": str(key)},
            }
        ],
        "contexts": [{"name": "sandbox", "context": {"cluster": "sandbox", "user": "admin"}}],
        "current-context": "sandbox",
    }
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)


def identity_kubeconfig(pki: Pki, folder: Path, port: int, stem: str, user: str) -> Path:
    """``folder/kubeconfig.<stem>``: the API server on ``port`` for ``user`` (in
    ``system:masters``, see :func:`client_identity`)."""
    path = folder / f"kubeconfig.{stem}"
    write_kubeconfig(path, port, pki, client_identity(pki, stem, user))
    return path


def make_pki(directory: Path) -> Pki:
    """Create the PKI in ``directory`` unless it is already there; return its paths. A kept
    PKI whose webhook certificate is (nearly) expired gets a new one."""
    pki = Pki(directory)
    if (directory / ".complete").exists():
        if _valid_for(pki.webhook_dir / "tls.crt") < _RENEW_BEFORE:
            _renew_webhook(pki)
        return pki
    directory.mkdir(parents=True, exist_ok=True)
    pki.webhook_dir.mkdir(exist_ok=True)

    ca_key = x509util.new_key()
    now = dt.datetime.now(dt.UTC)
    ca_cert = x509util.ca_certificate(
        ca_key,
        x509util.name("lws-gatekeeper-sandbox-ca"),
        not_before=now - dt.timedelta(minutes=5),
        not_after=now + _VALID,
        path_length=None,
    )
    _write_key(pki.ca_key, ca_key)
    pki.ca_crt.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        crt: Path,
        key_path: Path,
        subject: x509.Name,
        server_names: list[str] | None = None,
        client: bool = False,
    ) -> None:
        key = x509util.new_key()
        cert = x509util.leaf_certificate(
            ca_cert,
            ca_key,
            key,
            subject,
            not_before=now - dt.timedelta(minutes=5),
            not_after=now + _VALID,
            server_names=server_names or (),
            client=client,
        )
        _write_key(key_path, key)
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    issue(
        pki.apiserver_crt,
        pki.apiserver_key,
        x509util.name("kube-apiserver"),
        server_names=[
            "127.0.0.1",
            "localhost",
            "10.96.0.1",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ],
    )
    issue(pki.admin_crt, pki.admin_key, x509util.name("sandbox-admin", "system:masters"), client=True)
    issue(
        pki.webhook_dir / "tls.crt",
        pki.webhook_dir / "tls.key",
        x509util.name("sandbox-webhooks"),
        server_names=["127.0.0.1", "localhost"],
    )

    sa = x509util.new_key()
    _write_key(pki.sa_key, sa)
    pki.sa_pub.write_bytes(
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    (directory / ".complete").write_text("ok\n")
    return pki
