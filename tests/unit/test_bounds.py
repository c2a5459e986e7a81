"""Every number from a user's object is bounded: a bad LWS gets ``InvalidSpec``, the others go on.

Each case once ended the whole controller (and with it the webhook in the same process):
an ``OverflowError`` from a request of 320 digits, a ``ValueError`` from formatting one of
4,300 digits, a list of two billion workers from ``size: 2147483647``, a set of millions
of group indices from ``replicas`` raised through ``/scale``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from core_builders import lws, node, pool, read_pools

from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.kueue import KueueSnapshot, decide_kueue
from gatekeeper.core.backends.pools import Snapshot, decide
from gatekeeper.core.kube.quantity import parse_quantity
from gatekeeper.core.model.demand import MAX_GROUP_SIZE, group_demand
from gatekeeper.core.model.lws import MAX_REPLICAS, replicas

GPU = "nvidia.com/gpu"


def tenant_lws(name: str, **changes: Any) -> dict[str, Any]:
    obj = lws(name, "team").pool("a").uid(f"uid-{name}").size(2).replicas(1).worker(gpu_limit=1).obj()
    obj["metadata"]["generation"] = 1
    for key, value in changes.items():
        if key == "gpus":
            obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["resources"] = {
                "limits": {GPU: value}
            }
        elif key == "size":
            obj["spec"]["leaderWorkerTemplate"]["size"] = value
        else:
            obj["spec"][key] = value
    return obj


def snapshot(*lwss: dict[str, Any]) -> Snapshot:
    return Snapshot(
        lwss=list(lwss),
        pods=[],
        bound_pods=[],
        nodes=[node(f"n{i}").labels(pool="a").alloc(gpu=1).parsed() for i in range(4)],
        pools=read_pools([pool("a").quota(gpu=4).obj()]),
        records=[],
    )


BAD = {
    "a request of 320 digits": {"gpus": "9" * 320},
    "a request of 4,300 digits": {"gpus": "9" * 4300},
    "a request of 5,000 digits and a fraction": {"gpus": "1." + "1" * 5000},
    "size 2147483647": {"size": 2147483647},
    "replicas 10 million": {"replicas": 10_000_000},
}


@pytest.mark.parametrize("changes", BAD.values(), ids=BAD.keys())
def test_a_bad_lws_is_invalid_spec_and_the_good_one_is_admitted(changes: dict[str, Any]) -> None:
    good, bad = tenant_lws("good"), tenant_lws("bad", **changes)
    began = time.perf_counter()
    actions = decide(snapshot(bad, good))
    assert time.perf_counter() - began < 5, "bounded work, not a list of a billion pods"
    assert [a.group.key.name for a in actions.admit] == ["good"]
    reasons = {w.group.key.name: w.reason for w in actions.waiting}
    assert reasons.get("bad", Reason.INVALID_SPEC) is Reason.INVALID_SPEC
    assert all(w.group.key.name != "bad" or w.reason is Reason.INVALID_SPEC for w in actions.waiting)


@pytest.mark.parametrize("changes", BAD.values(), ids=BAD.keys())
def test_the_kueue_backend_does_not_raise_either(changes: dict[str, Any]) -> None:
    bad = tenant_lws("bad", **changes)
    actions = decide_kueue(KueueSnapshot(lwss=[bad, tenant_lws("good")], pods=[], records=[], workloads=[]))
    assert {g.key.name for g in actions.create_records} >= {"good"}


def test_quantities_with_too_many_digits_are_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="digits"):
        parse_quantity("9" * 100)
    assert parse_quantity("1" * 30) == int("1" * 30)


def test_group_size_and_replicas_have_a_ceiling_that_names_itself() -> None:
    with pytest.raises(ValueError, match=str(MAX_GROUP_SIZE)):
        group_demand(tenant_lws("big", size=MAX_GROUP_SIZE + 1))
    assert len(group_demand(tenant_lws("ok", size=MAX_GROUP_SIZE)).pods) == MAX_GROUP_SIZE
    with pytest.raises(ValueError, match=str(MAX_REPLICAS)):
        replicas(tenant_lws("many", replicas=MAX_REPLICAS + 1))
    assert replicas(tenant_lws("fine", replicas=MAX_REPLICAS)) == MAX_REPLICAS
