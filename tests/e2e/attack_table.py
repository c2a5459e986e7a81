"""The attack suite's one table: attack, expected, seen (what the attacker is told), and what
the attack did to the cluster: peak GPUs bound against the quota, stranded GPUs, whether
another tenant's group went on.

Why this exists: the attacks are tried in several test files (``test_attacks.py``,
``test_tenant_pools.py``, ``test_member_owners.py``, ``test_kueue_backend.py``...), each
next to the feature it attacks. Each adds its row here when it has seen the outcome it
asserts, inside a watch (``watch.watching``) that fills the last three columns and holds
them to the promise; a row added outside a watch fails its test. The rows ride on the
test's teardown report (``tests/e2e/conftest.py``), and ``tests/conftest.py`` prints the
table once at the end of the run, so one run of the e2e suite shows every attack and what
came of it, in one process or in xdist workers.
"""

from __future__ import annotations

from typing import Any

Row = tuple[str, str, str, str, str, str]
"""(attack, expected: refused / contained / bounded / allowed, seen, peak GPUs "N of Q",
stranded GPUs, other tenant went on)."""

HEADER: Row = ("attack", "expected", "seen", "peak GPUs", "stranded", "others went on")

ROWS: list[Row] = []
"""The rows this process's tests added."""

WATCHING: list[Any] = []
"""The watches running now (``watch.Watch``); a row may be added only while one runs."""

REPORT_KEY = "attack_row"
"""The name under which a test's report carries its rows (``user_properties``)."""

SHOWN: list[Row] = []
"""The rows of the whole run, as the reports carried them (from every xdist worker)."""

UNMEASURED = "?"


def add(attack: str, expected: str, seen: str) -> None:
    """A row of the attack running now, inside ``watch.watching`` (which measures it)."""
    assert WATCHING, f"attack row {attack!r} added outside watch.watching: nothing measured what it did"
    ROWS.append((attack, expected, " ".join(seen.split()), UNMEASURED, UNMEASURED, UNMEASURED))


def measure(first: int, peak: str, stranded: str, others: str) -> None:
    """Fill the measured columns of the rows added since row ``first``."""
    for i in range(first, len(ROWS)):
        attack, expected, seen, *_ = ROWS[i]
        ROWS[i] = (attack, expected, seen, peak, stranded, others)


def lines(rows: list[Row]) -> list[str]:
    """The table as text lines, a header then one per row; the long ``seen`` column last."""
    order = (0, 1, 3, 4, 5, 2)
    widths = [max(len(str(r[i])) for r in [HEADER, *rows]) for i in order[:-1]]
    return [
        " | ".join([*(f"{row[i]:<{w}}" for i, w in zip(order[:-1], widths, strict=True)), row[2]])
        for row in [HEADER, *rows]
    ]
