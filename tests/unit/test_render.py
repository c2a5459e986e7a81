"""``lws-gatekeeper render``: golden files per backend, and errors that name line and field.

The golden files under ``tests/unit/golden/`` are the rendering of ``examples/pools.yaml``
(the example users see) for each backend. After a deliberate change to a template,
regenerate them and review the diff:

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_render.py

Whether the API server accepts the rendered objects is the end-to-end test's business
(tests/e2e/test_render.py); here: shape, quoting, determinism and error messages.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gatekeeper.core.backends import BACKENDS
from gatekeeper.core.backends.volcano.keys import VOLCANO_API_VERSION
from gatekeeper.core.kube.keys import KUEUE_API_VERSION, POOL_LABEL
from gatekeeper.core.kube.quantity import parse_quantity
from gatekeeper.core.model.pool import DEFAULT_ADMISSION_TIMEOUT, NodeFit, parse_duration, parse_pool
from gatekeeper.render import PoolsError, parse_pools, render, render_stream
from gatekeeper.render.cli import render_cmd
from gatekeeper.render.manifests import MANAGED_BY, template_file

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pools.yaml"
GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def _pools(body: str) -> str:
    return "pools:\n" + body


ONE_POOL = _pools(
    """\
  - name: on-demand
    nodeLabels: {pool: on-demand}
    gpus: 4
    namespaces: [team-a, team-b]
