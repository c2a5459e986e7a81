"""A `helm upgrade` upgrades the CRDs, from a release whose CRDs came from the chart's old crds/.

Why this exists: Helm installs a chart's ``crds/`` folder once and never again, so a field
added to a CRD later would never reach a cluster, and objects using it would lose it. The
chart now renders its CRDs as templates (``templates/crds/``, kept on uninstall). A user
upgrades from the chart as it was packaged before (CRDs in ``crds/``, which Helm does not own)
with one documented step, ``helm upgrade --take-ownership``. This test does exactly that on
a sandbox of its own (no gatekeeper runs; nothing here makes pods): the old chart, packaged
from the commit before the change, installs the CRDs; a Pool is stored; the upgrade is
refused without the step and taken with it, to a chart whose Pool CRD has a field more; a
Pool with that field is then stored and served whole; the uninstall leaves the CRDs and
every Pool.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gatekeeper_lab.sandbox.cluster import Sandbox

from .conftest import sandbox_base
from .test_chart import IMAGE_REPOSITORY
from .test_chart import helm as helm  # the module fixture

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "lws-gatekeeper"
OLD_CHART_COMMIT = "876af9aee82e1f52305835a6701941a32d99d654"
"""The last commit whose chart shipped its CRDs in crds/."""
CRDS = ("pools.lws-gatekeeper.io", "groupadmissions.lws-gatekeeper.io")
RELEASE, NAMESPACE = "gk", "lws-gatekeeper-system"
VALUES = [
    "--namespace", NAMESPACE, "--set", f"image.repository={IMAGE_REPOSITORY}",
    # Cluster-wide, its policies would hold nothing here: no gatekeeper runs, nothing is gated.
    "--set", "policies.gateProtection.enabled=false", "--set", "policies.poolLabel.enabled=false",
]  # fmt: skip


@pytest.fixture(scope="module")
def upgrade_sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """A sandbox with no gatekeeper and none of the project's CRDs: the chart brings them."""
    sb = Sandbox(Path(f"{sandbox_base(request.config)}-upgrade"), say=lambda m: print(m, flush=True))
    try:
        sb.up(nodes=0, gatekeeper=False)
        sb.kubectl("delete", "crd", *CRDS, "--ignore-not-found")
    except Exception as exc:  # the reason goes into the test's failure, never a skip
        pytest.fail(
            f"the upgrade sandbox could not start (CI={os.environ.get('CI', '')}): {exc}", pytrace=False
        )
    try:
        yield sb
    finally:
        if not request.config.getoption("--keep-sandbox"):
            sb.down()


def _old_chart(helm: Path, where: Path) -> Path:
    """The chart of ``OLD_CHART_COMMIT``, packaged (its links to gatekeeper/crds and policies/ resolved)."""
    archive = subprocess.run(
        [
            "git",
            "-C",
            str(ROOT),
            "archive",
            "--format=tar",
            OLD_CHART_COMMIT,
            "charts",
            "gatekeeper/crds",
            "policies",
        ],
        capture_output=True,
        check=False,
    )
    assert archive.returncode == 0, f"the old chart needs the repository's history: {archive.stderr.decode()}"
    tree = where / "old"
    tree.mkdir()
    (where / "old.tar").write_bytes(archive.stdout)
    with tarfile.open(where / "old.tar") as tar:
        tar.extractall(tree, filter="tar")
    assert (tree / "charts/lws-gatekeeper/crds").is_symlink(), "the old chart keeps its CRDs in crds/"
    return Path(_helm(helm, "package", tree / "charts/lws-gatekeeper", "--destination", where).split()[-1])


def _new_chart_with_a_field(where: Path) -> Path:
    """This chart, with one more field in the Pool CRD (``spec.description``), as a later
    version of it would add one."""
    chart = where / "new"
    shutil.copytree(CHART, chart, symlinks=False)
    crd_file = chart / "files/crds/pools.yaml"
    crd: dict[str, Any] = yaml.safe_load(crd_file.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["description"] = {
        "type": "string",
        "maxLength": 256,
        "description": "what the pool is for",
    }
    crd_file.write_text(yaml.safe_dump(crd, sort_keys=False))
    return chart


def _helm(helm: Path, *args: str | Path, ok: bool = True) -> str:
    res = subprocess.run([str(helm), *map(str, args)], capture_output=True, text=True, check=False)
    if ok:
        assert res.returncode == 0, f"helm {' '.join(map(str, args))}: {res.stderr}"
        return res.stdout
    assert res.returncode != 0, f"helm {' '.join(map(str, args))} was accepted"
    return res.stderr


def _pool(name: str, **spec: Any) -> str:
    body = {
        "apiVersion": "lws-gatekeeper.io/v1alpha1",
        "kind": "Pool",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"pool": name}, **spec},
    }
    return json.dumps(body)


def test_an_upgrade_from_the_crds_folder_upgrades_the_crds_and_keeps_every_pool(
    upgrade_sandbox: Sandbox, helm: Path, tmp_path: Path
) -> None:
    sb = upgrade_sandbox
    kubeconfig = f"--kubeconfig={sb.kubeconfig}"
    old = _old_chart(helm, tmp_path)
    _helm(helm, "install", RELEASE, old, kubeconfig, "--create-namespace", *VALUES)
    crd = json.loads(sb.kubectl("get", "crd", CRDS[0], "-o", "json").stdout)
    assert "app.kubernetes.io/managed-by" not in (crd["metadata"].get("labels") or {}), "crds/ is not Helm's"
    sb.kubectl("create", "-f", "-", input=_pool("before"))
    refused = sb.kubectl("create", "-f", "-", input=_pool("early", description="too soon"), check=False)
    assert refused.returncode != 0 and 'unknown field "spec.description"' in refused.stderr, refused.stderr

    new = _new_chart_with_a_field(tmp_path)
    said = _helm(helm, "upgrade", RELEASE, new, kubeconfig, *VALUES, ok=False)
    assert "invalid ownership metadata" in said and (CRDS[0] in said or CRDS[1] in said), said
    _helm(helm, "upgrade", RELEASE, new, kubeconfig, *VALUES, "--take-ownership")

    crd = json.loads(sb.kubectl("get", "crd", CRDS[0], "-o", "json").stdout)
    assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert schema["description"]["type"] == "string", "the upgrade upgraded the CRD"
    sb.kubectl("create", "-f", "-", input=_pool("after", description="inference, team a"))
    served = json.loads(sb.kubectl("get", "pool", "after", "-o", "json").stdout)
    assert served["spec"]["description"] == "inference, team a", "stored and served, not pruned"

    _helm(helm, "uninstall", RELEASE, kubeconfig, "--namespace", NAMESPACE)
    for name in CRDS:
        sb.kubectl("get", "crd", name)  # kept
    pools = json.loads(sb.kubectl("get", "pools", "-o", "json").stdout)["items"]
    assert sorted(p["metadata"]["name"] for p in pools) == ["after", "before"], "every Pool is kept"
