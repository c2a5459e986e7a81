"""The attack suite's one table: attack, expected, seen (what the attacker is told).

Why this exists: the attacks are tried in several test files (``test_attacks.py``,
``test_tenant_pools.py``, ``test_member_owners.py``, ``test_kueue_backend.py``), each
next to the feature it attacks. Each adds its row here when it has seen the outcome it
asserts; its report carries them (``tests/e2e/conftest.py``), and ``tests/conftest.py``
prints the table once at the end of the run, so one run of the e2e suite shows every
attack and what came of it, in one process or in xdist workers.
"""

from __future__ import annotations

Row = tuple[str, str, str]
"""(attack, expected: refused / contained / bounded / allowed, seen)."""

ROWS: list[Row] = []
"""The rows this process's tests added."""

REPORT_KEY = "attack_row"
"""The name under which a test's report carries its rows (``user_properties``)."""

SHOWN: list[Row] = []
"""The rows of the whole run, as the reports carried them (from every xdist worker)."""


def add(attack: str, expected: str, seen: str) -> None:
    ROWS.append((attack, expected, " ".join(seen.split())))


def lines(rows: list[Row]) -> list[str]:
    """The table as text lines, one per row after a header."""
    width = max((len(r[0]) for r in rows), default=6)
    out = [f"{'attack':<{width}} | expected  | seen"]
    out.extend(f"{attack:<{width}} | {expected:<9} | {seen}" for attack, expected, seen in rows)
    return out
