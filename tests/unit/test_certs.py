"""The gatekeeper's own webhook certificates: made, kept, renewed, trusted.

``plan`` is pure (the time is an argument), so expiry is tested by moving the clock, not
by waiting. ``SelfSignedCerts`` runs against an in-memory API (a Secret and a
MutatingWebhookConfiguration), and one test serves the result over real TLS and checks
that a client trusting only the CA bundle accepts it under the Service's DNS name.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import ssl
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from gatekeeper.controller import certs
from gatekeeper.controller import kube as k
from gatekeeper.controller import resources as r
from gatekeeper.controller.certs import CA_CRT, CA_KEY, TLS_CRT, TLS_KEY, SelfSignedCerts, plan
from gatekeeper.webhook import mutating_webhook_configuration, start_webhook_server
from gatekeeper.webhook.config import validating_webhook_configuration

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
NAMES = certs.service_dns_names("lws-gatekeeper-webhook", "gk-system")
DAY = dt.timedelta(days=1)


def fresh() -> dict[str, bytes]:
    change = plan({}, NAMES, NOW)
    assert change is not None
    return change[0]


def cas(data: dict[str, bytes]) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(data[CA_CRT])


def serving(data: dict[str, bytes]) -> x509.Certificate:
    return x509.load_pem_x509_certificate(data[TLS_CRT])


def test_service_dns_names() -> None:
    assert NAMES == [
        "lws-gatekeeper-webhook",
        "lws-gatekeeper-webhook.gk-system",
        "lws-gatekeeper-webhook.gk-system.svc",
        "lws-gatekeeper-webhook.gk-system.svc.cluster.local",
    ]


def test_an_empty_secret_gets_a_ca_and_a_serving_certificate() -> None:
    change = plan({}, NAMES, NOW)
    assert change is not None
    data, reason = change
    assert reason == "no CA yet"
    assert set(data) == {CA_CRT, CA_KEY, TLS_CRT, TLS_KEY}
    [ca] = cas(data)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    cert = serving(data)
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == NAMES
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert cert.not_valid_before_utc < NOW < cert.not_valid_after_utc
    assert cert.not_valid_after_utc - NOW == dt.timedelta(days=365)


def test_good_certificates_are_left_alone() -> None:
    data = fresh()
    assert plan(data, NAMES, NOW) is None
    assert plan(data, NAMES, NOW + 300 * DAY) is None


def test_the_serving_certificate_is_renewed_before_it_expires_with_the_same_ca() -> None:
    data = fresh()
    change = plan(data, NAMES, NOW + 340 * DAY)
    assert change is not None
    renewed, reason = change
    assert reason.startswith("the serving certificate expires at 2027-01-01")
    assert renewed[CA_CRT] == data[CA_CRT] and renewed[CA_KEY] == data[CA_KEY]
    assert renewed[TLS_KEY] != data[TLS_KEY]
    serving(renewed).verify_directly_issued_by(cas(data)[0])
    assert serving(renewed).not_valid_after_utc > NOW + 700 * DAY


def test_a_renewed_ca_is_trusted_beside_the_old_one_until_that_expires() -> None:
    data = fresh()
    when = NOW + (3650 - 300) * DAY
    change = plan(data, NAMES, when)
    assert change is not None
    renewed, reason = change
    assert reason.startswith("the CA expires at")
    new_ca, old_ca = cas(renewed)
    assert old_ca == cas(data)[0]
    assert new_ca != old_ca
    serving(renewed).verify_directly_issued_by(new_ca)
    # Once the old CA is past its end, the next CA renewal drops it from the bundle.
    later = plan(renewed, NAMES, when + 3400 * DAY)
    assert later is not None
    assert len(cas(later[0])) == 2
    assert old_ca not in cas(later[0])


def test_a_new_service_name_gets_a_new_serving_certificate() -> None:
    data = fresh()
    other = certs.service_dns_names("other", "gk-system")
    change = plan(data, other, NOW)
    assert change is not None
    renewed, reason = change
    assert "the service is" in reason
    assert renewed[CA_KEY] == data[CA_KEY]
    sans = serving(renewed).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == other


@pytest.mark.parametrize(
    ("damage", "reason", "new_ca"),
    [
        ({CA_CRT: b"garbage"}, "the stored CA does not load", True),
        ({CA_KEY: b"garbage"}, "the stored CA does not load", True),
        ({TLS_KEY: b""}, "no serving certificate yet", False),
        ({TLS_CRT: b"garbage"}, "the stored serving certificate does not load", False),
    ],
)
def test_damaged_secrets_are_repaired(damage: dict[str, bytes], reason: str, new_ca: bool) -> None:
    data = {**fresh(), **damage}
    change = plan(data, NAMES, NOW)
    assert change is not None
    assert change[1].startswith(reason)
    assert (change[0][CA_KEY] != data[CA_KEY]) is new_ca
    serving(change[0]).verify_directly_issued_by(cas(change[0])[0])


def test_a_key_of_another_pair_is_refused() -> None:
    one, two = fresh(), fresh()
    change = plan({**one, TLS_KEY: two[TLS_KEY]}, NAMES, NOW)
    assert change is not None
    assert change[1] == "the serving certificate does not match its key"
    change = plan({**one, CA_KEY: two[CA_KEY]}, NAMES, NOW)
    assert change is not None
    assert change[1] == "the stored CA does not match its key"


# ---- the I/O against an in-memory API ------------------------------------------------------


class FakeKube(k.Kube):
    """Secrets and MutatingWebhookConfigurations in memory, with resourceVersion checks."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.calls: list[str] = []
        self.before_replace: list[Any] = []
        self._rv = 0

    def _key(self, res: Any, name: str, namespace: str | None) -> tuple[str, str | None, str]:
        return (res.plural, namespace if res.namespaced else None, name)

    def put(self, res: Any, obj: dict[str, Any]) -> None:
        self._rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self._rv)
        meta = obj["metadata"]
        self.objects[self._key(res, meta["name"], meta.get("namespace"))] = obj

    async def get(self, res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        self.calls.append(f"get {res.plural}")
        obj = self.objects.get(self._key(res, name, namespace))
        if obj is None:
            raise k.Conflict("404")
        return copy.deepcopy(obj)

    async def create(self, res: Any, obj: Any) -> dict[str, Any]:
        self.calls.append(f"create {res.plural}")
        meta = obj["metadata"]
        if self._key(res, meta["name"], meta.get("namespace")) in self.objects:
            raise k.Conflict("409")
        self.put(res, obj)
        return dict(obj)

    async def replace(self, res: Any, obj: Any) -> dict[str, Any]:
        self.calls.append(f"replace {res.plural}")
        if self.before_replace:
            self.before_replace.pop(0)()
        meta = obj["metadata"]
        live = self.objects.get(self._key(res, meta["name"], meta.get("namespace")))
        if live is None or live["metadata"]["resourceVersion"] != meta.get("resourceVersion"):
            raise k.Conflict("409")
        self.put(res, obj)
        return dict(obj)

    async def json_patch(
        self, res: Any, name: str, namespace: str | None, ops: list[dict[str, Any]]
    ) -> dict[str, Any]:
        self.calls.append(f"patch {res.plural}")
        obj = self.objects[self._key(res, name, namespace)]
        for op in ops:
            parts = op["path"].strip("/").split("/")
            target: Any = obj
            for part in parts[:-1]:
                target = target[int(part)] if isinstance(target, list) else target[part]
            last = parts[-1]
            if op["op"] == "test":
                assert target[last] == op["value"]
            else:
                target[last] = op["value"]
        return obj


def install(kube: FakeKube, *, secret: bool = True, config: bool = True) -> None:
    if secret:  # as the chart makes it: no data
        kube.put(
            r.SECRETS,
            {"metadata": {"name": "gk-cert", "namespace": "gk-system"}, "type": "Opaque"},
        )
    if config:
        kube.put(
            r.WEBHOOK_CONFIGURATIONS,
            mutating_webhook_configuration(
                name="gk", service=("gk-system", "lws-gatekeeper-webhook", 443), ca_bundle=b""
            ),
        )
        kube.put(
            r.VALIDATING_WEBHOOK_CONFIGURATIONS,
            validating_webhook_configuration(
                name="gk", service=("gk-system", "lws-gatekeeper-webhook", 443), ca_bundle=b""
            ),
        )


def manager(kube: FakeKube, cert_dir: Path) -> SelfSignedCerts:
    return SelfSignedCerts(
        kube,
        namespace="gk-system",
        secret="gk-cert",
        service="lws-gatekeeper-webhook",
        webhook_config="gk",
        cert_dir=cert_dir,
    )


def stored(kube: FakeKube) -> dict[str, bytes]:
    secret = kube.objects[("secrets", "gk-system", "gk-cert")]
    return {key: base64.b64decode(v) for key, v in secret["data"].items()}


async def test_ensure_fills_the_secret_writes_the_files_and_patches_the_ca_bundle(tmp_path: Path) -> None:
    kube = FakeKube()
    install(kube)
    assert await manager(kube, tmp_path / "certs").ensure(NOW)
    data = stored(kube)
    assert (tmp_path / "certs" / TLS_CRT).read_bytes() == data[TLS_CRT]
    assert (tmp_path / "certs" / TLS_KEY).read_bytes() == data[TLS_KEY]
    assert stat.S_IMODE((tmp_path / "certs" / TLS_KEY).stat().st_mode) == 0o600
    config = kube.objects[("mutatingwebhookconfigurations", None, "gk")]
    bundle = base64.b64encode(data[CA_CRT]).decode()
    assert [h["clientConfig"]["caBundle"] for h in config["webhooks"]] == [bundle, bundle]
    # The patch changed nothing else of the configuration.
    expected = mutating_webhook_configuration(
        name="gk", service=("gk-system", "lws-gatekeeper-webhook", 443), ca_bundle=data[CA_CRT]
    )
    assert config["webhooks"] == expected["webhooks"]
    guard = kube.objects[("validatingwebhookconfigurations", None, "gk")]
    assert [h["clientConfig"]["caBundle"] for h in guard["webhooks"]] == [bundle] * 3

    # A second round (another replica, or the periodic check) writes nothing.
    kube.calls.clear()
    assert await manager(kube, tmp_path / "other").ensure(NOW + DAY)
    assert kube.calls == [
        "get secrets",
        "get mutatingwebhookconfigurations",
        "get validatingwebhookconfigurations",
    ]
    assert (tmp_path / "other" / TLS_CRT).read_bytes() == data[TLS_CRT]


async def test_a_reset_ca_bundle_is_restored(tmp_path: Path) -> None:
    """``helm upgrade`` without the live bundle (or someone's edit) is repaired on the next round."""
    kube = FakeKube()
    install(kube)
    gk = manager(kube, tmp_path)
    await gk.ensure(NOW)
    config = kube.objects[("mutatingwebhookconfigurations", None, "gk")]
    del config["webhooks"][1]["clientConfig"]["caBundle"]
    kube.calls.clear()
    await gk.ensure(NOW)
    assert "patch mutatingwebhookconfigurations" in kube.calls
    assert (
        config["webhooks"][1]["clientConfig"]["caBundle"] == config["webhooks"][0]["clientConfig"]["caBundle"]
    )


async def test_a_second_replica_uses_the_first_ones_certificates(tmp_path: Path) -> None:
    kube = FakeKube()
    install(kube)
    await manager(kube, tmp_path / "first").ensure(NOW)
    await manager(kube, tmp_path / "second").ensure(NOW)
    for name in (TLS_CRT, TLS_KEY, CA_CRT):
        assert (tmp_path / "first" / name).read_bytes() == (tmp_path / "second" / name).read_bytes()


async def test_a_replace_that_loses_the_race_rereads(tmp_path: Path) -> None:
    kube = FakeKube()
    install(kube)
    rival = fresh()

    def rival_writes() -> None:
        secret = kube.objects[("secrets", "gk-system", "gk-cert")]
        secret = copy.deepcopy(secret)
        secret["data"] = {key: base64.b64encode(v).decode() for key, v in rival.items()}
        kube.put(r.SECRETS, secret)

    kube.before_replace.append(rival_writes)
    await manager(kube, tmp_path).ensure(NOW)
    assert stored(kube) == rival
    assert (tmp_path / TLS_CRT).read_bytes() == rival[TLS_CRT]


async def test_without_a_secret_it_is_created_and_without_a_configuration_it_waits(tmp_path: Path) -> None:
    kube = FakeKube()
    install(kube, secret=False, config=False)
    assert not await manager(kube, tmp_path).ensure(NOW)
    assert "create secrets" in kube.calls
    assert (tmp_path / TLS_CRT).exists()


async def test_the_served_certificate_is_trusted_through_the_ca_bundle(tmp_path: Path) -> None:
    kube = FakeKube()
    install(kube)
    await manager(kube, tmp_path).ensure(dt.datetime.now(dt.UTC))
    runner = await start_webhook_server("127.0.0.1", 0, tmp_path / TLS_CRT, tmp_path / TLS_KEY)
    try:
        port = runner.addresses[0][1]
        config = kube.objects[("mutatingwebhookconfigurations", None, "gk")]
        bundle = base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"]).decode()
        client = ssl.create_default_context(cadata=bundle)
        # The API server calls <service>.<namespace>.svc.
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client, server_hostname="lws-gatekeeper-webhook.gk-system.svc"
        )
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        await writer.drain()
        answer = await reader.read()
        writer.close()
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok")
    finally:
        await runner.cleanup()


def test_run_refuses_self_signed_certificates_without_a_cert_dir() -> None:
    from click.testing import CliRunner

    from gatekeeper.cli import main

    result = CliRunner().invoke(main, ["run", "--self-signed-certs-secret=gk-cert"])
    assert result.exit_code == 2
    assert "--self-signed-certs-secret needs --cert-dir" in result.output
