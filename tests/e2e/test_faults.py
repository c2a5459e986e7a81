"""The fault-injection suite: under each fault, no group admitted twice, no quota overrun, no
pod ungated without a record, no admissible group stuck, no pod deleted, no write by a
deposed leader.

Each test runs one scenario of ``lab/gatekeeper_lab/sandbox/fault_scenarios.py`` at CI size (20
groups of 2 into room for 12) on a sandbox of its own (``fault_sandbox``: audit log on, two
gatekeeper replicas), since the faults stop the API server, etcd and the gatekeepers.
``benchmarks/bench_faults.py`` runs the same scenarios at full size and prints the table.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from gatekeeper_lab.sandbox.cluster import Sandbox
from gatekeeper_lab.sandbox.fault_scenarios import SCENARIOS, Burst, prepare, run_scenario
from gatekeeper_lab.sandbox.process import alive

from .conftest import existing, sandbox_base

CI_BURST = Burst(groups=20, room=12, size=2, kills=6, malformed=80, settle_timeout=120)


@pytest.fixture(scope="module")
def fault_sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """A sandbox for faults only: its components are killed, paused and restarted."""
    if existing(request.config):
        pytest.skip("stops the processes of a sandbox of its own, not of an existing cluster")
    sb = Sandbox(Path(f"{sandbox_base(request.config)}-faults"), say=lambda m: print(m, flush=True))
    try:
        prepare(sb)
    except Exception as exc:  # the reason goes into every test's failure, never a skip
        pytest.fail(
            f"the fault sandbox could not start (CI={os.environ.get('CI', '')}): {exc}", pytrace=False
        )
    try:
        yield sb
    finally:
        if not request.config.getoption("--keep-sandbox"):
            sb.down()


def test_up_brings_back_what_died_and_keeps_every_object(fault_sandbox: Sandbox) -> None:
    sb = fault_sandbox
    ns = f"kept-{int(time.time())}"
    sb.kubectl("create", "namespace", ns)
    sb.kubectl("create", "configmap", "what-if", "-n", ns, "--from-literal=k=v")
    started = sb.state()["started"]
    killed = [
        int(sb.state()["processes"][name]["pid"]) for name in ("gatekeeper-b", "kube-scheduler", "etcd")
    ]
    for pid in killed:
        os.killpg(pid, signal.SIGKILL)  # a crash: still recorded
    # A killed process is gone only once the kernel has torn it down (etcd may be in an fsync):
    # until then it still counts as running, and `up` would rightly leave it be.
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in killed) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in killed), "SIGKILLed processes still alive after 30 s"
    assert not sb.is_up()

    sb.up(nodes=0)

    assert sb.is_up(), sb.running()
    assert sb.state()["started"] == started, "the sandbox was started afresh"
    got = json.loads(sb.kubectl("get", "configmap", "what-if", "-n", ns, "-o", "json").stdout)
    assert got["data"] == {"k": "v"}
    sb.kubectl("delete", "namespace", ns, "--wait=false")


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_fault_scenario_is_clean(fault_sandbox: Sandbox, scenario: str) -> None:
    if not fault_sandbox.is_up():  # one scenario's wreck is not the next one's starting point
        await anyio.to_thread.run_sync(lambda: fault_sandbox.up(nodes=0))
    tally = await run_scenario(fault_sandbox, scenario, CI_BURST)
    print(tally.row(), *tally.notes, sep="\n")
    assert tally.faults > 0, "no fault was injected"
    assert tally.clean, f"{tally.row()}\n" + "\n".join(tally.notes)
