"""The project's image runs as the chart runs it and admits whole groups, as the process on the host does.

Why this exists: the chart runs ``lws-gatekeeper`` from the project's image as user 65532,
with a read-only root file system, a tmpfs at /tmp, its certificate Secret at /certs and
its ServiceAccount's token; nothing else proves that the program works so (a file it
writes, a module it cannot import, a permission it lacks). So the image is built here
(``gatekeeper_lab.image.build``, cached by its inputs: a cold build in CI, a cache hit after),
unpacked, and the sandbox's gatekeeper is started from it with the Deployment that
``helm template`` renders (``Sandbox.start_gatekeeper(image=...)``, run by
``lab/gatekeeper_lab/sandbox/container.py`` in user and mount namespaces): its command and args,
its environment, its user and mounts, in-cluster configuration with a token of the
chart's ServiceAccount and the chart's RBAC. The values set are only those the sandbox
needs: free ports on loopback, and ``certManager.enabled=true`` so that the webhook reads
its certificate from the mounted Secret (here the sandbox's loopback certificate).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kr8s.asyncio
import pytest
import yaml

from gatekeeper.core.kube.keys import SCHEDULING_GATE
from gatekeeper_lab.image import build, emulate, oci
from gatekeeper_lab.sandbox import gatekeeper as gk
from gatekeeper_lab.sandbox.cluster import GATEKEEPER_NAMESPACE, Sandbox
from gatekeeper_lab.sandbox.observe import GROUP_INDEX_LABEL, LWS_NAME_LABEL
from gatekeeper_lab.sandbox.process import free_ports
from gatekeeper_lab.sandbox.replay import list_raw, settle

from .conftest import Cluster, MakeNodes, MakePool, admitted, condition, gatekeeper_running_as, records
from .test_admission import create_lws, lws_body
from .test_chart import IMAGE_REPOSITORY, gatekeepers, installed, template
from .test_chart import helm as helm  # the module fixture

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def image() -> build.Built:
    """The image of this tree: built here, or a cache hit of the same inputs. A failure fails."""
    started = time.monotonic()
    built = build.build(ROOT, say=lambda m: print(m, flush=True))
    print(
        f"image {built.digest} ({'cached' if built.cached else 'built'} in {time.monotonic() - started:.1f}s)"
    )
    return built


@pytest.fixture
def rootfs(image: build.Built, tmp_path: Path) -> Path:
    root = tmp_path / "rootfs"
    oci.unpack(image.layout, image.tag, root)
    root.chmod(0o755)
    tmp_path.chmod(0o755)
    return root


@pytest.fixture
def from_image(cluster: Cluster, helm: Path, image: build.Built, rootfs: Path) -> Iterator[Sandbox]:
    """The sandbox's gatekeeper replaced by the chart's Deployment run from the image (with the
    chart's RBAC), and back to the host process afterwards."""
    sb = cluster.sandbox
    assert sb is not None, "the image test runs the sandbox's gatekeeper from the image"
    webhook, metrics = free_ports(2)
    objects = template(
        helm, "lws-gatekeeper", GATEKEEPER_NAMESPACE,
        "--set", f"manager.ports.webhook={webhook}", "--set", f"manager.ports.metrics={metrics}",
        "--set", "certManager.enabled=true",
    )  # fmt: skip
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == (
        f"{IMAGE_REPOSITORY}:{image.tag}"
    ), "the chart's image tag is its appVersion, the image's own tag"
    config = oci.read_config(image.layout, image.tag)["config"]
    with (
        installed(cluster, [*gatekeepers(objects), *metrics_reader(objects)]),
        gatekeeper_running_as(sb, image=gk.FromImage(rootfs=rootfs, config=config, deployment=deployment)),
    ):
        yield sb


def metrics_reader(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chart's ``<release>-metrics-reader`` ClusterRole (unbound: the test binds it)."""
    return [
        o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-metrics-reader")
    ]


def _proc(pid: int, what: str) -> str:
    return Path(f"/proc/{pid}/{what}").read_text()


def _gatekeeper_pid(sb: Sandbox) -> int:
    """The program under the launcher (its only child)."""
    launcher = int(sb.state()["processes"][gk.COMPONENT]["pid"])
    children = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def runs_as_the_chart_runs_it(sb: Sandbox, tmp_path: Path) -> None:
    """The running program is the image's, as the chart's user and ServiceAccount, confined."""
    pid = _gatekeeper_pid(sb)
    # The image's program, as the chart's user, with no capability and no privilege to gain.
    cmdline = _proc(pid, "cmdline").split("\0")
    assert cmdline[:3] == ["/usr/bin/python3.11", "-I", "/usr/local/bin/lws-gatekeeper"], cmdline
    assert "--identity=gatekeeper" in cmdline and "--cert-dir=/certs" in cmdline, cmdline
    status = dict(line.split(":\t", 1) for line in _proc(pid, "status").splitlines() if ":\t" in line)
    assert status["Uid"].split()[:2] == ["65532", "65532"] and status["Gid"].split()[0] == "65532"
    caps = {k: int(status[k], 16) for k in ("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb")}
    assert caps == dict.fromkeys(caps, 0), caps
    assert status["NoNewPrivs"].strip() == "1"
    # Its root is the image's, read-only; /tmp is a tmpfs, the Secret and the token are read-only.
    mounts = {fields[4]: fields for fields in (ln.split() for ln in _proc(pid, "mountinfo").splitlines())}
    assert "ro" in mounts["/"][5].split(","), mounts["/"]
    assert mounts["/tmp"][-3] == "tmpfs" and "rw" in mounts["/tmp"][5].split(","), mounts["/tmp"]
    assert "ro" in mounts["/certs"][5].split(",")
    assert "ro" in mounts[gk.SERVICE_ACCOUNT_DIR][5].split(",")
    root = Path(f"/proc/{pid}/root")
    assert (root / "usr/local/bin/lws-gatekeeper").read_text().startswith("#!/usr/bin/python3.11")
    environ = dict(e.split("=", 1) for e in _proc(pid, "environ").split("\0") if "=" in e)
    assert "KUBECONFIG" not in environ and environ["POD_NAMESPACE"] == GATEKEEPER_NAMESPACE
    assert environ["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    # The token it reads authenticates as the chart's ServiceAccount.
    token = (root / gk.SERVICE_ACCOUNT_DIR.lstrip("/") / "token").read_text()
    admin = yaml.safe_load(sb.kubeconfig.read_text())
    server = admin["clusters"][0]
    config = {
        "apiVersion": "v1", "kind": "Config", "clusters": [server],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": server["name"], "user": "sa"}}],
        "current-context": "sa",
    }  # fmt: skip
    kubeconfig = tmp_path / "token.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    who = sb.kubectl(
        f"--kubeconfig={kubeconfig}", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"
    )
    assert who.stdout == f"system:serviceaccount:{GATEKEEPER_NAMESPACE}:lws-gatekeeper"


async def test_the_image_admits_whole_groups_run_as_the_chart_runs_it(
    api: kr8s.asyncio.Api,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    from_image: Sandbox,
    tmp_path: Path,
) -> None:
    sb = from_image
    runs_as_the_chart_runs_it(sb, tmp_path)

    # An LWS of two groups (2 pods of 1 GPU each) on a pool of two 1-GPU nodes: group 0 runs whole.
    nodes = await fake_nodes(2, gpus=1)
    pool = await make_pool(nodes)
    await create_lws(api, namespace, lws_body("vllm", pool, nodes, replicas=2))
    verdict = await settle(api, namespace, "vllm", expected_pods=4, size=2, timeout=120)
    assert sorted(g.index for g in verdict.groups.values() if g.whole(2)) == [0]
    waiting = verdict.groups[("vllm", 1)]
    assert (waiting.pods, waiting.gated, waiting.bound) == (2, 2, 0), "group 1 waits whole, gated"
    recs = await records(api, namespace)
    assert admitted(recs[0]) and not admitted(recs[1])
    assert condition(recs[1])["reason"] == "WaitingForQuota"
    pods = await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: "vllm"})
    for pod in pods:  # the webhook gated every pod; the admitted group's gates were lifted
        gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
        want = [] if pod["metadata"]["labels"][GROUP_INDEX_LABEL] == "0" else [SCHEDULING_GATE]
        assert gates == want, pod["metadata"]["name"]
    # It holds the chart's Lease under its pod name.
    lease: dict[str, Any] = json.loads(
        sb.kubectl("get", "lease", "lws-gatekeeper", "-n", GATEKEEPER_NAMESPACE, "-o", "json").stdout
    )
    assert lease["spec"]["holderIdentity"] == "gatekeeper"
    metrics_only_for_a_reader(sb, namespace)