"""
)


# ---- golden files -------------------------------------------------------------------


@pytest.mark.parametrize("backend", list(BACKENDS.names))
def test_example_renders_as_the_golden_file(backend: str) -> None:
    got = render_stream(parse_pools(EXAMPLE.read_text(), "examples/pools.yaml"), backend)
    golden = GOLDEN / f"render-{backend}.yaml"
    if UPDATE:
        golden.write_text(got)
    assert golden.exists(), f"{golden} is missing: run UPDATE_GOLDEN=1 pytest {__file__}"
    assert got == golden.read_text(), f"{golden} differs; if intended: UPDATE_GOLDEN=1 pytest {__file__}"


def test_the_templates_are_found_through_the_backends_packages() -> None:
    for backend in BACKENDS:
        assert template_file(backend).is_file()
        assert backend.template.startswith(f"gatekeeper.core.backends.{backend.name}:")


# ---- shapes -----------------------------------------------------------------------------


def test_pools_backend_one_pool_object_per_pool() -> None:
    docs = _docs(render_stream(parse_pools(EXAMPLE.read_text()), "pools"))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Pool", "on-demand"),
        ("Pool", "reserved-h100"),
    ]
    on_demand, reserved = docs
    assert on_demand["apiVersion"] == "lws-gatekeeper.io/v1alpha1"
    assert "namespace" not in on_demand["metadata"]  # cluster-scoped
    assert on_demand["metadata"]["labels"] == {"app.kubernetes.io/managed-by": MANAGED_BY}
    assert on_demand["spec"] == {
        "nodeSelector": {"pool": "on-demand"},
        # Only the namespaces the description names may use it.
        "namespaceSelector": {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}
            ]
        },
        "quota": {"nvidia.com/gpu": 4},
        "queueingStrategy": "BestEffortFIFO",
        "nodeFit": "Required",
        "admissionTimeout": "10m",  # the default, written where the admin reads the Pool
    }
    assert parse_duration(on_demand["spec"]["admissionTimeout"], "x") == DEFAULT_ADMISSION_TIMEOUT
    assert reserved["spec"]["queueingStrategy"] == "StrictFIFO"
    # cpu and memory join the quota only when given; as quoted quantities, what the CRD stores.
    assert reserved["spec"]["quota"] == {"nvidia.com/gpu": 16, "cpu": "384", "memory": "4Ti"}


def test_an_autoscaled_pool_renders_node_fit_quota_only() -> None:
    [doc] = _docs(render_stream(parse_pools(ONE_POOL + "    nodeFit: QuotaOnly\n"), "pools"))
    assert doc["spec"]["nodeFit"] == "QuotaOnly"
    assert parse_pool(doc).node_fit is NodeFit.QUOTA_ONLY


def test_kueue_backend_flavor_cluster_queue_and_a_local_queue_per_namespace() -> None:
    docs = _docs(render_stream(parse_pools(ONE_POOL), "kueue"))
    assert [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs] == [
        ("ResourceFlavor", None, "on-demand"),
        ("ClusterQueue", None, "on-demand"),
        ("LocalQueue", "team-a", "on-demand"),
        ("LocalQueue", "team-b", "on-demand"),
    ]
    assert {d["apiVersion"] for d in docs} == {KUEUE_API_VERSION}
    flavor, cq, lq, _ = docs
    assert flavor["spec"] == {"nodeLabels": {"pool": "on-demand"}}
    assert cq["spec"] == {
        "namespaceSelector": {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}
            ]
        },
        "queueingStrategy": "BestEffortFIFO",
        # Every pod asks cpu and memory: a queue that did not cover them would admit nothing.
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "on-demand",
                        "resources": [
                            {"name": "cpu", "nominalQuota": "100M"},
                            {"name": "memory", "nominalQuota": "100Pi"},
                            {"name": "nvidia.com/gpu", "nominalQuota": 4},
                        ],
                    }
                ],
            }
        ],
    }
    assert lq["spec"] == {"clusterQueue": "on-demand"}


def _cluster_queue(text: str) -> dict[str, Any]:
    (cq,) = [d for d in _docs(render_stream(parse_pools(text), "kueue")) if d["kind"] == "ClusterQueue"]
    return cq


def _quotas(cq: dict[str, Any]) -> dict[str, Any]:
    (group,) = cq["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]
    return {r["name"]: r["nominalQuota"] for r in flavor["resources"]}


def test_kueue_default_cpu_and_memory_quotas_are_beyond_any_pool() -> None:
    quotas = _quotas(_cluster_queue(ONE_POOL))
    assert quotas == {"cpu": "100M", "memory": "100Pi", "nvidia.com/gpu": 4}
    cpu, memory = parse_quantity(quotas["cpu"]), parse_quantity(quotas["memory"])
    assert cpu == 10**8  # cores; more than the largest supercomputers have
    assert memory == 100 * 2**50
    # Kueue counts cpu in millicores and memory in bytes, as int64: far from overflowing,
    # even summed over 80 ClusterQueues of a cohort.
    assert cpu * 1000 < 2**63 and memory * 80 < 2**63


@pytest.mark.parametrize(
    ("fields", "cpu", "memory"),
    [
        pytest.param("    cpu: 64\n    memory: 512Gi\n", "64", "512Gi", id="both"),
        pytest.param("    cpu: 500m\n", "500m", "100Pi", id="cpu-only"),
        pytest.param("    memory: 1.5Ti\n", "100M", "1.5Ti", id="memory-only"),
        pytest.param("    cpu: 1.5\n    memory: 1e12\n", "1.5", "1e12", id="float-and-exponent"),
        pytest.param('    cpu: "96"\n    memory: "0.5Pi"\n', "96", "0.5Pi", id="quoted"),
    ],
)
def test_cpu_and_memory_quotas_as_written(fields: str, cpu: str, memory: str) -> None:
    text = ONE_POOL + fields
    pool = parse_pools(text).pools[0]
    assert (pool.cpu, pool.memory) == (
        cpu if "cpu" in fields else None,
        memory if "memory" in fields else None,
    )
    assert _quotas(_cluster_queue(text)) == {"cpu": cpu, "memory": memory, "nvidia.com/gpu": 4}
    given = {k: v for k, v in (("cpu", pool.cpu), ("memory", pool.memory)) if v is not None}
    (pool_obj,) = _docs(render_stream(parse_pools(text), "pools"))
    assert pool_obj["spec"]["quota"] == {"nvidia.com/gpu": 4, **given}
    (queue,) = _docs(render_stream(parse_pools(text), "volcano"))
    assert queue["spec"]["capability"] == {"nvidia.com/gpu": 4, **given}


def test_without_cpu_and_memory_only_the_gpus_are_limited_by_pools_and_volcano() -> None:
    pool = parse_pools(ONE_POOL).pools[0]
    assert (pool.cpu, pool.memory, pool.admission_checks) == (None, None, ())
    (pool_obj,) = _docs(render_stream(parse_pools(ONE_POOL), "pools"))
    assert pool_obj["spec"]["quota"] == {"nvidia.com/gpu": 4}
    (queue,) = _docs(render_stream(parse_pools(ONE_POOL), "volcano"))
    assert queue["spec"]["capability"] == {"nvidia.com/gpu": 4}


def test_admission_checks_go_to_the_cluster_queue() -> None:
    text = ONE_POOL + "    admissionChecks: [node-fit, provisioning.example.com]\n"
    assert parse_pools(text).pools[0].admission_checks == ("node-fit", "provisioning.example.com")
    cq = _cluster_queue(text)
    assert cq["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": "node-fit"}, {"name": "provisioning.example.com"}]
    }
    assert "admissionChecksStrategy" not in _cluster_queue(ONE_POOL)["spec"]
    assert "admissionChecksStrategy" not in _cluster_queue(ONE_POOL + "    admissionChecks: []\n")["spec"]


@pytest.mark.parametrize("backend", ["pools", "volcano"])
def test_admission_checks_are_ignored_by_the_other_backends_with_a_comment(backend: str) -> None:
    with_checks = render_stream(parse_pools(ONE_POOL + "    admissionChecks: [node-fit]\n"), backend)
    without = render_stream(parse_pools(ONE_POOL), backend)
    assert _docs(with_checks) == _docs(without)
    assert "# admissionChecks (node-fit) are Kueue's: ignored by this backend." in with_checks


def test_volcano_backend_one_queue_per_pool() -> None:
    text = ONE_POOL.replace("gpus: 4", "gpus: 4\n    gpuResource: amd.com/gpu")
    (queue,) = _docs(render_stream(parse_pools(text), "volcano"))
    assert queue["apiVersion"] == VOLCANO_API_VERSION
    assert queue["kind"] == "Queue"
    assert queue["spec"] == {"weight": 1, "reclaimable": False, "capability": {"amd.com/gpu": 4}}


@pytest.mark.parametrize("backend", list(BACKENDS.names))
def test_strings_that_look_like_other_yaml_types_stay_strings(backend: str) -> None:
    text = _pools(
        """\
  - name: 1e3
    nodeLabels: {"gpu": "true", "zone": "1", example.com/on: "no", tier: "0.5"}
    gpus: 2
    namespaces: ["123", "null"]
