"""Unit tests of the sandbox's Karpenter pieces: its instance-type file, its command, its CRDs.

The shapes checked here are those Karpenter v1.14.1's KWOK provider reads
(``kwok/cloudprovider/helpers.go``: ``InstanceTypeOptions``, offerings with
``Price``/``Available``/``Requirements``); the end-to-end test proves Karpenter takes them.
"""

from __future__ import annotations

import json
from pathlib import Path

from gatekeeper_lab.sandbox import build
from gatekeeper_lab.sandbox.karpenter import ZONE, instance_types, karpenter_argv, karpenter_crds
from gatekeeper_lab.sandbox.process import Runner


def test_instance_types_offer_one_and_eight_gpus_on_demand_and_spot_in_one_zone() -> None:
    types = {t["name"]: t for t in json.loads(instance_types())}
    assert {n: t["resources"]["nvidia.com/gpu"] for n, t in types.items()} == {
        "g4dn.xlarge": "1",
        "g4dn.metal": "8",
    }
    for t in types.values():
        offered = {}
        for off in t["offerings"]:
            reqs = {r["key"]: r["values"] for r in off["Requirements"]}
            assert reqs["topology.kubernetes.io/zone"] == [ZONE]
            offered[reqs["karpenter.sh/capacity-type"][0]] = off["Price"]
            assert off["Available"] is True
        assert set(offered) == {"on-demand", "spot"}
        assert offered["spot"] < offered["on-demand"]
        assert t["architecture"] == "amd64" and t["operatingSystems"] == ["linux"]


def test_karpenter_runs_without_leader_election_on_its_own_ports(tmp_path: Path) -> None:
    runner = Runner(
        tmp_path, tmp_path / "logs", tmp_path / "bin", tmp_path / "kubeconfig", tmp_path / "s.json"
    )
    argv = karpenter_argv(runner, {"karpenter_metrics": 1001, "karpenter_health": 1002}, "/x/types.json")
    assert argv[0] == str(tmp_path / "bin" / "karpenter")
    assert "--disable-leader-election" in argv
    assert "--instance-types-file-path=/x/types.json" in argv
    assert "--metrics-port=1001" in argv and "--health-probe-port=1002" in argv


def test_crds_are_the_modules_core_and_kwok_ones(tmp_path: Path) -> None:
    comp = build.load_pins()["karpenter"]
    assert comp.packages == ("sigs.k8s.io/karpenter/kwok",)
    for folder, name in (("pkg/apis/crds", "karpenter.sh_nodepools.yaml"), ("kwok/apis/crds", "k.yaml")):
        (tmp_path / "files" / folder).mkdir(parents=True)
        (tmp_path / "files" / folder / name).write_text("{}")
    (tmp_path / "files" / "pkg/apis/crds" / "karpenter.sh_nodeclaims.yaml").write_text("{}")
    paths = karpenter_crds(build.Installed(comp, tmp_path))
    assert [Path(p).name for p in paths] == [
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.sh_nodepools.yaml",
        "k.yaml",
    ]
