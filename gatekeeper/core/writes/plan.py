"""Writes as data: what a pass asks the controller to do, in order, with no I/O.

Why this exists: every backend's pass ends in writes (create a record, admit it, lift its
pods' gates, post an Event, write a Pool's status...), and how they hang together is part
of the decision: a group's gates are lifted only after its record says ``Admitted=True``,
a record made in this pass is admitted under the resourceVersion its creation returned,
a Workload is owned by the record made just before it. So a backend returns a ``Plan``:
stages run one after the other, the writes of a stage side by side, and each write's
``then`` only once it went through. The controller executes a plan and decides nothing.

The Events a pass earned are posted after its last stage, those about one object for one
reason as one Event (``merge_events``): 100 groups admitted in a pass, one Event on their
LWS, not 100 writes to the API server.

``Memory`` is what a controller remembers between passes that is safe to lose (which
Event it already posted for an LWS and reason, when it last rewrote a waiting message);
a plan reads it, and a write that goes through records its ``marks`` in it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from gatekeeper.core.kube.keys import LWS_API_VERSION, LWS_KIND, POOL_LABEL
from gatekeeper.core.kube.objects import as_map, meta
from gatekeeper.core.model.group import GroupKey

__all__ = [
    "MESSAGE_REFRESH_SECONDS",
    "Event",
    "EventsOnce",
    "Mark",
    "Memory",
    "Op",
    "Plan",
    "Write",
    "involved",
    "merge_events",
    "rfc3339",
    "walk",
]


class Op(StrEnum):
    """The API calls a plan can ask for."""

    CREATE = "create"
    DELETE = "delete"
    MERGE_STATUS = "merge-status"
    """Merge-patch the ``status`` subresource (``body`` is the status)."""
    APPLY_STATUS = "apply-status"
    """Server-side apply to the ``status`` subresource (``body`` is the whole object)."""
    JSON_PATCH = "json-patch"
    """RFC 6902 patch of the object (``body`` is the list of operations)."""
    EVENT = "event"
    """Post a core/v1 Event about the object (``body`` is an ``Event``); best effort."""


@dataclass(frozen=True)
class Event:
    """An Event about ``Write``'s object: its reason, message and type."""

    reason: str
    message: str
    warning: bool = False
    involved: Mapping[str, Any] = field(default_factory=dict)
    """apiVersion, kind, name, namespace and uid of the object it is about."""


@dataclass(frozen=True)
class Mark:
    """What ``Memory`` keeps once a write went through: ``kind`` ("event" or "message"), a key, a value."""

    kind: str
    key: str
    value: str = ""


@dataclass(frozen=True)
class Write:
    """One API write, and what to do once it went through."""

    op: Op
    resource: str
    """The plural of the kind, as in ``core.kube.keys`` (``groupadmissions``, ``pods``, ...)."""
    namespace: str | None
    name: str
    body: Any = None
    guard: str | None = None
    """A resourceVersion: the write fails (a Conflict) if the object changed since."""
    uid: str | None = None
    """With ``DELETE``: delete only the object of this UID, not one made since under its name."""
    guard_from_parent: bool = False
    """Guard with the resourceVersion the parent write returned (a record made in this pass)."""
    owner_from_parent: bool = False
    """Set the uid of ``body``'s first owner reference to the uid of the object the parent made."""
    then: tuple[Write, ...] = ()
    """Writes that follow this one, side by side, once it went through."""
    marks: tuple[Mark, ...] = ()
    tag: str = ""
    """What the write means, for logs and metrics (``admit``, ``ungate``, ``release``, ...)."""
    labels: tuple[str, ...] = ()
    """Metric labels of ``tag`` (a pool's name, say)."""
    measure: float = 0.0
    """A figure the metric of ``tag`` observes (an admission's wait, in seconds)."""
    field_manager: str = ""
    """With ``APPLY_STATUS``: the server-side apply field manager."""


Plan = tuple[tuple[Write, ...], ...]
"""Stages in order; the writes of one stage side by side."""


def walk(plan: Plan) -> Iterator[Write]:
    """Every write of a plan, ``then`` writes included, each before its ``then`` (depth first)."""
    stack = [w for stage in reversed(plan) for w in reversed(stage)]
    while stack:
        one = stack.pop()
        yield one
        stack.extend(reversed(one.then))


DEFAULT_EVENTS_PER_NAMESPACE_PER_MINUTE = 120
"""Events the gatekeeper posts in one namespace within a minute, at most: a tenant that
changes its LWSs without end (each change may be told again) or scales them up and down
makes the gatekeeper write no faster than that into its namespace."""


MESSAGE_REFRESH_SECONDS = 60.0
"""A waiting group's message is rewritten at most this often when only its numbers change
(a new reason is written at once): 1,000 waiting groups in a churning pool are then at most
17 writes a second, not one per group per pass. Every backend's records follow it."""


