"""Gates lifted between passes: a pod born gated whose group already holds its admission.

Why this exists: the webhook makes a pod of an admitted group without the gate
(``core.admission.pass_through``), but a pod made a moment too early is born gated: after the
pass's snapshot and before its admission was written, or before the webhook's table had
the group. Such a pod waited for the next pass to lift its gate, seconds under load
(``benchmarks/bench_timeline.py``: 6.3 s p99 from a group's last pod to its last gate
lifted, 100 new groups). The ``Lifter`` watches the pods the pass watches and lifts such a
gate as soon as it sees the pod, or as soon as its group is admitted, with the write the
pass would make (``core.admission.pass_through.lift_for`` decides, from the same table the webhook
reads and only while that table may be used).

It only ever hastens a pass's write: a pod it is not sure of, a pod the running pass is
lifting itself (``hold``), and a write that fails are all left to the pass, which lifts
every gated pod of an admitted group it sees. It never competes with a pass: while one
writes, the lifter's writes wait for that pass's slots after the pass's own (``share``).
Made and fed by ``backends/pools.py`` and ``backends/kueue.py`` (their pods informer,
``admitted`` when a pass wrote an admission or published its table, ``hold`` and
``share`` around a pass's writes, ``sent`` for each gate the pass lifted); run by
``app.py`` beside the term's pass loops.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import anyio

from gatekeeper.controller import resources as r
from gatekeeper.controller.errors import PermanentError, TemporaryError
from gatekeeper.controller.informer import Informer
from gatekeeper.controller.kube import Kube
from gatekeeper.controller.loop import Write
from gatekeeper.core.kube.keys import LWS_NAME_LABEL
from gatekeeper.core.kube.objects import is_terminating, labels, meta
from gatekeeper.core.model.lws import group_index, is_gated
from gatekeeper.metrics import GATES_LIFTED_EARLY
from gatekeeper.webhook.pass_through import PassThrough

__all__ = ["Lifter"]

log = logging.getLogger("gatekeeper.lift")


AFTER_THE_PASS = 1
"""The rank of a lift in a pass's slots: after every write of the pass (they rank 0 or less)."""

PodKey = tuple[str, str]
GroupKey = tuple[str, str, int]


def _keys(pod: dict[str, Any]) -> tuple[PodKey, GroupKey | None]:
    m = meta(pod)
    ns, name = str(m.get("namespace") or ""), str(m.get("name") or "")
    index = group_index(pod)
    lws = str(labels(pod).get(LWS_NAME_LABEL) or "")
    return (ns, name), ((ns, lws, index) if index is not None and lws else None)


class Lifter:
    """Lifts the gates that may be lifted now, between passes; ``run`` until cancelled."""

    def __init__(
        self, kube: Kube, pods: Informer, pass_through: PassThrough, *, concurrency: int = 8
    ) -> None:
        self.kube = kube
        self.pods = pods
        self.pass_through = pass_through
        self.concurrency = concurrency
        self._gated: dict[GroupKey, set[str]] = {}
        """Group -> the names of its pods that carry the gate, as the informer last said."""
        self._due: set[PodKey] = set()
        self._held: frozenset[PodKey] = frozenset()
        self._sent: set[PodKey] = set()
        """Lifted here, and not yet seen without the gate: not sent twice."""
        self._wake = anyio.Event()
        self._write: Write | None = None
        pods.listeners.append(self.on_pod)

    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        """The pods informer's listener: a gated pod is looked at; any other is forgotten."""
        key, group = _keys(pod)
        gated = kind != "DELETED" and is_gated(pod) and not is_terminating(pod)
        if group is not None:
            names = self._gated.setdefault(group, set())
            (names.add if gated else names.discard)(key[1])
            if not names:
                del self._gated[group]
        if gated:
            self._due.add(key)
            self._wake.set()
        else:
            self._due.discard(key)
            self._sent.discard(key)

    def admitted(self, group: GroupKey) -> None:
        """A pass wrote ``group``'s admission: its pods born gated are looked at again."""
        names = self._gated.get(group, ())
        if names:
            self._due.update((group[0], name) for name in names)
            self._wake.set()

    def sent(self, pod: PodKey) -> None:
        """The pass lifted ``pod``'s gate: not lifted again while the informer still shows it."""
        self._sent.add(pod)
        self._due.discard(pod)

    def hold(self, pods: Iterable[PodKey]) -> None:
        """The pods whose gates the running pass lifts itself (empty once its writes are done)."""
        self._held = frozenset(pods)

    async def run(self) -> None:
        limiter = anyio.CapacityLimiter(self.concurrency)
        async with anyio.create_task_group() as tg:
            while True:
                await self._wake.wait()
                self._wake = anyio.Event()
                due, self._due = self._due, set()
                for key in due:
                    if key in self._held or key in self._sent:
                        continue
                    pod = self.pods.get(*key)
                    ops = self.pass_through.lift(pod) if pod is not None else None
                    if ops:
                        self._sent.add(key)
                        tg.start_soon(self._lift, limiter, key, ops)

    def share(self, write: Write | None) -> None:
        """While a pass writes, the lifter's writes take that pass's slots after all of its
        own (``write``; None once the pass is done). Lifted beside a pass's writes, with
        slots of its own, they slowed the pass's admissions: a scale-up of 100 groups had
        82-103 pods born gated (their admissions came later) instead of 7, and settled
        1.26-1.47x the time without the gatekeeper instead of 1.25x."""
        self._write = write

    async def _patch(self, key: PodKey, ops: list[dict[str, Any]]) -> None:
        await self.kube.json_patch(r.PODS, key[1], key[0], ops)

    async def _lift(self, limiter: anyio.CapacityLimiter, key: PodKey, ops: list[dict[str, Any]]) -> None:
        if self._write is not None:
            lifted = await self._write(self._patch, key, ops, rank=AFTER_THE_PASS)
        else:
            async with limiter:
                try:
                    await self._patch(key, ops)
                    lifted = True
                except (TemporaryError, PermanentError) as exc:  # the pass lifts it instead
                    log.info("gate of %s/%s left to the pass: %s", key[0], key[1], exc)
                    lifted = False
        if not lifted:
            self._sent.discard(key)
            return
        GATES_LIFTED_EARLY.inc()
        log.debug("lifted the gate of %s/%s between passes", *key)
