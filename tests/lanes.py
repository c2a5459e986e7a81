"""The suite's lanes under pytest-xdist: each worker runs whole lanes, one at a time, in order.

Why this exists: most end-to-end time is spent waiting on controllers, so running the
sandboxes' tests side by side fills two cores. But a session sandbox must start once per
worker that uses it, so the tests that share one must run in one worker: a lane
(``tests/e2e/conftest.py`` ``lane``: main sandbox, modules with sandboxes of their own,
unit tests, the Kueue sandbox and the hub, the other side sandboxes). Which lane a test is
in depends on the fixtures it uses, which only a worker's collection knows; the process
that schedules collects nothing. So each worker writes the lanes of what it collected to a
folder the scheduling process made (``LANES_ENV``), and ``LaneScheduling`` reads them:
xdist's scope scheduling with the lane as the scope. (xdist's own ``xdist_group`` cannot
carry it: it appends the group to a node id, which pytest 9 no longer lets a plugin set.)

Called by ``tests/conftest.py`` (the folder, the scheduler) and ``tests/e2e/conftest.py``
(``write_lanes`` at the end of a worker's collection).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

LANES_ENV = "LWS_GATEKEEPER_TEST_LANES"
"""The folder where the workers of this run write each test's lane (set by the controller)."""


def make_lanes_folder() -> None:
    """In the process that starts the workers: a fresh folder they will inherit by name."""
    os.environ[LANES_ENV] = tempfile.mkdtemp(prefix="lws-gatekeeper-lanes-")


def remove_lanes_folder() -> None:
    """In the process that started the workers, at the end of the run."""
    folder = os.environ.pop(LANES_ENV, None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


def write_lanes(lanes: Mapping[str, str]) -> None:
    """In a worker: the lane of every test it collected (nothing outside an xdist run)."""
    folder, worker = os.environ.get(LANES_ENV), os.environ.get("PYTEST_XDIST_WORKER")
    if not folder or not worker:
        return
    path = Path(folder) / f"{worker}.json"
    part = path.with_suffix(".part")
    part.write_text(json.dumps(dict(lanes)))
    part.replace(path)


def read_lanes() -> dict[str, str]:
    folder = os.environ.get(LANES_ENV)
    lanes: dict[str, str] = {}
    for path in sorted(Path(folder).glob("*.json")) if folder else []:
        lanes.update(json.loads(path.read_text()))
    return lanes


def lane_scheduling(config: Any, log: Any) -> Any:
    """xdist's scope scheduling, the scope of a test being its lane (its module's without one)."""
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):  # type: ignore[misc]
        lanes: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.lanes is None:
                self.lanes = read_lanes()
            return self.lanes.get(nodeid) or str(super()._split_scope(nodeid))

    return LaneScheduling(config, log)
