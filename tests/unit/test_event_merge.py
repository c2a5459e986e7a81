"""The Events a pass earned, about one object for one reason, are posted as one.

A scale-up of 100 groups of one LWS admitted in a pass earned 100 ``Admitted`` Events, each
a write to the API server and an object in etcd for an hour; one Event on the LWS tells them
all (each group's record says the rest)."""

from __future__ import annotations

from gatekeeper.core.writes.plan import EVENT_MESSAGE_LIMIT, Event, Mark, Op, Write, merge_events


def told(message: str, *, lws: str = "vllm", reason: str = "Admitted", warning: bool = False) -> Write:
    about = {"kind": "LeaderWorkerSet", "name": lws, "namespace": "team", "uid": f"u-{lws}"}
    event = Event(reason, message, warning, about)
    return Write(Op.EVENT, "leaderworkersets", "team", lws, event, marks=(Mark("event", message, "1"),))


def messages(writes: list[Write]) -> list[str]:
    return [w.body.message for w in writes]


def test_one_event_per_object_reason_and_type_in_the_order_each_first_came() -> None:
    merged = merge_events(
        [
            told("group 0 admitted"),
            told("group 0 admitted", lws="other"),
            told("group 1 admitted"),
            told("group 2 given back", reason="AdmissionTimeout", warning=True),
            told("group 3 given back", reason="AdmissionTimeout", warning=True),
            told("group 4 admitted"),
        ]
    )
    assert messages(merged) == [
        "group 0 admitted; group 1 admitted; group 4 admitted",
        "group 0 admitted",
        "group 2 given back; group 3 given back",
    ]
    assert [w.name for w in merged] == ["vllm", "other", "vllm"]
    assert merged[2].body.warning and merged[2].body.reason == "AdmissionTimeout"
    keys = [m.key for m in merged[0].marks]
    assert keys == ["group 0 admitted", "group 1 admitted", "group 4 admitted"], "every part's marks"


def test_a_lone_event_is_posted_as_it_was() -> None:
    one = told("group 0 admitted")
    assert merge_events([one]) == [one]
    assert merge_events([]) == []


def test_the_message_stops_at_the_limit_and_says_how_many_more() -> None:
    parts = [told(f"group {i} admitted into pool a: 1 nvidia.com/gpu on node-{i:04}") for i in range(100)]
    [merged] = merge_events(parts)
    message = merged.body.message
    assert len(message) <= EVENT_MESSAGE_LIMIT
    shown = message.count("admitted into pool")
    assert 10 < shown < 100
    assert message.endswith(f"; and {100 - shown} more")
    assert message.startswith("group 0 admitted into pool a")