def metrics_only_for_a_reader(sb: Sandbox, namespace: str) -> None:
    """The chart serves /metrics over HTTPS to a token allowed ``get /metrics`` only: a
    ServiceAccount bound to ``<release>-metrics-reader`` reads them; one not bound, a made-up
    token and no token are refused; the probes' endpoints stay open."""
    for account in ("scraper", "nosy"):
        sb.kubectl("create", "serviceaccount", account, "-n", namespace)
    sb.kubectl(
        "create", "clusterrolebinding", f"scraper-{namespace}", "--clusterrole=lws-gatekeeper-metrics-reader",
        f"--serviceaccount={namespace}:scraper",
    )  # fmt: skip
    try:
        scraper, nosy = (
            sb.kubectl("create", "token", a, "-n", namespace).stdout.strip() for a in ("scraper", "nosy")
        )
        port = sb.state()["processes"][gk.COMPONENT]["metrics"]
        assert sb.state()["processes"][gk.COMPONENT]["metrics_scheme"] == "https"

        def status(path: str, token: str | None) -> tuple[int, str]:
            request = urllib.request.Request(f"https://127.0.0.1:{port}{path}")
            if token is not None:
                request.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(request, timeout=10, context=gk.UNVERIFIED) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()

        assert status("/healthz", None)[0] == 200 and status("/readyz", None)[0] == 200
        assert status("/metrics", None)[0] == 401
        assert status("/metrics", "made-up")[0] == 401
        code, said = status("/metrics", nosy)
        assert code == 403 and f"system:serviceaccount:{namespace}:nosy may not get /metrics" in said, said
        code, text = status("/metrics", scraper)
        assert code == 200 and "lws_gatekeeper_build_info{" in text, text[:200]
        print(f"\n/metrics over HTTPS: no token 401, made-up 401, unbound 403 ({said.strip()}), reader 200")
    finally:
        sb.kubectl("delete", "clusterrolebinding", f"scraper-{namespace}", "--ignore-not-found")


