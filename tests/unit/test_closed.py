"""``core.model.closed``: which tolerations open a closed pool's nodes (taint ``lws-gatekeeper.io/pool``)."""

from __future__ import annotations

from typing import Any

import pytest

from gatekeeper.core.kube.keys import POOL_TAINT_KEY
from gatekeeper.core.model.closed import describe, opening_tolerations, opens_closed_pools, what_opens


@pytest.mark.parametrize(
    ("toleration", "opens", "said"),
    [
        ({"key": POOL_TAINT_KEY, "operator": "Equal", "value": "a", "effect": "NoSchedule"}, True,
         "lws-gatekeeper.io/pool=a:NoSchedule"),
        ({"key": POOL_TAINT_KEY, "value": "a"}, True, "lws-gatekeeper.io/pool=a"),  # Equal is the default
        ({"key": POOL_TAINT_KEY, "operator": "Exists"}, True, "lws-gatekeeper.io/pool (operator Exists)"),
        # an effect the taint does not have still names the reserved key: refused all the same
        ({"key": POOL_TAINT_KEY, "value": "a", "effect": "PreferNoSchedule"}, True,
         "lws-gatekeeper.io/pool=a:PreferNoSchedule"),
        ({"operator": "Exists"}, True, "every taint (operator Exists, no key)"),
        ({"key": "", "operator": "Exists", "effect": "NoSchedule"}, True,
         "every taint:NoSchedule (operator Exists, no key)"),
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, False, "nvidia.com/gpu (operator Exists)"),
        ({"key": "lws-gatekeeper.io/charged-to", "value": "u.0", "effect": "NoSchedule"}, False,
         "lws-gatekeeper.io/charged-to=u.0:NoSchedule"),
        ({"key": "lws-gatekeeper.io/pool-x", "operator": "Exists"}, False, "lws-gatekeeper.io/pool-x"),
        ({"operator": "Equal"}, False, "every taint"),  # the API server refuses it; it opens nothing
    ],
)  # fmt: skip
def test_what_opens_a_closed_pool(toleration: dict[str, Any], opens: bool, said: str) -> None:
    assert opens_closed_pools(toleration) is opens
    assert describe(toleration).startswith(said)


def test_the_tolerations_that_open_and_the_words_for_them() -> None:
    spec = {
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists"},
            {"operator": "Exists"},
            "not a toleration",
            {"key": POOL_TAINT_KEY, "value": "b", "effect": "NoSchedule"},
        ]
    }
    assert opening_tolerations(spec) == [spec["tolerations"][1], spec["tolerations"][3]]
    said = what_opens(spec)
    assert said is not None
    assert said.startswith(
        "its toleration every taint (operator Exists, no key), lws-gatekeeper.io/pool=b:NoSchedule "
        "tolerates the taint lws-gatekeeper.io/pool of closed pools' nodes"
    )
    assert what_opens({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}) is None
    assert what_opens({}) is None and what_opens({"tolerations": None}) is None
