"""Every state a namespace's GroupAdmission records pass through, however briefly.

Why this exists: some states last a second or two: a group given back says so
(``Admitted=False``, its reason) only until its retry, when its record moves on. A test that
samples the records with kubectl every few seconds on a loaded machine can miss that
window and fail although the gatekeeper did its job. ``conditions_seen`` runs ``kubectl get
--watch`` for the test's span and keeps every ``Admitted`` condition the API server sent, in
order, so the test reads what happened rather than what is left.

Who calls it: ``test_kueue_charge.hand_edited_worker`` (the kueue and volcano backends).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

from gatekeeper.core.kube.keys import RECORD_PLURAL
from gatekeeper_lab.sandbox.cluster import Sandbox

__all__ = ["conditions_seen"]


def _objects(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The JSON objects of kubectl's ``-o json`` watch output (one pretty-printed object after another)."""
    decoder, buf = json.JSONDecoder(), ""
    for line in lines:
        buf += line
        try:
            obj, end = decoder.raw_decode(buf.lstrip())
        except json.JSONDecodeError:
            continue
        buf = buf.lstrip()[end:]
        if isinstance(obj, dict):
            yield obj


@contextlib.contextmanager
def conditions_seen(sb: Sandbox, namespace: str) -> Iterator[list[dict[str, Any]]]:
    """The ``Admitted`` conditions of ``namespace``'s records as they come, each with the
    record's ``groupIndex`` added, into the list yielded (filled until the block ends)."""
    seen: list[dict[str, Any]] = []
    proc = subprocess.Popen(
        [str(sb.bin_dir / "kubectl"), f"--kubeconfig={sb.kubeconfig}", "get",
         f"{RECORD_PLURAL}.lws-gatekeeper.io", "-n", namespace,
         "--watch", "--output-watch-events", "-o", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip

    def read() -> None:
        assert proc.stdout is not None
        for event in _objects(iter(proc.stdout.readline, "")):
            record = event.get("object") or {}
            for c in (record.get("status") or {}).get("conditions") or []:
                if c.get("type") == "Admitted":
                    seen.append({**c, "groupIndex": (record.get("spec") or {}).get("groupIndex")})

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield seen
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        reader.join(timeout=10)
