"""The end-to-end suite on an existing cluster (``--kubeconfig``): which tests cannot run
there, and that they skip with their reason rather than fail or pass untested."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cluster, not_on_an_existing_cluster


@dataclass
class Item:
    fixturenames: list[str] = field(default_factory=list)


@pytest.mark.parametrize(
    ("fixtures", "why"),
    [
        (["cluster", "api", "namespace", "fake_nodes"], None),
        (["api", "namespace", "cluster"], None),
        (["kueue_sandbox"], "runs on a sandbox of its own (kueue_sandbox), not on an existing cluster"),
        (["cluster", "shared_hub"], "runs on a sandbox of its own (shared_hub), not on an existing cluster"),
        (["prometheus_sandbox", "tmp_path"], "runs on a sandbox of its own (prometheus_sandbox)"),
        (["tmp_path"], "starts sandboxes or hubs of its own, or needs none"),
    ],
)
def test_which_tests_skip_on_an_existing_cluster(fixtures: list[str], why: str | None) -> None:
    said = not_on_an_existing_cluster(Item(fixtures))  # type: ignore[arg-type]
    if why is None:
        assert said is None
    else:
        assert said is not None and said.startswith(why), said


def test_a_test_that_asks_for_the_sandbox_skips_on_an_existing_cluster(tmp_path: Path) -> None:
    existing = Cluster(kubeconfig=tmp_path / "kubeconfig", kind="existing")
    with pytest.raises(pytest.skip.Exception, match="needs the sandbox's own processes or files"):
        _ = existing.sandbox
    assert existing.kubectl_binary == os.environ.get("KUBECTL", "kubectl")
    own: Any = object()
    assert Cluster(kubeconfig=tmp_path / "k", kind="sandbox", own=own).sandbox is own