"""
    )
    docs = _docs(render_stream(parse_pools(text), backend))
    for doc in docs:
        assert doc["metadata"]["name"] == "1e3"
    labels = {"gpu": "true", "zone": "1", "example.com/on": "no", "tier": "0.5"}
    first = docs[0]["spec"]
    if backend == "pools":
        assert first["nodeSelector"] == labels
    elif backend == "kueue":
        assert first["nodeLabels"] == labels
        assert [d["metadata"]["namespace"] for d in docs[2:]] == ["123", "null"]


def test_rendering_is_deterministic_and_split_per_pool() -> None:
    pools = parse_pools(EXAMPLE.read_text())
    first = render(pools, "kueue")
    assert first == render(pools, "kueue")
    assert [(r.pool, r.file_name) for r in first] == [
        ("on-demand", "kueue-on-demand.yaml"),
        ("reserved-h100", "kueue-reserved-h100.yaml"),
    ]
    assert render_stream(pools, "kueue") == "---\n".join(r.text for r in first)


def test_the_example_is_what_the_docs_say() -> None:
    pools = parse_pools(EXAMPLE.read_text())
    assert [p.name for p in pools.pools] == ["on-demand", "reserved-h100"]
    on_demand, reserved = pools.pools
    assert on_demand.admission_checks == ("node-fit",)  # the gatekeeper's node-fit check, by name
    assert (reserved.cpu, reserved.memory) == ("384", "4Ti")
    assert POOL_LABEL in EXAMPLE.read_text()  # it tells users how an LWS opts in


# ---- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            ONE_POOL.replace("gpus: 4", "gpus: four"),
            'pools.yaml line 4: pools[0].gpus: must be a positive integer, got "four"',
            id="gpus-word",
        ),
        pytest.param(
            ONE_POOL.replace("gpus: 4", "gpus: 0"),
            "pools.yaml line 4: pools[0].gpus: must be a positive integer, got 0 (a number)",
            id="gpus-zero",
        ),
        pytest.param(
            ONE_POOL.replace("gpus: 4", "gpus: 1.5"),
            "pools.yaml line 4: pools[0].gpus: must be a positive integer, got 1.5 (a number)",
            id="gpus-fraction",
        ),
        pytest.param(
            ONE_POOL.replace("gpus: 4", "gpus: yes"),
            "pools.yaml line 4: pools[0].gpus: must be a positive integer, got yes (a boolean)",
            id="gpus-bool",
        ),
        pytest.param(
            ONE_POOL.replace("gpus: 4", "gpus:"),
            "pools.yaml line 4: pools[0].gpus: must be a positive integer, got nothing",
            id="gpus-empty",
        ),
        pytest.param(
            ONE_POOL.replace("gpus: 4", "gpus: 4\n    gpu: 4"),
            "pools.yaml line 5: pools[0].gpu: unknown field (did you mean gpus? known: name, nodeLabels, "
            "gpus, gpuResource, cpu, memory, namespaces, queueingStrategy, nodeFit, admissionChecks)",
            id="unknown-field",
        ),
        pytest.param(
            ONE_POOL.replace("gpus: 4", "gpus: 4\n    gpus: 8"),
            "pools.yaml line 5: pools[0].gpus: appears twice",
            id="duplicate-key",
        ),
        pytest.param(
            ONE_POOL.replace("    gpus: 4\n", ""),
            "pools.yaml line 2: pools[0]: missing required field `gpus`",
            id="missing-field",
        ),
        pytest.param(
            ONE_POOL.replace("{pool: on-demand}", "{pool: true}"),
            "pools.yaml line 3: pools[0].nodeLabels.pool: must be a string, got true (a boolean); "
            'quote it: "true"',
            id="label-value-bool",
        ),
        pytest.param(
            ONE_POOL.replace("{pool: on-demand}", '{"bad key": x}'),
            'pools.yaml line 3: pools[0].nodeLabels["bad key"]: must be a label key such as pool or '
            'example.com/pool, got "bad key"',
            id="label-key",
        ),
        pytest.param(
            ONE_POOL.replace("{pool: on-demand}", "{pool: -x-}"),
            "pools.yaml line 3: pools[0].nodeLabels.pool: must be a label value (at most 63 letters, "
            "digits, '-', '_' or '.', starting and ending with a letter or digit), got \"-x-\"",
            id="label-value",
        ),
        pytest.param(
            ONE_POOL.replace("{pool: on-demand}", "{}"),
            "pools.yaml line 3: pools[0].nodeLabels: must hold at least one label (those that select "
            "the pool's nodes)",
            id="no-labels",
        ),
        pytest.param(
            ONE_POOL.replace("{pool: on-demand}", "{" + ", ".join(f"l{i}: v" for i in range(9)) + "}"),
            "pools.yaml line 3: pools[0].nodeLabels: at most 8 labels (Kueue's limit), got 9",
            id="too-many-labels",
        ),
        pytest.param(
            ONE_POOL.replace("name: on-demand", "name: On_Demand"),
            "pools.yaml line 2: pools[0].name: must be a lowercase name of at most 63 characters "
            "(letters, digits, '-' and '.', starting and ending with a letter or digit), as it names "
            'cluster objects and is the value of the label lws-gatekeeper.io/pool, got "On_Demand"',
            id="pool-name",
        ),
        pytest.param(
            ONE_POOL.replace("[team-a, team-b]", "[team-a, team-a]"),
            'pools.yaml line 5: pools[0].namespaces[1]: "team-a" is listed twice',
            id="namespace-twice",
        ),
        pytest.param(
            ONE_POOL.replace("[team-a, team-b]", "[Team_A]"),
            "pools.yaml line 5: pools[0].namespaces[0]: must be a namespace name (at most 63 "
            "lowercase letters, digits and '-'), got \"Team_A\"",
            id="namespace-name",
        ),
        pytest.param(
            ONE_POOL.replace("[team-a, team-b]", "team-a"),
            'pools.yaml line 5: pools[0].namespaces: must be a list, got "team-a"',
            id="namespaces-not-a-list",
        ),
        pytest.param(
            ONE_POOL.replace("[team-a, team-b]", "[]"),
            "pools.yaml line 5: pools[0].namespaces: must list at least one namespace that may use the pool",
            id="namespaces-empty",
        ),
        pytest.param(
            ONE_POOL + "    gpuResource: gpu\n",
            "pools.yaml line 6: pools[0].gpuResource: must be an extended resource name such as "
            'nvidia.com/gpu or amd.com/gpu, got "gpu"',
            id="gpu-resource",
        ),
        pytest.param(
            ONE_POOL + "    queueingStrategy: FIFO\n",
            "pools.yaml line 6: pools[0].queueingStrategy: must be one of BestEffortFIFO, StrictFIFO, "
            'got "FIFO"',
            id="strategy",
        ),
        pytest.param(
            ONE_POOL + "    nodeFit: Autoscaled\n",
            'pools.yaml line 6: pools[0].nodeFit: must be one of Required, QuotaOnly, got "Autoscaled"',
            id="node-fit",
        ),
        pytest.param(
            ONE_POOL + "    memory: 512Gi\n    cpu: lots\n",
            'pools.yaml line 7: pools[0].cpu: must be a Kubernetes quantity, got "lots"',
            id="cpu-word",
        ),
        pytest.param(
            ONE_POOL + "    cpu: 8\n    memory: lots\n",
            'pools.yaml line 7: pools[0].memory: must be a Kubernetes quantity, got "lots"',
            id="memory-word",
        ),
        pytest.param(
            ONE_POOL + "    memory: 512GB\n",
            'pools.yaml line 6: pools[0].memory: must be a Kubernetes quantity, got "512GB"',
            id="memory-unknown-suffix",
        ),
        pytest.param(
            ONE_POOL + "    memory: 512 Gi\n",
            'pools.yaml line 6: pools[0].memory: must be a Kubernetes quantity, got "512 Gi"',
            id="memory-space",
        ),
        pytest.param(
            ONE_POOL + "    cpu: 0\n",
            "pools.yaml line 6: pools[0].cpu: must be a Kubernetes quantity above zero such as 64, "
            "500m or 512Gi, got 0 (a number)",
            id="cpu-zero",
        ),
        pytest.param(
            ONE_POOL + "    cpu: -2\n",
            "pools.yaml line 6: pools[0].cpu: must be a Kubernetes quantity above zero such as 64, "
            "500m or 512Gi, got -2 (a number)",
            id="cpu-negative",
        ),
        pytest.param(
            ONE_POOL + "    cpu: true\n",
            "pools.yaml line 6: pools[0].cpu: must be a Kubernetes quantity, got true (a boolean)",
            id="cpu-bool",
        ),
        pytest.param(
            ONE_POOL + "    cpu: .inf\n",
            "pools.yaml line 6: pools[0].cpu: must be a Kubernetes quantity, got .inf (a number)",
            id="cpu-infinite",
        ),
        pytest.param(
            ONE_POOL + "    memory:\n",
            "pools.yaml line 6: pools[0].memory: must be a Kubernetes quantity, got nothing",
            id="memory-empty",
        ),
        pytest.param(
            ONE_POOL + "    memory: [1Gi]\n",
            "pools.yaml line 6: pools[0].memory: must be a Kubernetes quantity, got a list",
            id="memory-list",
        ),
        pytest.param(
            ONE_POOL + "    admissionChecks: node-fit\n",
            'pools.yaml line 6: pools[0].admissionChecks: must be a list, got "node-fit"',
            id="checks-not-a-list",
        ),
        pytest.param(
            ONE_POOL + "    admissionChecks: [node-fit, Node_Fit]\n",
            "pools.yaml line 6: pools[0].admissionChecks[1]: must be the name of an AdmissionCheck (at "
            "most 253 lowercase letters, digits, '-' and '.', starting and ending with a letter or "
            'digit), got "Node_Fit"',
            id="check-name",
        ),
        pytest.param(
            ONE_POOL + "    admissionChecks: [node-fit, node-fit]\n",
            'pools.yaml line 6: pools[0].admissionChecks[1]: "node-fit" is listed twice',
            id="check-twice",
        ),
        pytest.param(
            ONE_POOL + "    admissionChecks: [1]\n",
            "pools.yaml line 6: pools[0].admissionChecks[0]: must be a string, got 1 (a number)",
            id="check-number",
        ),
        pytest.param(
            ONE_POOL + "    admissionChecks: [" + ", ".join(f"c{i}" for i in range(65)) + "]\n",
            "pools.yaml line 6: pools[0].admissionChecks: at most 64 AdmissionChecks (Kueue's limit), got 65",
            id="too-many-checks",
        ),
        pytest.param(
            ONE_POOL + ONE_POOL.removeprefix("pools:\n"),
            'pools.yaml line 6: pools[1].name: "on-demand" is already the name of pools[0]',
            id="pool-twice",
        ),
        pytest.param(
            "pools: []\n",
            "pools.yaml line 1: pools: must list at least one pool",
            id="no-pools",
        ),
        pytest.param(
            "- name: on-demand\n",
            "pools.yaml line 1: must be a mapping, got a list",
            id="root-list",
        ),
        pytest.param(
            "",
            "pools.yaml: is empty; expected a mapping with a `pools:` list",
            id="empty-file",
        ),
        pytest.param(
            "pools:\n  - name: [on-demand\n",
            "pools.yaml line 3: not valid YAML: while parsing a flow sequence, expected ',' or ']', "
            "but got '<stream end>'",
            id="bad-yaml",
        ),
        pytest.param(
            ONE_POOL + "---\n" + ONE_POOL,
            "pools.yaml line 6: not valid YAML: expected a single document in the stream, "
            "but found another document",
            id="two-documents",
        ),
        pytest.param(
            ONE_POOL.replace("gpus: 4", "gpus: !four 4"),
            'pools.yaml line 4: pools[0].gpus: must be a positive integer, got "4"',
            id="unknown-tag",
        ),
    ],
)
def test_a_bad_description_names_line_and_field(text: str, message: str) -> None:
    with pytest.raises(PoolsError) as err:
        parse_pools(text, "pools.yaml")
    assert str(err.value) == message


def test_every_problem_is_reported_in_line_order() -> None:
    text = _pools(
        """\
  - name: a
    nodeLabels: {pool: a}
    gpus: 0
    namespaces: [x]
    color: blue
  - name: b
    gpus: two
    namespaces: [x]
