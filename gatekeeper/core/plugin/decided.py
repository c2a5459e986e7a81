"""What every pass decides, whatever decides it: the spine of each backend's and check's actions.

Why this exists: the three backends share one group lifecycle (records made and released,
pods stopped, objects that cannot be read named) and every pass, a check's too, may say
when its decision falls due with nothing changed. Written once here, the loop that runs
them all (``controller.loop``) reads these fields by type, and a new backend gets them by
deriving its actions from ``GroupActions``. Each backend adds its own fields (what it
admits, lets through and says) on top.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gatekeeper.core.model.groups import GroupState

__all__ = ["Decided", "GroupActions"]


@dataclass(frozen=True, kw_only=True)
class Decided:
    """What every pass returns besides its own actions."""

    problems: tuple[str, ...] = ()
    """Objects this pass could not read and skipped, in words (logged once, when they first appear)."""
    look_again: datetime | None = None
    """When a decision falls due with nothing changed (a group to give back a few seconds
    from now): the loop's next pass comes no later."""


@dataclass(frozen=True, kw_only=True)
class GroupActions(Decided):
    """What every backend's pass decides of the group lifecycle."""

    create_records: tuple[GroupState, ...] = ()
    """Groups seen for the first time: their records are made (not yet admitted)."""
    release: tuple[tuple[str, str], ...] = ()
    """(namespace, record): groups gone (scaled away, LWS deleted) with no pod left: their
    records are deleted, and what the backend made for them with them."""
    stop: tuple[tuple[str, str], ...] = ()
    """(namespace, pod): pods let through on an admission that is gone (given back,
    evicted): deleted by UID."""
