"""The kubectl plugin as krew installs it: ``lws-gatekeeper plugin build`` makes, from the
image's pinned wheels and without the Python index, one archive a platform holding one
executable (a PEX) and a krew manifest naming their SHA-256; built twice, it is the same
bytes; unpacked on a PATH with no Python package of the project, kubectl finds it and it
answers ``why`` against the sandbox with the documented exit codes."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import kr8s.asyncio
import yaml

from gatekeeper_lab.image.plugin import BIN, PYTHON, build_plugin

from .conftest import Cluster, MakeNodes, MakePool, admitted, eventually, records
from .test_tenant_pools import create, plain_lws, tolerate

ROOT = Path(__file__).resolve().parents[2]


async def test_the_plugin_krew_installs_answers_why(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    tmp_path: Path,
) -> None:
    assert cluster.sandbox is not None, "runs the sandbox's kubectl"
    python = shutil.which(PYTHON)
    assert python is not None, f"the plugin runs on {PYTHON}, which is not on PATH"
    url = "https://example.invalid/releases/v0.1.0"
    [archive], manifest = build_plugin(
        ROOT, tmp_path / "a", base_url=url, homepage="https://example.invalid", arches=["amd64"]
    )
    [again], _ = build_plugin(
        ROOT, tmp_path / "b", base_url=url, homepage="https://example.invalid", arches=["amd64"]
    )
    assert again.sha256 == archive.sha256, "the same source builds the same archive"
    plugin = yaml.safe_load(manifest.read_text())
    assert (plugin["kind"], plugin["metadata"]["name"]) == ("Plugin", "lws-gatekeeper")
    [platform] = plugin["spec"]["platforms"]
    assert platform["selector"]["matchLabels"] == {"os": "linux", "arch": "amd64"}
    assert platform["uri"] == f"{url}/{archive.path.name}" and platform["bin"] == BIN
    assert platform["sha256"] == hashlib.sha256(archive.path.read_bytes()).hexdigest() == archive.sha256
    assert PYTHON in plugin["spec"]["caveats"]

    unpacked = tmp_path / "krew"
    with tarfile.open(archive.path) as tar:
        assert [(m.name, m.mode) for m in tar.getmembers()] == [(BIN, 0o755)]
        tar.extractall(unpacked, filter="data")
    env = {
        "PATH": os.pathsep.join(
            [str(unpacked), str(cluster.sandbox.bin_dir), str(Path(python).parent), "/usr/bin:/bin"]
        ),
        "HOME": os.environ.get("HOME", str(tmp_path)),
    }

    def why(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kubectl", "lws-gatekeeper", "why", *args, f"--kubeconfig={cluster.kubeconfig}"],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip

    nodes = await fake_nodes(2, gpus=1)
    pool = await make_pool(nodes, tolerations=tolerate(nodes.id))
    await create(api, namespace, plain_lws("vllm", pool, replicas=1))

    async def admitted_group() -> bool:
        recs = await records(api, namespace)
        return len(recs) == 1 and admitted(recs[0])

    await eventually(admitted_group, what="the LWS's one group admitted")
    answer = why("vllm", "-n", namespace)
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.startswith(f"LeaderWorkerSet {namespace}/vllm: 1 group of 2 pods"), answer.stdout
    missing = why("nothing", "-n", namespace)
    assert missing.returncode == 2 and "not found" in missing.stderr and "Traceback" not in missing.stderr
