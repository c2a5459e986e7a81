"""Unit tests of the sandbox's pure pieces: pins, version stamps, webhook rewriting, PKI, verdicts."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from gatekeeper_lab.sandbox import build
from gatekeeper_lab.sandbox.cluster import fake_node, lws_webhooks
from gatekeeper_lab.sandbox.lws import lws_config
from gatekeeper_lab.sandbox.observe import GATE, summarize
from gatekeeper_lab.sandbox.pki import make_pki
from gatekeeper_lab.sandbox.prometheus import JOB, scrape_config
from gatekeeper_lab.sandbox.volcano import scheduler_config


def test_pins_name_every_component_with_a_version() -> None:
    pins = build.load_pins()
    assert list(pins) == [
        "kubernetes",
        "etcd",
        "kwok",
        "lws",
        "helm",
        "helm-docs",
        "kueue",
        "volcano-crds",
        "karpenter",
        "volcano",
        "prometheus",
        "crane",
    ]
    for comp in pins.values():
        assert comp.version.startswith("v"), comp
        assert comp.packages or comp.files, f"{comp.name} builds nothing and brings nothing"
    assert not pins["volcano-crds"].packages, "files only: Volcano's CRDs"
    volcano = pins["volcano"]
    assert (volcano.module, volcano.version) == (pins["volcano-crds"].module, pins["volcano-crds"].version)
    assert volcano.packages == ("volcano.sh/volcano/cmd/scheduler",), "the scheduler alone gangs PodGroups"
    k8s = pins["kubernetes"]
    assert k8s.staging == "v0" + k8s.version[2:], "staging modules are published as v0.<minor>.<patch>"
    assert int(k8s.version.split(".")[1]) >= 36, "Kubernetes 1.36 or newer"
    assert pins["etcd"].version.startswith("v3.6."), "etcd 3.6.x"
    prom = pins["prometheus"]
    assert prom.packages == ("github.com/prometheus/prometheus/cmd/prometheus",), "the server alone"
    assert prom.tags == ("remove_all_sd",), "no cloud service discovery compiled in"
    # the module's v0.3xx.y is the release 3.xx.y: the stamp must follow the pin
    minor = int(prom.version.split(".")[1])
    release = f"{minor // 100}.{minor % 100}.{prom.version.split('.')[2]}"
    assert f"github.com/prometheus/common/version.Version={release}" in prom.ldflags


def test_cache_key_changes_only_with_its_own_pin() -> None:
    a = build.load_pins()
    text = build.resources.files("gatekeeper_lab.sandbox").joinpath("pins.toml").read_text()
    b = build.load_pins(text.replace('version = "v0.8.0"', 'version = "v0.7.0"'))
    assert a["kwok"].key("go1.26") != b["kwok"].key("go1.26")
    assert a["kubernetes"].key("go1.26") == b["kubernetes"].key("go1.26")
    assert a["kubernetes"].key("go1.26") != a["kubernetes"].key("go1.27")


def test_build_tags_shape_the_key_only_where_pinned() -> None:
    """A component without ``tags`` keeps the key it had before tags could be pinned (the
    cache entries built then stay valid); adding a tag changes that component's key."""
    pins = build.load_pins()
    kwok = pins["kwok"]
    legacy = {k: v for k, v in kwok.__dict__.items() if k != "tags"}
    blob = json.dumps([legacy, "go1.26", build._RECIPE_VERSION], sort_keys=True, default=list)
    assert kwok.key("go1.26") == hashlib.sha256(blob.encode()).hexdigest()[:12]
    tagged = dataclasses.replace(kwok, tags=("netgo",))
    assert tagged.key("go1.26") != kwok.key("go1.26")


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("x.gitVersion={version}", "x.gitVersion=v1.37.2"),
        ("x.gitMajor={major}", "x.gitMajor=1"),
        ("x.gitMinor={minor}", "x.gitMinor=37"),
        ("x.gitCommit={commit}", "x.gitCommit=abc123"),
        ("x.buildDate={date}", "x.buildDate=2026-07-22T18:07:38Z"),
    ],
)
def test_version_stamps(template: str, expected: str) -> None:
    comp = build.load_pins()["kubernetes"]
    info = {"Time": "2026-07-22T18:07:38Z", "Origin": {"Hash": "abc123"}}
    assert build._stamp(template, comp, info) == expected


