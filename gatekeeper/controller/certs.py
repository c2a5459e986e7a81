"""The webhook's own certificates, made and rotated by the controller when cert-manager is absent.

Why this exists: the API server calls the mutating webhook over TLS only, and trusts it
through the ``caBundle`` of the MutatingWebhookConfiguration. The chart uses cert-manager
where the cluster has it; elsewhere the certificates must still work out of the box, so
the gatekeeper makes them itself:

- a self-signed CA and a serving certificate for the webhook Service's DNS names, kept in
  one Secret (``ca.crt``, ``ca.key``, ``tls.crt``, ``tls.key``) so that every replica
  serves the same certificate and a restarted pod reuses it;
- the serving pair written to ``--cert-dir`` (an emptyDir), where the webhook server
  re-reads it when it changes (``gatekeeper.webhook.server``), so rotation needs no restart;
- the CA bundle patched into the named MutatingWebhookConfiguration, and re-patched when
  anyone (a ``helm upgrade``) resets it;
- renewal before expiry: the serving certificate ``renew_before`` ahead of its end, the CA
  likewise; a renewed CA is trusted next to the old one until the old one expires, so a
  replica that still serves the old pair is not cut off meanwhile.

The two replicas race safely: the Secret is written with the resourceVersion it was read
at, the loser of a race reads the winner's certificates and uses them. Decisions
(``plan``) are pure and take the time as an argument; ``SelfSignedCerts`` does the I/O.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gatekeeper.controller import kube as k
from gatekeeper.controller import resources as r
from gatekeeper.controller import x509_build as x509util

__all__ = [
    "CA_CRT",
    "CA_KEY",
    "TLS_CRT",
    "TLS_KEY",
    "CertSettings",
    "SelfSignedCerts",
    "ca_bundle",
    "make_ca",
    "make_serving",
    "plan",
    "service_dns_names",
]

log = logging.getLogger("gatekeeper.certs")

CA_CRT, CA_KEY, TLS_CRT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"


_BACKDATE = dt.timedelta(hours=1)  # tolerate clocks a little behind ours
_COMMON_NAME = "lws-gatekeeper"
_UNREADABLE = (ValueError, TypeError, UnsupportedAlgorithm)


@dataclass(frozen=True)
class CertSettings:
    """Lifetimes: a CA of ``ca_validity``, serving certificates of ``cert_validity``, both
    renewed when less than their ``*_renew_before`` remains."""

    ca_validity: dt.timedelta = dt.timedelta(days=3650)
    ca_renew_before: dt.timedelta = dt.timedelta(days=365)
    cert_validity: dt.timedelta = dt.timedelta(days=365)
    cert_renew_before: dt.timedelta = dt.timedelta(days=30)


def service_dns_names(service: str, namespace: str, cluster_domain: str = "cluster.local") -> list[str]:
    """The names the API server may use for ``service`` in ``namespace`` (it uses ``<svc>.<ns>.svc``)."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.{cluster_domain}",
    ]


# ---- pure: certificates and the decision to renew ----------------------------------------


def make_ca(now: dt.datetime, settings: CertSettings) -> tuple[bytes, bytes]:
    key = x509util.new_key()
    cert = x509util.ca_certificate(
        key,
        x509util.name(f"{_COMMON_NAME}-ca"),
        not_before=now - _BACKDATE,
        not_after=now + settings.ca_validity,
    )
    return cert.public_bytes(serialization.Encoding.PEM), x509util.key_pem(key)


