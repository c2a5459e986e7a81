"""``lws-gatekeeper render`` output against the real API server: the objects are accepted.

A server-side dry run runs everything a real create does short of storing: the CRD's
schema and CEL rules, defaulting, strict field validation (an unknown or misspelt field
is an error, not silently pruned) and admission. The sandbox has the Pool CRD; Volcano's
Queue CRD comes from the pinned volcano.sh/volcano module (component ``volcano-crds``);
the Kueue objects are dry-run in tests/e2e/test_kueue_sandbox.py, against the running
Kueue and its webhooks.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gatekeeper.render import parse_pools, render_stream
from gatekeeper.render.cli import render_cmd
from gatekeeper_lab.sandbox import build

from .conftest import Cluster

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pools.yaml"


def test_the_example_pools_are_accepted(cluster: Cluster) -> None:
    stream = render_stream(parse_pools(EXAMPLE.read_text(), str(EXAMPLE)), "pools")
    out = cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--dry-run=server",
        "--field-manager=render-e2e",
        "-f",
        "-",
        input=stream,
    )
    assert out.splitlines() == [
        "pool.lws-gatekeeper.io/on-demand serverside-applied (server dry run)",
        "pool.lws-gatekeeper.io/reserved-h100 serverside-applied (server dry run)",
    ]


def test_the_command_writes_files_the_api_server_accepts(cluster: Cluster, tmp_path: Path) -> None:
    # The example under names of its own: `create` must not meet a Pool another test made.
    tag = "x" + uuid.uuid4().hex[:5]  # a letter first: never read as a number in YAML
    names = [f"on-demand-{tag}", f"reserved-h100-{tag}"]
    pools_file = tmp_path / "pools.yaml"
    pools_file.write_text(
        EXAMPLE.read_text()
        .replace("name: on-demand", f"name: {names[0]}")
        .replace("name: reserved-h100", f"name: {names[1]}")
    )
    out_dir = tmp_path / "manifests"
    result = CliRunner().invoke(render_cmd, [str(pools_file), "-o", str(out_dir)])
    assert result.exit_code == 0, result.output
    out = cluster.kubectl(
        "create",
        "--dry-run=server",
        "--validate=strict",
        "-o",
        "json",
        "-f",
        str(out_dir),
    )
    items = _json_stream(out)
    assert sorted(i["metadata"]["name"] for i in items) == names
    # What the API server would store is what was rendered (nothing pruned or defaulted away).
    for item in items:
        rendered = yaml.safe_load((out_dir / f"pools-{item['metadata']['name']}.yaml").read_text())
        assert item["spec"] == rendered["spec"]


def test_the_dry_run_does_check_the_schema(cluster: Cluster) -> None:
    """The proof above means something: a wrong value in the same objects is refused."""
    doc = yaml.safe_load(render_stream(parse_pools(EXAMPLE.read_text()), "pools").split("---\n")[0])
    doc["spec"]["queueingStrategy"] = "Fastest"
    with pytest.raises(
        AssertionError, match=re.escape('spec.queueingStrategy: Unsupported value: "Fastest"')
    ):
        cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(doc))


def _json_stream(text: str) -> list[dict[str, Any]]:
    """kubectl prints one JSON object per created object, one after the other."""
    decoder = json.JSONDecoder()
    items: list[dict[str, Any]] = []
    at = 0
    text = text.strip()
    while at < len(text):
        item, at = decoder.raw_decode(text, at)
        items.append(item)
        while at < len(text) and text[at].isspace():
            at += 1
    return items


def test_the_volcano_queues_are_accepted(cluster: Cluster) -> None:
    crds = build.build_all(["volcano-crds"])["volcano-crds"].files / "config" / "crd" / "volcano" / "bases"
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=render-e2e",
        "-f", str(crds / "scheduling.volcano.sh_queues.yaml"),
    )  # fmt: skip
    cluster.kubectl(
        "wait", "--for=condition=Established", "crd/queues.scheduling.volcano.sh", "--timeout=60s"
    )
    stream = render_stream(parse_pools(EXAMPLE.read_text(), str(EXAMPLE)), "volcano")
    out = cluster.kubectl(
        "apply", "--server-side", "--dry-run=server", "--field-manager=render-e2e", "-f", "-",
        input=stream,
    )  # fmt: skip
    assert out.splitlines() == [
        "queue.scheduling.volcano.sh/on-demand serverside-applied (server dry run)",
        "queue.scheduling.volcano.sh/reserved-h100 serverside-applied (server dry run)",
    ]
