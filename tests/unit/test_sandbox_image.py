"""The chart's Deployment read as a kubelet reads it, for the gatekeeper run from the image.

Why this exists: ``tests/e2e/test_image.py`` runs the gatekeeper from the image "as the
chart runs it"; that claim rests on ``gatekeeper_lab.sandbox.gatekeeper.container_spec``
reading the Deployment ``helm template`` renders as a kubelet would. These tests hold it
to that on the real rendered Deployment, without a cluster: command and args with
``$(POD_NAME)`` expanded, the environment (image, pod, in-cluster), the user from the
security context, tmpfs for the emptyDir, the Secret and the token read-only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gatekeeper_lab.sandbox.container import Bind
from gatekeeper_lab.sandbox.gatekeeper import SERVICE_ACCOUNT_DIR, FromImage, container_spec
from tests.unit.test_chart import helm as helm  # the session fixture
from tests.unit.test_chart import template

CONFIG = {
    "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"],
    "Entrypoint": ["/usr/local/bin/lws-gatekeeper"],
    "Cmd": ["run"],
    "User": "1000:1000",
    "WorkingDir": "/home/nonroot",
}


def deployment(helm: Path, *values: str) -> dict[str, Any]:
    objects = template(helm, "--set", "certManager.enabled=true", *values)
    return next(o for o in objects if o["kind"] == "Deployment")


def spec_of(d: dict[str, Any], tmp_path: Path) -> Any:
    return container_spec(
        FromImage(rootfs=tmp_path / "rootfs", config=CONFIG, deployment=d),
        "gk-0",
        apiserver_port=6443,
        folder=tmp_path / "volumes",
        secret_files={"tls.crt": b"CRT", "tls.key": b"KEY"},
        token="TOKEN",
        ca=b"CA",
    )


def test_the_chart_deployment_as_a_kubelet_runs_it(helm: Path, tmp_path: Path) -> None:
    d = deployment(helm, "--set", "manager.ports.metrics=18080")
    spec = spec_of(d, tmp_path)
    assert spec.argv[:2] == ["lws-gatekeeper", "run"]  # the chart's command, not the image's
    assert "--identity=gk-0" in spec.argv, spec.argv  # $(POD_NAME)
    assert "--metrics-port=18080" in spec.argv and "--cert-dir=/certs" in spec.argv
    assert (spec.uid, spec.gid, spec.read_only) == (65532, 65532, True)  # not the image's 1000
    namespace = d["metadata"]["namespace"]
    assert spec.env["POD_NAME"] == "gk-0" and spec.env["POD_NAMESPACE"] == namespace
    assert spec.env["PATH"] == "/usr/local/bin:/usr/bin:/bin"  # from the image
    assert (spec.env["KUBERNETES_SERVICE_HOST"], spec.env["KUBERNETES_SERVICE_PORT"]) == ("127.0.0.1", "6443")
    assert "KUBECONFIG" not in spec.env
    assert spec.tmpfs == ["/tmp"]
    certs, account = spec.binds
    assert certs == Bind(str(tmp_path / "volumes/certs"), "/certs", True)
    assert account == Bind(str(tmp_path / "volumes/serviceaccount"), SERVICE_ACCOUNT_DIR, True)
    assert (Path(account.source) / "token").read_text() == "TOKEN"
    assert (Path(account.source) / "namespace").read_text() == namespace
    assert (Path(certs.source) / "tls.key").stat().st_mode & 0o777 == 0o644
    assert spec.workdir == "/home/nonroot"


def test_self_signed_certificates_make_certs_a_writable_tmpfs(helm: Path, tmp_path: Path) -> None:
    d = deployment(helm, "--set", "certManager.enabled=false")
    spec = spec_of(d, tmp_path)
    assert spec.tmpfs == ["/tmp", "/certs"]  # both emptyDirs
    assert [b.target for b in spec.binds] == [SERVICE_ACCOUNT_DIR]
    assert any(a.startswith("--self-signed-certs-secret=") for a in spec.argv)