"""
    )
    with pytest.raises(PoolsError) as err:
        parse_pools(text, "p.yaml")
    assert err.value.problems == [
        "p.yaml line 4: pools[0].gpus: must be a positive integer, got 0 (a number)",
        "p.yaml line 6: pools[0].color: unknown field (known: name, nodeLabels, gpus, gpuResource, "
        "cpu, memory, namespaces, queueingStrategy, nodeFit, admissionChecks)",
        "p.yaml line 7: pools[1]: missing required field `nodeLabels`",
        'p.yaml line 8: pools[1].gpus: must be a positive integer, got "two"',
    ]


# ---- the command --------------------------------------------------------------------------


def test_cli_prints_one_stream() -> None:
    result = CliRunner().invoke(render_cmd, [str(EXAMPLE), "--backend", "volcano"])
    assert result.exit_code == 0, result.output
    assert result.stdout == (GOLDEN / "render-volcano.yaml").read_text()


def test_cli_reads_standard_input() -> None:
    result = CliRunner().invoke(render_cmd, ["-"], input=ONE_POOL)
    assert result.exit_code == 0, result.output
    assert [d["kind"] for d in _docs(result.stdout)] == ["Pool"]


def test_cli_writes_one_file_per_pool(tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    result = CliRunner().invoke(render_cmd, [str(EXAMPLE), "--backend", "kueue", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["kueue-on-demand.yaml", "kueue-reserved-h100.yaml"]
    assert f"wrote {out / 'kueue-on-demand.yaml'}" in result.stderr
    assert result.stdout == ""
    kinds = [d["kind"] for d in _docs((out / "kueue-on-demand.yaml").read_text())]
    assert kinds == ["ResourceFlavor", "ClusterQueue", "LocalQueue", "LocalQueue"]


def test_cli_error_names_the_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "pools.yaml"
    bad.write_text(ONE_POOL.replace("gpus: 4", "gpus: four"))
    result = CliRunner().invoke(render_cmd, [str(bad)])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert f'Error: {bad} line 4: pools[0].gpus: must be a positive integer, got "four"' in result.stderr


def test_cli_missing_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(render_cmd, [str(tmp_path / "nope.yaml")])
    assert result.exit_code == 1
    assert f"cannot read {tmp_path / 'nope.yaml'}: No such file or directory" in result.stderr


def test_cli_rejects_an_unknown_backend() -> None:
    result = CliRunner().invoke(render_cmd, [str(EXAMPLE), "--backend", "yunikorn"])
    assert result.exit_code == 2
    assert "'yunikorn' is not one of 'pools', 'kueue', 'volcano'" in result.stderr
