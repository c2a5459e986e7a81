"""The chart's hub release (``role=hub``) runs a hub: its gatekeeper grants claims as the
chart's ServiceAccount and no more, and the members' RBAC and policies hold them to their own.

Why this exists: ``helm template`` proves the chart renders (``tests/unit/test_chart_hub.py``);
only an API server proves the RBAC it grants is enough and no wider. On the sandbox's hub the
chart's RBAC and policies are applied as ``helm install --set role=hub`` makes them (they
replace the sandbox's own of the same names), the hub's gatekeeper is started again with a
token of the chart's ServiceAccount, and member cluster-a's real gatekeeper scales its LWS to
one group: its claim is granted by the hub running as the chart's identity, and the group
runs whole. Nothing in the hub gatekeeper's log may say the API server refused it anything.
As member cluster-b (a client certificate in the members' group), writing a claim in
cluster-a's name in its own namespace is refused by the chart's policy; impersonated as that
member (its user and the members' group), reading cluster-a's claims, releasing one through
the status, deleting it and growing the Reservation are each refused by the chart's RBAC,
and the claim stays granted.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import yaml

from gatekeeper_lab.sandbox import build
from gatekeeper_lab.sandbox.hub import GATEKEEPER
from gatekeeper_lab.sandbox.manifests import GATEKEEPER_NAMESPACE

from .conftest import SharedHub, refusals
from .hub_support import _json, claim_body, eventually, pods_of, scene, whole_running_groups
from .test_chart import CHART, RBAC_KINDS

__all__ = ["scene"]  # the fixture, used by name

A_HOME, B_HOME = "lws-gatekeeper-member-cluster-a", "lws-gatekeeper-member-cluster-b"


def _hub_release() -> list[dict[str, Any]]:
    helm = build.build_all(["helm"])["helm"].bin / "helm"
    res = subprocess.run(
        [str(helm), "template", "lws-gatekeeper", str(CHART), "--namespace", GATEKEEPER_NAMESPACE,
         "--set", "role=hub", "--set", "image.repository=lws-gatekeeper/lws-gatekeeper",
         "--set", "hub.members={cluster-a,cluster-b,cluster-c}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def _token_kubeconfig(shared_hub: SharedHub, folder: Path) -> Path:
    """A kubeconfig for the hub that authenticates as the chart's ServiceAccount (TokenRequest)."""
    run = shared_hub.hub.kubectl
    token = run(
        "create", "token", "lws-gatekeeper", "-n", GATEKEEPER_NAMESPACE, "--duration=1h"
    ).stdout.strip()
    config = yaml.safe_load(shared_hub.hub.kubeconfig.read_text())
    config["users"] = [{"name": "chart", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "chart"
    path = folder / "hub-chart.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def test_the_charts_hub_release_grants_claims_as_its_service_account_and_no_more(
    shared_hub: SharedHub, scene: Any, tmp_path: Path
) -> None:
    reservation, _, ns = scene
    hub = shared_hub.hub
    objects = [
        o for o in _hub_release() if o["kind"] in (*RBAC_KINDS, "Namespace") or "AdmissionPolicy" in o["kind"]
    ]
    hub.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(objects))
    who = hub.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}",
                      f"--kubeconfig={_token_kubeconfig(shared_hub, tmp_path)}").stdout  # fmt: skip
    assert who == f"system:serviceaccount:{GATEKEEPER_NAMESPACE}:lws-gatekeeper"
    log = hub.runner.log_dir / f"{GATEKEEPER}.log"
    start = log.stat().st_size if log.exists() else 0
    hub.stop(GATEKEEPER)
    hub.kubectl("delete", "lease", "lws-gatekeeper", "-n", GATEKEEPER_NAMESPACE, "--ignore-not-found")
    try:
        hub.start_gatekeeper((f"--kubeconfig={tmp_path / 'hub-chart.kubeconfig'}",))
        a = shared_hub.members["cluster-a"]
        a.kubectl("scale", "lws", "vllm", "-n", ns, "--replicas=1")

        def granted() -> bool:
            claims = _json(hub.kubectl, "get", "reservationclaims", "-A")["items"]
            mine = [c for c in claims if c["spec"]["reservation"] == reservation]
            return [(c.get("status") or {}).get("state") for c in mine] == ["Granted"]

        eventually(granted, 120, "cluster-a's claim granted by the hub running as the chart's identity")
        eventually(
            lambda: whole_running_groups(pods_of(shared_hub, ns)["cluster-a"]) == (1, 2, 0),
            120,
            "cluster-a's group running whole",
        )
        b = str(hub.join("cluster-b", tmp_path / "cluster-b"))
        forged = a.kubectl(
            f"--kubeconfig={b}", "create", "-f", "-",
            input=claim_body(reservation, "cluster-a", uuid.uuid4().hex[:5], namespace=B_HOME), check=False,
        )  # fmt: skip
        assert forged.returncode != 0, "cluster-b wrote a claim in cluster-a's name"
        assert "lws-gatekeeper-hub-member-claims" in forged.stderr, forged.stderr
        # As member cluster-b by impersonation (its user and the members' group): it may
        # neither grant a claim, nor take cluster-a's away, nor grow the Reservation.
        [theirs] = [
            c["metadata"]["name"]
            for c in _json(hub.kubectl, "get", "reservationclaims", "-A")["items"]
            if c["spec"]["reservation"] == reservation
        ]
        as_b = ("--as=lws-gatekeeper:member:cluster-b", "--as-group=lws-gatekeeper:members")
        for attempt, said in (
            (("get", "reservationclaims", "-n", A_HOME), "forbidden"),
            (("get", "reservationclaims", "-A"), "forbidden"),
            (("patch", "reservationclaim", theirs, "-n", A_HOME, "--subresource=status", "--type=merge",
              "-p", '{"status":{"state":"Released"}}'), "forbidden"),
            (("delete", "reservationclaim", theirs, "-n", A_HOME), "forbidden"),
            (("patch", "reservation", reservation, "--type=merge",
              "-p", '{"spec":{"capacity":{"nvidia.com/gpu":"400"}}}'), "forbidden"),
        ):  # fmt: skip
            tried = hub.kubectl(*as_b, *attempt, check=False)
            assert tried.returncode != 0, f"cluster-b may {' '.join(attempt[:2])}"
            assert said in tried.stderr, tried.stderr
        assert granted(), "cluster-a's claim is as the hub granted it"
    finally:
        hub.stop(GATEKEEPER)
        text = log.read_bytes()[start:].decode(errors="replace")
        print(text[-3000:])
        hub.start_gatekeeper()
    denials = refusals(text)
    assert not denials, "the hub's gatekeeper was refused something it needs:\n" + "\n".join(denials[:10])
    print(json.dumps({"whoami": who, "objects": sorted(o["kind"] for o in objects)}))
