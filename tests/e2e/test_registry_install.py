"""The chart and the image installed from an OCI registry, as Kueue users install Kueue.

Why this exists: a user does not build the gatekeeper; they pull it. So the project's image
(its OCI layout, built as ``test_image.py`` builds it) is pushed to the sandbox's registry
(``sandbox up --with-registry``: go-containerregistry's, ``registry.py``) with ``crane
push``, and the chart, packaged by ``helm package``, with ``helm push``. Then everything
comes from the registry only: the chart is rendered from ``oci://`` at its version, with the
image named by the digest the registry gave; that digest is the one the build wrote (an
image index: an amd64 and an arm64 image, each served to its platform); the amd64
image's files are exported from the registry by that digest (``crane export``) and the
sandbox's gatekeeper is started from them, as the chart's Deployment runs it, with the
chart's RBAC; it admits a whole group and keeps the next waiting. Every installation the
chart makes (the ``pools``, ``kueue`` and ``volcano`` backends, and a member of a hub of
shared Reservations) renders from ``oci://`` exactly as from the source, and a ``helm
install`` of each from ``oci://`` at that version makes a release whose Deployment names the
image by digest and runs that backend.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import kr8s.asyncio
import yaml

from gatekeeper.core.kube.keys import SCHEDULING_GATE
from gatekeeper_lab.image import build
from gatekeeper_lab.sandbox import gatekeeper as gk
from gatekeeper_lab.sandbox.cluster import GATEKEEPER_NAMESPACE, Sandbox
from gatekeeper_lab.sandbox.observe import LWS_NAME_LABEL
from gatekeeper_lab.sandbox.process import free_ports
from gatekeeper_lab.sandbox.replay import list_raw, settle

from .conftest import Cluster, MakeNodes, MakePool, admitted, gatekeeper_running_as, records
from .test_admission import create_lws, lws_body
from .test_chart import gatekeepers, installed
from .test_chart import helm as helm  # the module fixture
from .test_image import image as image  # the module fixture
from .test_image import runs_as_the_chart_runs_it

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "lws-gatekeeper"
REPOSITORY = "lws-gatekeeper/lws-gatekeeper"


def _run(*argv: str | Path, stdin: bytes | None = None) -> str:
    res = subprocess.run([str(a) for a in argv], input=stdin, capture_output=True, check=False)
    assert res.returncode == 0, f"{' '.join(map(str, argv))}: {res.stderr.decode(errors='replace')}"
    return res.stdout.decode(errors="replace")


def _export(crane: Path, ref: str, rootfs: Path) -> None:
    """The image's file system as the registry serves it (its layers flattened by crane)."""
    rootfs.mkdir()
    argv = [str(crane), "export", "--insecure", "--platform", "linux/amd64", ref, "-"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            tar.extractall(rootfs, filter="tar")
    assert proc.returncode == 0, f"crane export {ref}: exit {proc.returncode}"
    rootfs.chmod(0o755)


def _installs_from_the_registry(
    cluster: Cluster, helm: Path, source: str, version: str, namespace: str, image: list[str], pulled: str
) -> None:
    """``helm install oci://... --version`` with ``image`` (the image's values, and a backend's):
    a release, its Deployment naming the image by digest and running the backend; then
    uninstalled. As ``test_chart.test_helm_install_and_uninstall``: its webhook calls a
    Service nobody serves (no image runs here) and fails closed, so it lives only until the
    uninstall, before this test makes any opted-in pod; its gate and pool-label policies stay
    off (cluster-wide they would refuse the sandbox's gatekeeper meanwhile), and the sandbox's
    CRDs are not Helm's (``test_chart_upgrade.py`` adopts such CRDs)."""
    where = ["--kubeconfig", str(cluster.kubeconfig), "--namespace", namespace]
    off = [
        "--set", "policies.gateProtection.enabled=false", "--set", "policies.poolLabel.enabled=false",
        "--set", "crds.enabled=false",
    ]  # fmt: skip
    try:
        said = _run(
            helm, "install", "from-oci", source, "--version", version, "--plain-http", *where, *image, *off
        )
        assert "STATUS: deployed" in said, said
        live = json.loads(
            cluster.kubectl("get", "deployment", "from-oci-lws-gatekeeper", "-n", namespace, "-o", "json")
        )
        assert live["spec"]["template"]["spec"]["containers"][0]["image"] == pulled
        backend = next((v.split("=", 1)[1] for v in image if v.startswith("backend=")), "pools")
        assert f"--backend={backend}" in live["spec"]["template"]["spec"]["containers"][0]["args"]
    finally:
        _run(helm, "uninstall", "from-oci", *where)


#: Each installation the chart makes: every backend, and a member of a hub of shared Reservations.
INSTALLATIONS = {
    "pools": [],
    "kueue": ["--set", "backend=kueue"],
    "volcano": ["--set", "backend=volcano"],
    "pools, a hub member": [
        "--set", "hub.clusterName=cluster-a", "--set", "hub.kubeconfigSecret=hub-member",
        "--set", "hub.sharedReservationCheck=true",
    ],
}  # fmt: skip


def _every_backend_renders_from_the_registry(
    helm: Path, source: str, version: str, sets: list[str], pulled: str
) -> None:
    """Each installation rendered from ``oci://`` is the one the source chart renders, object
    for object, and runs the image the registry serves, with its backend's flags."""
    for name, values in INSTALLATIONS.items():
        common = ["template", "lws-gatekeeper", "--namespace", GATEKEEPER_NAMESPACE, *sets, *values]
        pulled_text = _run(helm, *common[:2], source, "--version", version, "--plain-http", *common[2:])
        local_text = _run(helm, *common[:2], CHART, *common[2:])
        from_registry = [d for d in yaml.safe_load_all(pulled_text) if d]
        assert from_registry == [d for d in yaml.safe_load_all(local_text) if d], name
        deployment = next(o for o in from_registry if o["kind"] == "Deployment")
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert container["image"] == pulled, name
        backend = next((v.split("=", 1)[1] for v in values if v.startswith("backend=")), "pools")
        assert f"--backend={backend}" in container["args"], (name, container["args"])
        if "hub" in name:
            assert "--cluster-name=cluster-a" in container["args"], container["args"]
            assert "--shared-reservation-check" in container["args"], container["args"]


async def test_the_chart_and_the_image_install_from_an_oci_registry(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    helm: Path,
    image: build.Built,
    tmp_path: Path,
) -> None:
    sb = cluster.sandbox
    assert isinstance(sb, Sandbox), "the registry runs in the sandbox"
    sb.up(with_registry=True)  # added to the running sandbox
    registry = sb.registry_address()
    crane = sb.bin_dir / "crane"

    # Push the image and the chart.
    tagged = f"{registry}/{REPOSITORY}:{image.tag}"
    _run(crane, "push", "--insecure", image.layout, tagged)
    digest = _run(crane, "digest", "--insecure", tagged).strip()
    assert digest == image.digest, "the registry serves the image index the build wrote, byte for byte"
    served = json.loads(_run(crane, "manifest", "--insecure", tagged))
    assert {m["platform"]["architecture"]: m["digest"] for m in served["manifests"]} == dict(image.manifests)
    for arch, manifest in image.manifests.items():
        by_platform = _run(crane, "digest", "--insecure", "--platform", f"linux/{arch}", tagged).strip()
        assert by_platform == manifest, f"a {arch} node pulls the {arch} image"
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    packaged = _run(helm, "package", CHART, "--destination", tmp_path).strip().rsplit(" ", 1)[-1]
    pushed = _run(helm, "push", packaged, f"oci://{registry}/charts", "--plain-http")
    print(pushed)
    tags = _run(crane, "ls", "--insecure", f"{registry}/charts/lws-gatekeeper").split()
    assert tags == [chart["version"]], tags

    # Everything from here comes from the registry.
    webhook, metrics = free_ports(2)
    values = {
        "image.repository": f"{registry}/{REPOSITORY}",
        "image.digest": digest,
        "manager.ports.webhook": str(webhook),
        "manager.ports.metrics": str(metrics),
        "certManager.enabled": "true",
    }
    sets = [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]
    source = f"oci://{registry}/charts/lws-gatekeeper"
    text = _run(
        helm, "template", "lws-gatekeeper", source, "--version", chart["version"],
        "--plain-http", "--namespace", GATEKEEPER_NAMESPACE, *sets,
    )  # fmt: skip
    rendered = [doc for doc in yaml.safe_load_all(text) if doc]
    deployment = next(o for o in rendered if o["kind"] == "Deployment")
    pulled = f"{registry}/{REPOSITORY}@{digest}"
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == pulled
    _every_backend_renders_from_the_registry(helm, source, chart["version"], sets, pulled)
    for values in INSTALLATIONS.values():
        _installs_from_the_registry(
            cluster, helm, source, chart["version"], namespace, [*sets[:4], *values], pulled
        )
    rootfs = tmp_path / "rootfs"
    _export(crane, pulled, rootfs)
    tmp_path.chmod(0o755)  # noqa: ASYNC240 (the launcher, as the chart's user, walks down to the root)
    config: dict[str, Any] = json.loads(
        _run(crane, "config", "--insecure", "--platform", "linux/amd64", pulled)
    )["config"]

    with (
        installed(cluster, gatekeepers(rendered)),
        gatekeeper_running_as(sb, image=gk.FromImage(rootfs=rootfs, config=config, deployment=deployment)),
    ):
        runs_as_the_chart_runs_it(sb, tmp_path)
        nodes = await fake_nodes(2, gpus=1)
        pool = await make_pool(nodes)
        await create_lws(api, namespace, lws_body("vllm", pool, nodes, replicas=2))
        verdict = await settle(api, namespace, "vllm", expected_pods=4, size=2, timeout=120)
        assert sorted(g.index for g in verdict.groups.values() if g.whole(2)) == [0]
        recs = await records(api, namespace)
        assert admitted(recs[0]) and not admitted(recs[1])
        pods = await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: "vllm"})
        gated = sorted(
            p["metadata"]["name"]
            for p in pods
            if SCHEDULING_GATE in [g["name"] for g in p["spec"].get("schedulingGates") or []]
        )
        assert gated == ["vllm-1", "vllm-1-1"], gated