def test_cache_root_follows_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LWS_GATEKEEPER_CACHE", str(tmp_path / "c"))
    assert build.cache_root() == tmp_path / "c"
    monkeypatch.delenv("LWS_GATEKEEPER_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert build.cache_root() == tmp_path / "lws-gatekeeper"


def _lws_files(tmp_path: Path) -> build.Installed:
    hooks = tmp_path / "files" / "config" / "webhook"
    hooks.mkdir(parents=True)
    svc = {"name": "webhook-service", "namespace": "system"}
    hook = lambda name, path: {  # noqa: E731
        "name": name,
        "clientConfig": {"service": {**svc, "path": path}},
        "rules": [],
    }
    hooks.joinpath("manifests.yaml").write_text(
        yaml.safe_dump_all(
            [
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "MutatingWebhookConfiguration",
                    "metadata": {"name": "mutating-webhook-configuration"},
                    "webhooks": [hook("mlws", "/mutate-lws"), hook("mpod", "/mutate--v1-pod")],
                },
            ]
        )
    )
    patched = {
        **hook("mpod", "/mutate--v1-pod"),
        "objectSelector": {
            "matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]
        },
    }
    hooks.joinpath("mutating-patch.yaml").write_text(
        yaml.safe_dump([{"op": "replace", "path": "/webhooks/1", "value": patched}])
    )
    comp = build.Component(name="lws", module="m", version="v0.9.0", packages=("p",))
    return build.Installed(comp, tmp_path)


def test_lws_webhooks_point_at_loopback_with_patches_applied(tmp_path: Path) -> None:
    docs = lws_webhooks(_lws_files(tmp_path), "https://127.0.0.1:9443", b"PEM")
    (mutating,) = docs
    assert mutating["metadata"]["name"] == "lws-mutating-webhook-configuration"
    urls = [h["clientConfig"]["url"] for h in mutating["webhooks"]]
    assert urls == ["https://127.0.0.1:9443/mutate-lws", "https://127.0.0.1:9443/mutate--v1-pod"]
    assert all(base64.b64decode(h["clientConfig"]["caBundle"]) == b"PEM" for h in mutating["webhooks"])
    assert "objectSelector" in mutating["webhooks"][1], "the kustomize patch narrows the pod webhook"


def test_pki_chain_and_identities(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    ca = x509.load_pem_x509_certificate(pki.ca_crt.read_bytes())
    admin = x509.load_pem_x509_certificate(pki.admin_crt.read_bytes())
    server = x509.load_pem_x509_certificate(pki.apiserver_crt.read_bytes())
    for cert in (admin, server):
        cert.verify_directly_issued_by(ca)
    orgs = [a.value for a in admin.subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)]
    assert orgs == ["system:masters"]
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "kubernetes.default.svc" in sans.get_values_for_type(x509.DNSName)
    # A second call reuses what is there.
    before = pki.ca_crt.read_bytes()
    make_pki(tmp_path / "pki")
    assert pki.ca_crt.read_bytes() == before