def _elf_machine(path: Path) -> int:
    """An ELF file's ``e_machine`` (62: x86-64, 183: AArch64)."""
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF", f"{path} is not an ELF file"
    return int.from_bytes(head[18:20], "little")


def test_the_image_is_one_index_of_an_amd64_and_an_arm64_image(image: build.Built) -> None:
    """A node pulls the tag's index and runs the image of its own platform; the project's own
    layer is the same bytes in both, stored once."""
    index = oci.read_index(image.layout, image.tag)
    platforms = {m["platform"]["architecture"]: m for m in index["manifests"]}
    assert platforms["amd64"]["platform"] == {"architecture": "amd64", "os": "linux"}
    assert platforms["arm64"]["platform"] == {"architecture": "arm64", "os": "linux", "variant": "v8"}
    assert {a: m["digest"] for a, m in platforms.items()} == dict(image.manifests)
    layers = {
        arch: json.loads((image.layout / "blobs/sha256" / digest.split(":")[1]).read_text())["layers"]
        for arch, digest in image.manifests.items()
    }
    assert layers["amd64"][-1] == layers["arm64"][-1], "the project's layer is shared"
    assert layers["amd64"][0] != layers["arm64"][0], "each has the Debian packages of its own architecture"
    for arch in ("amd64", "arm64"):
        assert oci.read_config(image.layout, image.tag, arch)["architecture"] == arch


def test_the_arm64_image_runs_its_own_interpreter_and_gatekeeper_under_emulation(
    image: build.Built, tmp_path: Path
) -> None:
    """The arm64 image's own interpreter (an AArch64 program), libraries, bytecode and
    gatekeeper run, as the chart's user inside the image's root, under Debian's emulator."""
    root = tmp_path / "arm64"
    oci.unpack(image.layout, image.tag, root, "arm64")
    root.chmod(0o755)
    assert _elf_machine(root / "usr/bin/python3.11") == 183
    entry = ["/usr/bin/python3.11", "-I", "/usr/local/bin/lws-gatekeeper"]

    version = emulate.run_emulated(root, "arm64", [*entry, "--version"])
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"lws-gatekeeper, version {image.tag}"

    machine = emulate.run_emulated(
        root, "arm64", ["/usr/bin/python3.11", "-I", "-c", "import platform; print(platform.machine())"]
    )
    assert machine.stdout.strip() == "aarch64", machine.stderr

    # The bytecode compiled at build time is what it loads (nothing is compiled again, and the
    # root is not writable by the chart's user).
    verbose = emulate.run_emulated(
        root, "arm64", ["/usr/bin/python3.11", "-I", "-v", "-c", "import gatekeeper.cli"]
    )
    assert verbose.returncode == 0, verbose.stderr
    site = "/usr/local/lib/python3.11/dist-packages"
    assert f"code object from '{site}/gatekeeper/__pycache__/cli.cpython-311.pyc'" in verbose.stderr

    pools = (ROOT / "examples/pools.yaml").read_text()
    (root / "tmp/pools.yaml").write_text(pools)
    rendered = emulate.run_emulated(
        root, "arm64", [*entry, "render", "--backend", "kueue", "/tmp/pools.yaml"]
    )
    assert rendered.returncode == 0, rendered.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(rendered.stdout) if d]
    assert "ClusterQueue" in kinds and "LocalQueue" in kinds, kinds
