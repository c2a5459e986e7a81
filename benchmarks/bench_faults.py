"""Fault-injection benchmark: every fault scenario at full size, one table.

For each scenario (``lab/gatekeeper_lab/sandbox/fault_scenarios.py``): faults injected, groups
admitted twice, peak quota overrun (GPUs of bound pods against the Pool's quota, sampled
every second), pods ungated with no admitted record, admissible groups not admitted 30 s
after the last fault, pods the gatekeeper deleted, writes a replica made after its renew
deadline (from the API server's audit log), and seconds to settle after the last fault.
Every column but the first and the last must read 0.

Usage: python benchmarks/bench_faults.py [--groups 100] [--room 60] [--kills 20]
       [--scenarios "leader SIGKILLs,etcd restart"] [--sandbox-dir DIR] [--keep]
It starts its own sandbox (folder sandboxes/bench-faults in the cache), with the audit log
on and two gatekeeper replicas, and stops it at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import anyio

from gatekeeper_lab.sandbox.cluster import Sandbox, default_dir
from gatekeeper_lab.sandbox.fault_scenarios import SCENARIOS, Burst, prepare, run_scenario, write_table
from gatekeeper_lab.sandbox.faults import Tally


async def main(args: argparse.Namespace) -> None:
    sb = Sandbox(Path(args.sandbox_dir) if args.sandbox_dir else default_dir("bench-faults"))
    burst = Burst(
        groups=args.groups, room=args.room, size=args.size, kills=args.kills, malformed=args.malformed
    )
    names = [n.strip() for n in args.scenarios.split(",")] if args.scenarios else list(SCENARIOS)
    tallies: list[Tally] = []
    prepare(sb)
    try:
        for name in names:
            started = time.monotonic()
            tally = await run_scenario(sb, name, burst)
            tallies.append(tally)
            print(
                f"{name}: {time.monotonic() - started:.0f} s; {'clean' if tally.clean else 'NOT CLEAN'}",
                flush=True,
            )
            for note in tally.notes[:10]:
                print(f"  {note}", flush=True)
    finally:
        if not args.keep:
            sb.down()
    print()
    print(f"{args.groups} groups of {args.size} one-GPU pods into a pool with room for {args.room}:")
    print(write_table(tallies))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--room", type=int, default=60)
    parser.add_argument("--size", type=int, default=2)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--malformed", type=int, default=200)
    parser.add_argument("--scenarios", default="", help="comma-separated scenario names (default: all)")
    parser.add_argument("--sandbox-dir", default="")
    parser.add_argument("--keep", action="store_true", help="leave the sandbox running")
    anyio.run(main, parser.parse_args())