def test_a_kept_pki_whose_webhook_certificate_expired_gets_a_new_one(tmp_path: Path) -> None:
    """A test killed mid-way can leave a short-lived certificate in a kept sandbox folder;
    the next start must not serve it (every webhook call of the sandbox would fail)."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from gatekeeper.controller import x509_build as x509util

    pki = make_pki(tmp_path / "pki")
    ca = x509.load_pem_x509_certificate(pki.ca_crt.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    now = dt.datetime.now(dt.UTC)
    short = x509util.leaf_certificate(
        ca, ca_key, x509util.new_key(), x509util.name("x"),  # type: ignore[arg-type]
        not_before=now - dt.timedelta(minutes=2), not_after=now - dt.timedelta(minutes=1),
        server_names=["127.0.0.1"],
    )  # fmt: skip
    (pki.webhook_dir / "tls.crt").write_bytes(short.public_bytes(serialization.Encoding.PEM))
    before = pki.ca_crt.read_bytes()
    make_pki(tmp_path / "pki")
    renewed = x509.load_pem_x509_certificate((pki.webhook_dir / "tls.crt").read_bytes())
    assert renewed.not_valid_after_utc - now > dt.timedelta(days=300)
    assert renewed.issuer == ca.subject and pki.ca_crt.read_bytes() == before, "same CA"


def _pod(
    group: int, role: str, *, node: str = "", ready: bool = False, gated: bool = False, gpus: int = 1
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"vllm-{group}-{role}",
            "labels": {
                "leaderworkerset.sigs.k8s.io/name": "vllm",
                "leaderworkerset.sigs.k8s.io/group-index": str(group),
            },
        },
        "spec": {
            "nodeName": node,
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
            "schedulingGates": [{"name": GATE}] if gated else [],
        },
        "status": {
            "phase": "Running" if ready else "Pending",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_summarize_counts_whole_groups_and_stranded_gpus() -> None:
    pods = [
        _pod(0, "l", node="n0", ready=True),
        _pod(0, "w", node="n1", ready=True),  # whole
        _pod(1, "l", node="n2", ready=True),
        _pod(1, "w"),  # stranded 1
        _pod(2, "l", node="n3", ready=True),
        _pod(2, "w"),  # stranded 1
        _pod(3, "l", gated=True),
        _pod(3, "w", gated=True),  # waits, holds nothing
    ]
    v = summarize(pods, size=2)
    assert (v.whole_groups, v.gpus_held, v.gpus_stranded, v.partial_groups, v.gated_pods) == (1, 4, 2, 2, 2)
    assert "whole groups running: 1" in v.line(4)


def test_summarize_skips_pods_with_unreadable_labels_or_gpus() -> None:
    """The fault tests make malformed objects: the judge must not fail on them."""
    bad_index = _pod(0, "x", node="n9", ready=True)
    bad_index["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"] = "x"
    bad_gpus = _pod(1, "l", node="n8", ready=True)
    bad_gpus["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "lots"
    v = summarize(
        [_pod(0, "l", node="n0", ready=True), _pod(0, "w", node="n1", ready=True), bad_index, bad_gpus], 2
    )
    assert (v.whole_groups, v.gpus_held, len(v.groups)) == (1, 2, 2)


def test_fake_node_is_kwok_managed_with_gpus() -> None:
    node = fake_node("n", gpus=8, labels={"pool": "p"})
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert node["metadata"]["labels"]["pool"] == "p"


def test_volcano_scheduler_config_enqueues_gangs_and_shares_queues() -> None:
    conf = scheduler_config()
    assert [a.strip() for a in conf["actions"].split(",")] == ["enqueue", "allocate", "backfill"]
    plugins = [p["name"] for tier in conf["tiers"] for p in tier["plugins"]]
    assert {"gang", "proportion", "predicates"} <= set(plugins)
    assert "overcommit" not in plugins, "enqueue would admit PodGroups beyond the Queue"


def test_a_fresh_start_keeps_logs_bounded(tmp_path: Path) -> None:
    from gatekeeper_lab.sandbox.process import Runner

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "audit.log").write_bytes(b"x" * 2048)
    (logs / "audit.log.1").write_bytes(b"old")
    (logs / "etcd.log").write_bytes(b"y" * 10)
    runner = Runner(tmp_path, logs, tmp_path / "bin", tmp_path / "kubeconfig", tmp_path / "state.json")
    assert runner.rotate_logs(max_bytes=1024) == ["audit.log"]
    assert (logs / "audit.log.1").read_bytes() == b"x" * 2048, "the last run's log is kept, the older dropped"
    assert not (logs / "audit.log").exists() and (logs / "etcd.log").read_bytes() == b"y" * 10


def test_prometheus_scrapes_the_gatekeeper_every_second() -> None:
    conf = scrape_config(18080)
    assert conf["global"]["scrape_interval"] == "1s"
    [job] = conf["scrape_configs"]
    assert (job["job_name"], job["metrics_path"]) == (JOB, "/metrics")
    assert job["static_configs"] == [{"targets": ["127.0.0.1:18080"], "labels": {"cluster": "sandbox"}}]


def test_lws_config_turns_on_lws_own_gang_scheduling_only_when_asked(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    ports = {"lws_webhook": 1, "lws_health": 2}
    assert "gangSchedulingManagement" not in lws_config(ports, pki)
    on = lws_config(ports, pki, "volcano")
    assert on["gangSchedulingManagement"] == {"schedulerProvider": "volcano"}
    with pytest.raises(ValueError, match="knows volcano"):
        lws_config(ports, pki, "yunikorn")


def test_kwok_pod_ready_stage_waits_for_the_pods_own_delay_and_only_then() -> None:
    from gatekeeper_lab.sandbox.kwok import READY_DELAY_ANNOTATION, ready_after

    stage = {"kind": "Stage", "metadata": {"name": "pod-ready"}, "spec": {"next": {"statusTemplate": "x"}}}
    made = ready_after(stage)
    assert made["spec"]["next"] == {"statusTemplate": "x"}, "what the stage does is kept"
    assert made["spec"]["delay"]["durationMilliseconds"] == 0, "no annotation: Ready at once"
    assert READY_DELAY_ANNOTATION in made["spec"]["delay"]["durationFrom"]["jq"]["expression"]
    assert "delay" not in stage["spec"], "KWOK's own stage is not changed in place"


def test_kwok_stage_files_rewrite_only_the_pod_ready_stage(tmp_path: Path) -> None:
    from gatekeeper_lab.sandbox.kwok import stage_files

    root = tmp_path / "kwok"
    files = root / "files"
    for part in ("node/fast", "node/heartbeat-with-lease", "pod/fast"):
        (files / "kustomize" / "stage" / part).mkdir(parents=True)
    for name in ("node-initialize.yaml", "kustomization.yaml"):
        (files / "kustomize" / "stage" / "node" / "fast" / name).write_text("{}")
    for name in ("pod-ready.yaml", "pod-delete.yaml"):
        doc = {"kind": "Stage", "metadata": {"name": name}, "spec": {}}
        (files / "kustomize" / "stage" / "pod" / "fast" / name).write_text(yaml.safe_dump(doc))
    installed = build.Installed(component=build.load_pins()["kwok"], root=root)
    used = stage_files(installed, tmp_path / "run")
    assert [p.name for p in used] == ["node-initialize.yaml", "pod-delete.yaml", "kwok-pod-ready.yaml"]
    assert "delay" in yaml.safe_load(used[-1].read_text())["spec"]
    assert "delay" not in yaml.safe_load(used[1].read_text())["spec"]


@pytest.mark.parametrize(
    ("asked", "started"),
    [
        ((False, False, False, False, False), []),
        ((True, True, True, True, True), ["kueue", "karpenter", "volcano", "prometheus", "crane"]),
        ((False, False, True, False, True), ["volcano", "crane"]),
    ],
    ids=["none", "all, in their order", "some"],
)
def test_the_side_components_are_those_asked_in_their_order(
    asked: tuple[bool, bool, bool, bool, bool], started: list[str]
) -> None:
    from gatekeeper_lab.sandbox.sides import sides_of

    sides = sides_of(None, None, None, *asked)  # type: ignore[arg-type]  # nothing is started
    assert [s.component for s in sides] == started
    assert all(s.component in build.load_pins() for s in sides)