class Memory:
    """What a controller remembers between passes that is safe to lose (bounded)."""

    def __init__(
        self,
        limit: int = 100_000,
        events_per_minute: int = DEFAULT_EVENTS_PER_NAMESPACE_PER_MINUTE,
        on_drop: Callable[[str], None] | None = None,
    ) -> None:
        self.limit = limit
        self.events_per_minute = events_per_minute
        self.on_drop = on_drop
        """Told the namespace of each Event not posted (the I/O layer counts them)."""
        self.events: dict[str, str] = {}
        """Event slot (namespace/LWS/reason) -> the LWS generation and pool it was posted for."""
        self.messages: dict[str, float] = {}
        """Record (namespace/name) -> when its waiting message was last written (monotonic s)."""
        self.posted: dict[str, tuple[int, int]] = {}
        """Namespace -> (the minute, since the epoch, of its window; Events planned in it)."""
        self.dropped = 0
        """Events not posted since the start, their namespace's minute spent."""

    def take_event(self, namespace: str, at: datetime) -> bool:
        """May one more Event be posted in ``namespace`` in the minute of ``at``? (Counted.)"""
        minute = int(at.timestamp()) // 60
        window, count = self.posted.get(namespace, (minute, 0))
        if window != minute:
            count = 0
        if count >= self.events_per_minute:
            self.dropped += 1
            if self.on_drop is not None:
                self.on_drop(namespace)
            return False
        if len(self.posted) >= self.limit and namespace not in self.posted:
            self.posted.clear()
        self.posted[namespace] = (minute, count + 1)
        return True

    def apply(self, marks: tuple[Mark, ...], clock: float) -> None:
        for mark in marks:
            into: dict[str, Any] = self.events if mark.kind == "event" else self.messages
            if len(into) >= self.limit:
                into.clear()
            into[mark.key] = mark.value if mark.kind == "event" else clock


def rfc3339(moment: datetime) -> str:
    """A time as the API writes it (seconds, UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def involved(lws: Mapping[str, Any]) -> dict[str, Any]:
    """The reference an Event about ``lws`` carries."""
    m = meta(lws)
    return {
        "apiVersion": lws.get("apiVersion", LWS_API_VERSION),
        "kind": LWS_KIND,
        "name": m.get("name"),
        "namespace": m.get("namespace"),
        "uid": m.get("uid"),
    }


class EventsOnce:
    """One Event per LWS and reason change, not one per group: 100 waiting groups, one line.
    With ``at`` (the pass's time), no more than the memory's ``events_per_minute`` in one
    namespace (``Memory.take_event``): past it, an Event is not posted (and not remembered as
    posted, so that it is told once the minute has passed)."""

    def __init__(
        self,
        memory: Memory,
        lwss: Mapping[tuple[str, str], Mapping[str, Any]],
        at: datetime | None = None,
    ) -> None:
        self.memory, self.lwss, self.at = memory, lwss, at
        self.planned: set[str] = set()

    def once(
        self, group: GroupKey, reason: str, message: str, *, warning: bool, force: bool = False
    ) -> Write | None:
        """An Event about the group's LWS, unless one was posted (or planned) for this reason
        since the LWS's spec or pool last changed (``force``: even then). Not its
        resourceVersion: the LWS controller rewrites the status as pods come and go, and each
        rewrite would tell the same thing again."""
        lws = self.lwss.get((group.namespace, group.name))
        if lws is None:
            return None
        slot = f"{group.namespace}/{group.name}/{reason}"
        m = meta(lws)
        version = f"{m.get('generation')}/{as_map(m.get('labels')).get(POOL_LABEL)}"
        if not force and (slot in self.planned or self.memory.events.get(slot) == version):
            return None
        told = self.always(lws, reason, message, warning=warning, marks=(Mark("event", slot, version),))
        if told is not None:
            self.planned.add(slot)
        return told

    def always(
        self,
        lws: Mapping[str, Any],
        reason: str,
        message: str,
        *,
        warning: bool = False,
        marks: tuple[Mark, ...] = (),
    ) -> Write | None:
        """An Event about ``lws``, unless its namespace's minute is spent."""
        m = meta(lws)
        if self.at is not None and not self.memory.take_event(str(m.get("namespace") or ""), self.at):
            return None
        event = Event(reason, message, warning, involved(lws))
        return Write(
            Op.EVENT,
            "leaderworkersets",
            str(m.get("namespace") or ""),
            str(m.get("name")),
            event,
            marks=marks,
        )


EVENT_MESSAGE_LIMIT = 1024
"""The longest message an Event gets (the API server's limit for an Event's note)."""


def merge_events(events: Iterable[Write]) -> list[Write]:
    """``events`` (``Op.EVENT`` writes that went through their parents) with those about the
    same object, reason and type told as one Event, in the order each first came; its message
    the parts' messages one after the other as far as ``EVENT_MESSAGE_LIMIT`` allows, then how
    many more there were (each group's record says the rest), and its marks all of theirs."""
    slots: dict[tuple[str, str, str, str, bool], list[Write]] = {}
    for one in events:
        event: Event = one.body
        about = event.involved
        key = (
            str(about.get("uid") or ""),
            str(one.namespace or ""),
            one.name,
            event.reason,
            event.warning,
        )
        slots.setdefault(key, []).append(one)
    return [parts[0] if len(parts) == 1 else _merged(parts) for parts in slots.values()]


def _merged(parts: list[Write]) -> Write:
    first: Event = parts[0].body
    messages = [str(p.body.message) for p in parts]
    told = ""
    for i, message in enumerate(messages):
        left = len(messages) - i - 1
        longer = f"{told}; {message}" if told else message
        if told and len(longer) + (len(f"; and {left} more") if left else 0) > EVENT_MESSAGE_LIMIT:
            told = f"{told}; and {left + 1} more"
            break
        told = longer
    marks = tuple(mark for p in parts for mark in p.marks)
    return replace(parts[0], body=Event(first.reason, told, first.warning, first.involved), marks=marks)