def make_serving(
    ca_pem: bytes, ca_key_pem: bytes, dns_names: Sequence[str], now: dt.datetime, settings: CertSettings
) -> tuple[bytes, bytes]:
    ca = x509.load_pem_x509_certificate(ca_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an EC key")
    key = x509util.new_key()
    cert = x509util.leaf_certificate(
        ca,
        ca_key,
        key,
        x509util.name(dns_names[0]),
        not_before=now - _BACKDATE,
        not_after=min(now + settings.cert_validity, ca.not_valid_after_utc),
        server_names=dns_names,
    )
    return cert.public_bytes(serialization.Encoding.PEM), x509util.key_pem(key)


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _matches(cert_pem: bytes, key_pem: bytes) -> bool:
    cert = x509.load_pem_x509_certificate(cert_pem)
    key = serialization.load_pem_private_key(key_pem, password=None)
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(
        cert.public_key().public_bytes(serialization.Encoding.PEM, pub)
        == key.public_key().public_bytes(serialization.Encoding.PEM, pub)
    )


def _why_renew(
    data: Mapping[str, bytes], dns_names: Sequence[str], now: dt.datetime, settings: CertSettings
) -> tuple[str, bool] | None:
    """Why the Secret's certificates must change, and whether the CA must too; None: they are fine."""
    if not data.get(CA_CRT) or not data.get(CA_KEY):
        return "no CA yet", True
    try:
        ca = x509.load_pem_x509_certificates(data[CA_CRT])[0]
        ca_ok = _matches(ca.public_bytes(serialization.Encoding.PEM), data[CA_KEY])
    except _UNREADABLE as exc:
        return f"the stored CA does not load ({exc})", True
    if not ca_ok:
        return "the stored CA does not match its key", True
    if ca.not_valid_after_utc - now < settings.ca_renew_before:
        return f"the CA expires at {ca.not_valid_after_utc:%Y-%m-%d %H:%M}Z", True
    if not data.get(TLS_CRT) or not data.get(TLS_KEY):
        return "no serving certificate yet", False
    try:
        cert = x509.load_pem_x509_certificate(data[TLS_CRT])
        pair_ok = _matches(data[TLS_CRT], data[TLS_KEY])
    except _UNREADABLE as exc:
        return f"the stored serving certificate does not load ({exc})", False
    if not pair_ok:
        return "the serving certificate does not match its key", False
    if not _signed_by(cert, ca):
        return "the serving certificate is not signed by the current CA", False
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = sans.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        names = []
    if sorted(names) != sorted(dns_names):
        return f"the serving certificate names {names}, the service is {list(dns_names)}", False
    if cert.not_valid_after_utc - now < settings.cert_renew_before:
        return f"the serving certificate expires at {cert.not_valid_after_utc:%Y-%m-%d %H:%M}Z", False
    return None


def plan(
    data: Mapping[str, bytes],
    dns_names: Sequence[str],
    now: dt.datetime,
    settings: CertSettings = CertSettings(),
) -> tuple[dict[str, bytes], str] | None:
    """The Secret's next data and the reason, or None when ``data`` is good as it is.

    A renewed CA comes first in ``ca.crt``, followed by the previous CA while that one is
    still valid: the bundle trusts both, so a pair signed by either is accepted.
    """
    why = _why_renew(data, dns_names, now, settings)
    if why is None:
        return None
    reason, new_ca = why
    if new_ca:
        ca_pem, ca_key_pem = make_ca(now, settings)
        bundle = ca_pem + _still_valid_cas(data.get(CA_CRT, b""), now)
    else:
        ca_key_pem, bundle = data[CA_KEY], data[CA_CRT]
        ca_pem = x509.load_pem_x509_certificates(bundle)[0].public_bytes(serialization.Encoding.PEM)
    tls_crt, tls_key = make_serving(ca_pem, ca_key_pem, dns_names, now, settings)
    return {CA_CRT: bundle, CA_KEY: ca_key_pem, TLS_CRT: tls_crt, TLS_KEY: tls_key}, reason


def _still_valid_cas(pem: bytes, now: dt.datetime) -> bytes:
    """The first (current) CA of an old bundle, if it parses and is still valid, as PEM."""
    try:
        cas = x509.load_pem_x509_certificates(pem) if pem else []
    except ValueError:
        return b""
    if cas and cas[0].not_valid_after_utc > now:
        return cas[0].public_bytes(serialization.Encoding.PEM)
    return b""


def ca_bundle(data: Mapping[str, bytes]) -> bytes:
    """The PEM the API server must trust: every CA in ``ca.crt``."""
    return data[CA_CRT]


def _decode(secret: Mapping[str, Any]) -> dict[str, bytes]:
    raw = secret.get("data") or {}
    out: dict[str, bytes] = {}
    for key, value in raw.items():
        try:
            out[key] = base64.b64decode(value)
        except ValueError:
            out[key] = b""
    return out


def _encode(data: Mapping[str, bytes]) -> dict[str, str]:
    return {key: base64.b64encode(value).decode() for key, value in data.items()}


# ---- I/O: the Secret, the files, the webhook configuration ---------------------------------


def _write_if_changed(path: Path, content: bytes, mode: int) -> bool:
    """Replace ``path`` atomically (same folder, then rename) unless it already holds ``content``."""
    try:
        if path.read_bytes() == content:
            return False
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


class SelfSignedCerts:
    """Keeps the Secret, the files in ``cert_dir`` and the webhook configuration's CA in step."""

    def __init__(
        self,
        kube: k.Kube,
        *,
        namespace: str,
        secret: str,
        service: str,
        webhook_config: str,
        cert_dir: Path,
        settings: CertSettings = CertSettings(),
        check_seconds: float = 60.0,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.secret = secret
        self.webhook_config = webhook_config
        self.cert_dir = cert_dir
        self.dns_names = service_dns_names(service, namespace)
        self.settings = settings
        self.check_seconds = check_seconds

    async def _read(self) -> tuple[dict[str, Any] | None, dict[str, bytes]]:
        try:
            secret = await self.kube.get(r.SECRETS, self.secret, self.namespace)
        except k.Conflict:  # 404: not made by the chart; we make it
            return None, {}
        return secret, _decode(secret)

    async def _store(self, secret: dict[str, Any] | None, data: Mapping[str, bytes]) -> None:
        """Write the Secret (guarded by the read resourceVersion); Conflict when another replica won."""
        if secret is None:
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": self.secret, "namespace": self.namespace},
                "type": "Opaque",
                "data": _encode(data),
            }
            await self.kube.create(r.SECRETS, body)
        else:
            body = dict(secret)
            body["data"] = _encode(data)
            await self.kube.replace(r.SECRETS, body)

    async def ensure(self, now: dt.datetime | None = None) -> bool:
        """One round: the Secret current, the files written, the CA bundle patched.

        Returns True when the webhook configuration carries the bundle (False when that
        configuration does not exist, e.g. the chart installs the policies instead).
        """
        for _ in range(5):
            secret, data = await self._read()
            change = plan(data, self.dns_names, now or dt.datetime.now(dt.UTC), self.settings)
            if change is None:
                break
            data, reason = change
            try:
                await self._store(secret, data)
            except k.Conflict:
                log.info("secret %s/%s changed meanwhile; reading it again", self.namespace, self.secret)
                continue
            log.info(
                "wrote new webhook certificates to secret %s/%s: %s", self.namespace, self.secret, reason
            )
            break
        else:
            raise k.Conflict(f"secret {self.namespace}/{self.secret} kept changing under us")
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        # The key first: a half-rotated pair fails to load and the server keeps the old one.
        changed = _write_if_changed(self.cert_dir / TLS_KEY, data[TLS_KEY], 0o600)
        changed |= _write_if_changed(self.cert_dir / TLS_CRT, data[TLS_CRT], 0o644)
        changed |= _write_if_changed(self.cert_dir / CA_CRT, data[CA_CRT], 0o644)
        if changed:
            log.info("webhook certificate files updated in %s", self.cert_dir)
        return await self._patch_ca_bundle(ca_bundle(data))

    async def _patch_ca_bundle(self, bundle: bytes) -> bool:
        """The CA bundle into the mutating configuration (needed: False until it exists) and
        into the StatefulSet guard's validating one of the same name (when there is one)."""
        done = await self._patch_config(r.WEBHOOK_CONFIGURATIONS, bundle, required=True)
        await self._patch_config(r.VALIDATING_WEBHOOK_CONFIGURATIONS, bundle, required=False)
        return done

    async def _patch_config(self, res: r.Resource, bundle: bytes, *, required: bool) -> bool:
        kind = res.plural.removesuffix("s")
        try:
            config = await self.kube.get(res, self.webhook_config)
        except k.Conflict:
            if required:
                log.warning("%s %s not found; its CA bundle is set once it exists", kind, self.webhook_config)
            return False
        wanted = base64.b64encode(bundle).decode()
        ops: list[dict[str, Any]] = []
        for i, hook in enumerate(config.get("webhooks") or []):
            if (hook.get("clientConfig") or {}).get("caBundle") != wanted:
                ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook["name"]})
                ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": wanted})
        if ops:
            await self.kube.json_patch(res, self.webhook_config, None, ops)
            log.info("patched the CA bundle of %s %s", kind, self.webhook_config)
        return True

    async def ensure_until_done(self) -> None:
        """``ensure`` until the files exist (the webhook server cannot start without them)."""
        backoff = 0.5
        while True:
            try:
                await self.ensure()
                return
            except k.TemporaryError as exc:
                log.warning("webhook certificates not ready, retrying in %.1fs: %s", backoff, exc)
            await anyio.sleep(backoff)
            backoff = min(backoff * 2, 30.0)

    async def run(self) -> None:
        """Every ``check_seconds``: renew what is due, follow the Secret, restore the CA bundle."""
        while True:
            await anyio.sleep(self.check_seconds)
            try:
                await self.ensure()
            except k.TemporaryError as exc:
                log.warning("webhook certificates check failed, next in %.0fs: %s", self.check_seconds, exc)
