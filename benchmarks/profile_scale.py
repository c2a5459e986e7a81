"""Where the gatekeeper's CPU goes in a run: py-spy's samples summed by component.

``bench_scale.py --profile DIR`` has py-spy sample the stack of the gatekeeper's thread that
holds the interpreter, 100 times a second, through each of its runs, as collapsed stacks.
This sums each file's samples into the components a pod's cost is made of, the first rule
that matches a stack winning:

  webhook        the pod webhook's own thread (reviews, TLS, its event loop)
  decide         a backend's ``decide`` (``core.backends.*.decide``: the decision, pure)
  plan           ``plan_writes`` (the decision turned into writes, pure)
  publish        the webhook's table of admitted groups built and swapped
  watch decode   the informers' watch streams read and decoded (``Informer._watch``)
  list           the informers' lists
  writes         the pass's writes and their answers (``execute``, the lifter)
  metrics        the metrics server answering a scrape
  lease          the leader election's Lease renewals
  other          the rest: the event loop, TLS of the controller's connections, GC

Samples of waiting threads (the ``IDLE`` leaves) are left out. It prints each
component's share of the samples and its seconds (samples / rate), then
the leaf functions that took the most samples overall.

Usage: python benchmarks/profile_scale.py DIR/*.txt [--rate 100] [--top 15]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

RULES: list[tuple[str, re.Pattern[str]]] = [
    ("webhook", re.compile(r"gatekeeper/webhook/thread\.py")),
    ("decide", re.compile(r"core/backends/\w+/decide\.py")),
    ("plan", re.compile(r"plan_writes|core/writes/")),
    ("publish", re.compile(r"pools/pass_through\.py|publish \(")),
    ("watch decode", re.compile(r"_watch \([^)]*informer\.py")),
    ("list", re.compile(r"_list \([^)]*informer\.py")),
    ("writes", re.compile(r"controller/(act|lift|kube)\.py|execute \(")),
    ("metrics", re.compile(r"prometheus_client|aiohttp_metrics|metrics\.py")),
    ("lease", re.compile(r"controller/leader\.py")),
]


IDLE = re.compile(r"(Selector\.select|Condition\.wait|Event\.wait|_wait_for_tstate_lock|time\.sleep) \(")
"""Leaf frames of a thread that waits (py-spy's own idle test misses some without pausing the
process): the event loop in ``select``, a worker thread waiting for work."""


def component(stack: str) -> str:
    for name, rule in RULES:
        if rule.search(stack):
            return name
    return "other"


def leaf(stack: str) -> str:
    frame = stack.rsplit(";", 1)[-1]
    return re.sub(r":\d+\)$", ")", frame)


def read(path: Path) -> tuple[Counter[str], Counter[str]]:
    parts: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit() or IDLE.search(leaf(stack)):
            continue
        parts[component(stack)] += int(count)
        leaves[leaf(stack)] += int(count)
    return parts, leaves


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", type=Path, nargs="+")
    ap.add_argument("--rate", type=float, default=100.0, help="samples a second py-spy took")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    every_leaf: Counter[str] = Counter()
    for path in args.files:
        parts, leaves = read(path)
        every_leaf.update(leaves)
        total = sum(parts.values()) or 1
        print(f"{path.name}: {total / args.rate:.1f} s of samples")
        for name, n in parts.most_common():
            print(f"  {name:13} {n / args.rate:7.2f} s  {n / total:6.1%}")
    print(f"leaf functions, every file ({args.top} most sampled):")
    for name, n in every_leaf.most_common(args.top):
        print(f"  {n / args.rate:7.2f} s  {name}")


if __name__ == "__main__":
    main()
