"""Unit tests of the sandbox's Kueue pieces: its Configuration, CRD conversion and webhook rewriting.

The module files here mirror the shapes of Kueue v0.19's ``config/components`` (a
kustomization with an inline patch and ``replacements``, CRD patches that add a
conversion webhook); the end-to-end test runs the real ones.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from gatekeeper_lab.sandbox import build
from gatekeeper_lab.sandbox.cluster import SandboxError, webhooks_by_url
from gatekeeper_lab.sandbox.kueue import (
    FRAMEWORKS,
    MANAGED_NAMESPACE_LABEL,
    kueue_config,
    kueue_crds,
    kueue_webhooks,
)

CA = b"-----BEGIN CERTIFICATE-----\nsandbox\n-----END CERTIFICATE-----\n"
URL = "https://127.0.0.1:9443"
SHIPPED_SELECTOR = {
    "matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kueue-system"]}
    ]
}
MANAGED = {"matchLabels": {MANAGED_NAMESPACE_LABEL: "true"}}


def _hook(name: str, path: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": path}},
        "failurePolicy": "Fail",
        "rules": [],
        "sideEffects": "None",
        **extra,
    }


def _installed(tmp_path: Path, webhook_kustomization: dict[str, Any] | None = None) -> build.Installed:
    comp = build.load_pins()["kueue"]
    inst = build.Installed(comp, tmp_path)
    hooks = inst.files / "config" / "components" / "webhook"
    hooks.mkdir(parents=True)
    hooks.joinpath("manifests.yaml").write_text(
        yaml.safe_dump_all(
            [
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "MutatingWebhookConfiguration",
                    "metadata": {"name": "mutating-webhook-configuration"},
                    "webhooks": [
                        _hook("mclusterqueue.kb.io", "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue"),
                        _hook("mpod.kb.io", "/mutate--v1-pod"),
                        _hook(
                            "mleaderworkerset.kb.io", "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset"
                        ),
                    ],
                },
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingWebhookConfiguration",
                    "metadata": {"name": "validating-webhook-configuration"},
                    "webhooks": [
                        _hook("vpod.kb.io", "/validate--v1-pod"),
                        _hook(
                            "vworkload.kb.io",
                            "/validate-kueue-x-k8s-io-v1beta2-workload",
                            objectSelector={"matchLabels": {"keep": "me"}},
                        ),
                    ],
                },
            ]
        )
    )
    hooks.joinpath("service.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "webhook-service"}})
    )
    patch = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "validating-webhook-configuration"},
        "webhooks": [{"name": "vpod.kb.io", "namespaceSelector": SHIPPED_SELECTOR}],
    }
    kust = webhook_kustomization or {
        "resources": ["manifests.yaml", "service.yaml"],
        "patches": [{"patch": yaml.safe_dump(patch)}],
        "replacements": [
            {
                "source": {
                    "kind": "ValidatingWebhookConfiguration",
                    "name": "validating-webhook-configuration",
                    "fieldPath": "webhooks.[name=vpod.kb.io].namespaceSelector",
                },
                "targets": [
                    {
                        "select": {
                            "kind": "MutatingWebhookConfiguration",
                            "name": "mutating-webhook-configuration",
                        },
                        "fieldPaths": [
                            "webhooks.[name=mleaderworkerset.kb.io].namespaceSelector",
                            "webhooks.[name=mpod.kb.io].namespaceSelector",
                        ],
                        "options": {"create": True},
                    }
                ],
            }
        ],
    }
    hooks.joinpath("kustomization.yaml").write_text(yaml.safe_dump(kust))

    crd = inst.files / "config" / "components" / "crd"
    (crd / "bases").mkdir(parents=True)
    (crd / "patches").mkdir()
    for plural in ("workloads", "resourceflavors"):
        crd.joinpath("bases", f"kueue.x-k8s.io_{plural}.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "apiextensions.k8s.io/v1",
                    "kind": "CustomResourceDefinition",
                    "metadata": {"name": f"{plural}.kueue.x-k8s.io"},
                    "spec": {
                        "group": "kueue.x-k8s.io",
                        "versions": [{"name": "v1beta1"}, {"name": "v1beta2"}],
                    },
                }
            )
        )
        crd.joinpath("patches", f"webhook_in_{plural}.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "apiextensions.k8s.io/v1",
                    "kind": "CustomResourceDefinition",
                    "metadata": {"name": f"{plural}.kueue.x-k8s.io"},
                    "spec": {
                        "conversion": {
                            "strategy": "Webhook",
                            "webhook": {
                                "clientConfig": {
                                    "service": {
                                        "namespace": "system",
                                        "name": "webhook-service",
                                        "path": "/convert",
                                    }
                                },
                                "conversionReviewVersions": ["v1"],
                            },
                        }
                    },
                }
            )
        )
    crd.joinpath("kustomization.yaml").write_text(
        "resources:\n- bases/kueue.x-k8s.io_workloads.yaml\n- bases/kueue.x-k8s.io_resourceflavors.yaml\n"
        "patches:\n- path: patches/webhook_in_workloads.yaml\n"
        "#- path: patches/webhook_in_resourceflavors.yaml\n"
    )
    return inst


def test_config_is_v1beta2_on_loopback_without_cert_management_or_leader_election(tmp_path: Path) -> None:
    cfg = kueue_config(webhook_port=1, health_port=2, metrics_port=3, cert_dir=tmp_path)
    assert cfg["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert cfg["kind"] == "Configuration"
    assert cfg["internalCertManagement"] == {"enable": False}
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["webhook"] == {"port": 1, "host": "127.0.0.1", "certDir": str(tmp_path)}
    assert cfg["health"]["healthProbeBindAddress"] == "127.0.0.1:2"
    assert cfg["metrics"]["bindAddress"] == "127.0.0.1:3"
    assert cfg["manageJobsWithoutQueueName"] is False
    assert cfg["managedJobsNamespaceSelector"] == MANAGED
    assert cfg["featureGates"] == {"VisibilityOnDemand": False}
    frameworks = cfg["integrations"]["frameworks"]
    assert frameworks == list(FRAMEWORKS)
    assert {"batch/job", "pod", "leaderworkerset.x-k8s.io/leaderworkerset"} <= set(frameworks)
    assert "podOptions" not in cfg["integrations"], "gone in v1beta2; Kueue decodes strictly"


def test_webhooks_point_at_loopback_with_the_managed_namespace_selector(tmp_path: Path) -> None:
    docs = kueue_webhooks(_installed(tmp_path), URL, CA)
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("MutatingWebhookConfiguration", "kueue-mutating-webhook-configuration"),
        ("ValidatingWebhookConfiguration", "kueue-validating-webhook-configuration"),
    ]
    hooks = {h["name"]: h for d in docs for h in d["webhooks"]}
    assert hooks["mpod.kb.io"]["clientConfig"] == {
        "url": URL + "/mutate--v1-pod",
        "caBundle": base64.b64encode(CA).decode(),
    }
    for name in ("vpod.kb.io", "mpod.kb.io", "mleaderworkerset.kb.io"):
        assert hooks[name]["namespaceSelector"] == MANAGED, name
    # Webhooks the kustomization leaves alone keep what they ship with.
    assert "namespaceSelector" not in hooks["mclusterqueue.kb.io"]
    assert hooks["vworkload.kb.io"]["objectSelector"] == {"matchLabels": {"keep": "me"}}
    assert all(h["failurePolicy"] == "Fail" for h in hooks.values())
    # Copies, not shared references: one edit must not leak into another webhook.
    hooks["mpod.kb.io"]["namespaceSelector"]["matchLabels"]["x"] = "y"
    assert hooks["vpod.kb.io"]["namespaceSelector"] == MANAGED


def test_unknown_kustomize_shapes_are_refused(tmp_path: Path) -> None:
    kust = {
        "resources": ["manifests.yaml"],
        "replacements": [
            {
                "source": {
                    "kind": "ValidatingWebhookConfiguration",
                    "name": "validating-webhook-configuration",
                    "fieldPath": "webhooks.0.namespaceSelector",
                },
                "targets": [],
            }
        ],
    }
    with pytest.raises(SandboxError, match="field path"):
        kueue_webhooks(_installed(tmp_path, kust), URL, CA)


def test_crds_get_the_conversion_webhooks_their_kustomization_enables(tmp_path: Path) -> None:
    crds = {c["metadata"]["name"]: c for c in kueue_crds(_installed(tmp_path), URL, CA)}
    assert set(crds) == {"workloads.kueue.x-k8s.io", "resourceflavors.kueue.x-k8s.io"}
    conv = crds["workloads.kueue.x-k8s.io"]["spec"]["conversion"]
    assert conv["strategy"] == "Webhook"
    assert conv["webhook"]["clientConfig"] == {
        "url": URL + "/convert",
        "caBundle": base64.b64encode(CA).decode(),
    }
    assert conv["webhook"]["conversionReviewVersions"] == ["v1"]
    # Its patch is commented out in the kustomization, as upstream ships it.
    assert "conversion" not in crds["resourceflavors.kueue.x-k8s.io"]["spec"]


def test_webhooks_by_url_names_with_prefix_and_keeps_paths() -> None:
    docs = [
        {
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "m"},
            "webhooks": [_hook("a", "/a"), _hook("b", "/b")],
        }
    ]
    out = webhooks_by_url(docs, prefix="p-", base_url=URL, ca_pem=CA)
    assert out[0]["metadata"]["name"] == "p-m"
    assert [h["clientConfig"]["url"] for h in out[0]["webhooks"]] == [URL + "/a", URL + "/b"]
    assert all("service" not in h["clientConfig"] for h in out[0]["webhooks"])
