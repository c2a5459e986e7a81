"""The attack watch's arithmetic (``tests/e2e/watch.py``) and table (``tests/e2e/attack_table.py``):
what a sample of pods says about GPUs held and groups left half-placed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e import attack_table
from tests.e2e.watch import Sample, peak, pod_gpus, sample, stranded


def pod(
    name: str,
    *,
    gpus: int = 1,
    node: str | None = "n0",
    phase: str = "Running",
    group: tuple[str, str] | None = ("vllm", "0"),
    size: int | None = 2,
    namespace: str = "team",
    init_gpus: int | None = None,
    limits_only: bool = False,
    ready: bool = True,
) -> dict[str, Any]:
    """A pod; named ``w...``, a worker (index 1), else a leader."""
    res = (
        {"limits": {"nvidia.com/gpu": str(gpus)}}
        if limits_only
        else {"requests": {"nvidia.com/gpu": str(gpus)}}
    )
    labels = (
        {
            "leaderworkerset.sigs.k8s.io/name": group[0],
            "leaderworkerset.sigs.k8s.io/group-index": group[1],
            "leaderworkerset.sigs.k8s.io/worker-index": "1" if name.startswith("w") else "0",
        }
        if group
        else {}
    )
    notes = {"leaderworkerset.sigs.k8s.io/size": str(size)} if size is not None else {}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": res}]}
    if init_gpus is not None:
        spec["initContainers"] = [
            {"name": "i", "resources": {"requests": {"nvidia.com/gpu": str(init_gpus)}}}
        ]
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": notes},
        "spec": spec,
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}]},
    }


@pytest.mark.parametrize(
    ("body", "gpus"),
    [
        (pod("a", gpus=2), 2),
        (pod("a", gpus=1, limits_only=True), 1),
        (pod("a", gpus=1, init_gpus=4), 4),
        ({"metadata": {}, "spec": {"containers": [{"name": "c"}]}}, 0),
    ],
    ids=["requests", "limits default requests", "an init container's larger ask", "none"],
)
def test_a_pods_gpus_are_counted_as_the_scheduler_counts_them(body: dict[str, Any], gpus: int) -> None:
    assert pod_gpus(body) == gpus


@pytest.mark.parametrize(
    ("pods", "bound", "partial"),
    [
        ([pod("l"), pod("w", node="n1")], 2, {}),
        ([pod("l"), pod("w", node=None, phase="Pending")], 1, {("team", "vllm", "0"): 1}),
        ([pod("l", phase="Succeeded"), pod("w", node="n1", phase="Failed")], 0, {}),
        ([pod("x", group=None, size=None)], 1, {}),
        ([pod("l", size=None)], 1, {}),
        ([pod("l"), pod("w", node="n1"), pod("extra", node="n2")], 3, {}),
        ([pod("l", ready=False)], 1, {}),
        ([pod("l", ready=False), pod("w", node=None, phase="Pending")], 1, {("team", "vllm", "0"): 1}),
        ([pod("l")], 1, {("team", "vllm", "0"): 1}),
    ],
    ids=[
        "a whole group",
        "a leader bound, its worker not",
        "ended pods hold nothing",
        "a pod of no group is held, not partial",
        "a group of no stated size is not partial",
        "more pods bound than the size is not partial",
        "a lone leader loading (LeaderReady: its workers come once it is Ready) is not partial",
        "a loading leader whose worker exists is partial",
        "a Ready leader without its workers is partial",
    ],
)
def test_a_sample_counts_gpus_held_and_groups_partly_bound(
    pods: list[dict[str, Any]], bound: int, partial: dict[tuple[str, str, str], int]
) -> None:
    got = sample(pods, at=0.0)
    assert (got.bound, dict(got.partial)) == (bound, partial)


def test_with_a_pools_nodes_only_the_pods_on_them_count_and_their_groups() -> None:
    pods = [
        pod("l", node="p0"),
        pod("w", node=None, phase="Pending"),
        pod("elsewhere", node="x0", group=("other", "0")),
        pod("intruder", node="p1", group=None, size=None, namespace="thief"),
    ]
    got = sample(pods, at=0.0, on={"p0", "p1"})
    assert (got.bound, dict(got.partial)) == (2, {("team", "vllm", "0"): 1})


def _samples(*partials: dict[tuple[str, str, str], int]) -> list[Sample]:
    return [Sample(at=float(t), bound=sum(p.values()), partial=p) for t, p in enumerate(partials)]


A, B = ("team", "a", "0"), ("team", "b", "0")


@pytest.mark.parametrize(
    ("samples", "after", "left"),
    [
        (_samples({A: 1}, {A: 1}, {}), 5, 0),
        (_samples(*([{A: 1}] * 7)), 5, 1),
        (_samples(*([{A: 1}] * 3), {}, *([{A: 1}] * 3)), 5, 0),
        (_samples(*([{A: 1, B: 2}] * 6)), 5, 3),
        (_samples(*([{A: 1}] * 6), *([{A: 1, B: 2}] * 2)), 5, 1),
        ([], 5, 0),
    ],
    ids=[
        "briefly partial while binding",
        "partial for longer than allowed",
        "a break starts the clock again",
        "two groups stranded at once",
        "a group partial only briefly is not added",
        "no samples",
    ],
)
def test_stranded_gpus_are_those_of_groups_partial_for_too_long(
    samples: list[Sample], after: float, left: int
) -> None:
    assert stranded(samples, after=after) == left


def test_the_peak_is_the_most_gpus_held_in_one_sample() -> None:
    assert peak([Sample(0, 2, {}), Sample(1, 5, {}), Sample(2, 3, {})]) == 5
    assert peak([]) == 0


def test_a_row_outside_a_watch_fails_and_one_inside_is_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attack_table, "ROWS", [])
    monkeypatch.setattr(attack_table, "WATCHING", [])
    with pytest.raises(AssertionError, match=r"outside watch\.watching"):
        attack_table.add("edit: scale", "refused", "no")
    attack_table.WATCHING.append(object())
    attack_table.add("edit: scale", "refused", "Error from\n  server")
    attack_table.measure(0, "2 of 2", "0", "yes, in 3 s")
    assert attack_table.ROWS == [
        ("edit: scale", "refused", "Error from server", "2 of 2", "0", "yes, in 3 s")
    ]
    header, row = attack_table.lines(attack_table.ROWS)
    assert header.split(" | ")[0].strip() == "attack" and header.endswith("seen")
    assert row.endswith("Error from server") and "2 of 2" in row


def _kubectl(tmp_path: Any, pods: list[dict[str, Any]]) -> Any:
    """A stand-in kubectl that answers every ``get pods`` with ``pods``."""
    import json

    listing = tmp_path / "pods.json"
    listing.write_text(json.dumps({"items": pods}))
    script = tmp_path / "kubectl"
    script.write_text(f"#!/bin/sh\ncat {listing}\n")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize(
    ("pods", "quota", "fails"),
    [
        ([pod("l"), pod("w", node="n1")], 2, None),
        ([pod("l"), pod("w", node="n1")], 1, "2 GPUs bound"),
    ],
    ids=["within quota", "past quota"],
)
def test_a_watch_measures_its_rows_and_holds_them_to_the_quota(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, pods: list[dict[str, Any]], quota: int, fails: str | None
) -> None:
    from tests.e2e.watch import watching

    monkeypatch.setattr(attack_table, "ROWS", [])
    kubectl = _kubectl(tmp_path, pods)
    with (
        pytest.raises(AssertionError, match=fails) if fails else _nothing(),
        watching(
            kubectl, tmp_path / "kubeconfig", ["team"], others=lambda: "yes, in 1 s", quota=quota, every=0.05
        ),
    ):
        attack_table.add("edit: something", "refused", "no")
    assert attack_table.ROWS[0][3:] == (f"2 of {quota}", "0", "yes, in 1 s")


def _nothing() -> Any:
    import contextlib

    return contextlib.nullcontext()


def _watch_a_leader_alone(tmp_path: Any) -> None:
    """A watch whose group keeps its leader bound and its worker gated for 30 s (samples
    stamped as the sampler stamps them), one row added inside it."""
    import time

    from tests.e2e.watch import watching

    leader_only = [pod("l", node="n0"), pod("w", node=None, phase="Pending")]
    kubectl = _kubectl(tmp_path, leader_only)
    with watching(kubectl, tmp_path / "kubeconfig", ["team"], others=lambda: "yes", quota=2, every=0.05) as w:
        assert w.quota == 2
        attack_table.add("edit: something", "contained", "no")
        now = time.monotonic()
        w.samples.extend(sample(leader_only, at=now + t) for t in range(0, 40, 10))


def test_a_group_left_partly_bound_fails_the_attack_and_the_table_shows_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(attack_table, "ROWS", [])
    with pytest.raises(AssertionError, match="1 GPUs held by groups left partly bound"):
        _watch_a_leader_alone(tmp_path)
    assert attack_table.ROWS[0][4] == "1"


def test_a_group_whose_held_pods_are_all_leaving_is_not_partial() -> None:
    """A given-back group's leader held terminating by a tenant's finalizer still holds its GPU
    (counted) but is no half-placed admission; beside a worker that stays, it is partial."""
    leaving = pod("l", node="n1")
    leaving["metadata"]["deletionTimestamp"] = "2026-12-07T10:00:00Z"
    got = sample([leaving], at=0.0)
    assert (got.bound, dict(got.partial)) == (1, {})
    got = sample([leaving, pod("w", node="n2", ready=False, size=3)], at=0.0)
    assert dict(got.partial) == {("team", "vllm", "0"): 2}
