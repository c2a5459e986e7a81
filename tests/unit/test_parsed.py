"""``core.kube.parsed``: objects read once per resourceVersion at the snapshot's edge."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from gatekeeper.core.kube.parsed import ParseMemo, parse_each


def obj(
    name: str, rv: str = "1", *, size: object = 1, uid: str | None = None, ns: str = ""
) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, "resourceVersion": rv, "uid": uid if uid is not None else f"u-{name}"}
    if ns:
        m["namespace"] = ns
    return {"metadata": m, "spec": {"size": size}, "status": {"seen": rv}}


class Counting:
    """A parser that counts its calls and refuses a size that is not a positive int."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, o: Mapping[str, Any]) -> tuple[str, int]:
        self.calls.append(o["metadata"]["name"])
        size = o["spec"]["size"]
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"spec.size: expected a positive integer, got {size!r}")
        return (o["metadata"]["name"], size)


def test_an_object_is_parsed_again_only_when_its_resource_version_changes() -> None:
    parse = Counting()
    memo = ParseMemo(parse)
    assert memo([obj("a"), obj("b")]).ok == (("a", 1), ("b", 1))
    assert memo([obj("a"), obj("b")]).ok == (("a", 1), ("b", 1))
    assert parse.calls == ["a", "b"]
    assert memo([obj("a", "2", size=3), obj("b")]).ok == (("a", 3), ("b", 1))
    assert parse.calls == ["a", "b", "a"]


def test_an_unreadable_object_is_set_apart_by_name_with_why_and_remembered() -> None:
    parse = Counting()
    memo = ParseMemo(parse)
    first = memo([obj("good"), obj("bad", size="x"), obj("team", ns="t", size=0)])
    assert first.ok == (("good", 1),)
    assert first.bad == {
        "bad": "spec.size: expected a positive integer, got 'x'",
        "t/team": "spec.size: expected a positive integer, got 0",
    }
    assert first.statuses == {"good": {"seen": "1"}, "bad": {"seen": "1"}, "t/team": {"seen": "1"}}
    again = memo([obj("good"), obj("bad", size="x"), obj("team", ns="t", size=0)])
    assert again == first
    assert len(parse.calls) == 3


def test_only_the_last_lists_objects_are_kept() -> None:
    parse = Counting()
    memo = ParseMemo(parse)
    memo([obj("a"), obj("b")])
    memo([obj("b")])
    memo([obj("a"), obj("b")])
    assert parse.calls == ["a", "b", "a"]


def test_a_name_is_read_once_per_list_the_first_wins() -> None:
    assert parse_each([obj("a", size=1), obj("a", "2", size=5, uid="other")], Counting()).ok == (("a", 1),)


@pytest.mark.parametrize(
    "meta", [{"name": "a"}, {"name": "a", "uid": "u"}, {"name": "a", "resourceVersion": "1"}]
)
def test_an_object_without_uid_and_resource_version_is_parsed_each_time(meta: dict[str, str]) -> None:
    parse = Counting()
    memo = ParseMemo(parse)
    o = {"metadata": meta, "spec": {"size": 2}}
    memo([o])
    memo([o])
    assert parse.calls == ["a", "a"]


def test_a_parser_s_own_bug_is_not_taken_for_an_unreadable_object() -> None:
    def broken(o: Mapping[str, Any]) -> int:
        raise KeyError("size")

    with pytest.raises(KeyError):
        parse_each([obj("a")], broken)
