"""Objects of one kind as a decision receives them: parsed once, the unreadable set apart.

Why this exists: a decision must not re-read the same raw object in every pass and every
stage (a Pool was parsed four times a pass), nor decide what an unreadable one means in
each place it is met. The edge (the controller's snapshot) turns the informer's objects
into ``Parsed``: the typed values, and for each object that could not be read, its name and
why, which the decision reports on that object alone. ``ParseMemo`` keeps what was parsed by
(uid, resourceVersion), so an object is parsed again only when it changed; the controller's
caches own one per kind, the core holds no state. The parsers raise ``ValueError`` (or
``ArithmeticError``) naming the field; nothing else is caught, so a parser's own bug is seen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from gatekeeper.core.kube.objects import as_map, generation_of, meta

__all__ = ["ParseMemo", "Parsed", "parse_each"]

T = TypeVar("T")


@dataclass(frozen=True)
class Parsed(Generic[T]):
    """The readable objects of one kind, in the order read, and the unreadable ones."""

    ok: tuple[T, ...] = ()
    bad: Mapping[str, str] = field(default_factory=dict)
    """Name (``namespace/name`` for a namespaced object) -> why it could not be read."""
    statuses: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Name -> the object's ``status`` as read, readable or not: what a write of its status
    (a Pool's, by the gatekeeper) compares with."""
    generations: Mapping[str, int] = field(default_factory=dict)
    """Name -> its ``metadata.generation`` (0 when absent): the ``observedGeneration`` of the
    conditions a status write says of it."""


@dataclass(frozen=True)
class _Bad:
    why: str


def _name(obj: Mapping[str, Any]) -> str:
    m = meta(obj)
    ns, name = str(m.get("namespace") or ""), str(m.get("name") or "")
    return f"{ns}/{name}" if ns else name


def _version(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    m = meta(obj)
    uid, rv = m.get("uid"), m.get("resourceVersion")
    return (str(uid), str(rv)) if uid and rv else None


class ParseMemo(Generic[T]):
    """One kind's parser, remembering each object's result by (uid, resourceVersion).

    Only the objects of the last call are kept, so it holds no more than the informer does.
    Objects without a uid or resourceVersion (never from an API server) are parsed each time.
    """

    def __init__(self, parse: Callable[[Mapping[str, Any]], T]) -> None:
        self.parse = parse
        self._seen: dict[tuple[str, str], T | _Bad] = {}

    def __call__(self, objs: Iterable[Mapping[str, Any]]) -> Parsed[T]:
        seen: dict[tuple[str, str], T | _Bad] = {}
        ok: list[T] = []
        bad: dict[str, str] = {}
        statuses: dict[str, Mapping[str, Any]] = {}
        generations: dict[str, int] = {}
        for obj in objs:
            name = _name(obj)
            if name in statuses:
                continue  # an object name is unique in a list; never let a decision meet two
            statuses[name] = as_map(obj.get("status"))
            generations[name] = generation_of(obj)
            version = _version(obj)
            result = self._seen.get(version) if version is not None else None
            if result is None:
                result = self._one(obj)
            if version is not None:
                seen[version] = result
            if isinstance(result, _Bad):
                bad[name] = result.why
            else:
                ok.append(result)
        self._seen = seen
        return Parsed(tuple(ok), bad, statuses, generations)

    def _one(self, obj: Mapping[str, Any]) -> T | _Bad:
        try:
            return self.parse(obj)
        except (ValueError, ArithmeticError) as exc:
            return _Bad(str(exc))


def parse_each(objs: Iterable[Mapping[str, Any]], parse: Callable[[Mapping[str, Any]], T]) -> Parsed[T]:
    """``objs`` parsed with ``parse``, remembering nothing (a one-off read, or a test)."""
    return ParseMemo(parse)(objs)
