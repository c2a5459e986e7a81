"""Faults injected into a running sandbox, and what they did to admission.

Why this exists: the gatekeeper promises that no crash, hang, restart or bad object makes
it admit a group twice, overrun a Pool's quota, leave an admissible group waiting or
delete a pod it should not. Those promises are only worth what a test under real faults
shows, so the fault scenarios (``fault_scenarios.py``), their end-to-end tests
(``tests/e2e/test_faults.py``) and their benchmark (``benchmarks/bench_faults.py``) all
watch a scenario through the same :class:`Monitor` and report the same :class:`Tally`.

- :class:`Monitor` samples the namespace once a second: the GPUs of bound pods of the
  pool against its quota (overrun), each group's admission (a group whose record is
  admitted anew while pods of its earlier admission still run was admitted twice), and
  pods ungated with no admitted record.
- :func:`gatekeeper_writes` reads the API server's audit log (``Sandbox.up(audit=True)``):
  which writes each gatekeeper replica made and when, by the user agent it sends.
- :class:`BlackHole` is a TCP proxy on loopback that can stop forwarding without closing
  (packets dropped, connections left open), as a network partition does.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import kr8s.asyncio

from gatekeeper.core.kube.keys import ADMITTED, GROUP_INDEX_LABEL, LWS_NAME_LABEL, POOL_LABEL, SCHEDULING_GATE
from gatekeeper_lab.sandbox.cluster import Sandbox
from gatekeeper_lab.sandbox.control_plane import AUDIT_LOG
from gatekeeper_lab.sandbox.observe import summarize
from gatekeeper_lab.sandbox.replay import list_raw

__all__ = ["GPU", "BlackHole", "Monitor", "Tally", "gatekeeper_writes", "lws_body", "pool_body"]

GPU = "nvidia.com/gpu"
RECORDS = "groupadmissions.lws-gatekeeper.io"
USER_AGENT = "lws-gatekeeper/"


def lws_body(
    name: str, namespace: str, pool: str, *, replicas: int, size: int, nodes: dict[str, str]
) -> dict[str, Any]:
    """An opted-in LWS of ``replicas`` groups of ``size`` one-GPU pods, kept on ``nodes``."""
    pod = {
        "spec": {
            "nodeSelector": dict(nodes),
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "vllm", "resources": {"limits": {GPU: "1"}}}],
        }
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace, "labels": {POOL_LABEL: pool}},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size, "workerTemplate": pod}},
    }


def pool_body(name: str, nodes: dict[str, str], gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "lws-gatekeeper.io/v1alpha1",
        "kind": "Pool",
        "metadata": {"name": name},
        "spec": {"nodeSelector": dict(nodes), "namespaceSelector": {}, "quota": {GPU: str(gpus)}},
    }


def _gpus(pod: dict[str, Any]) -> int:
    total = 0
    for c in pod.get("spec", {}).get("containers", []):
        limits = c.get("resources", {}).get("limits", {})
        total += int(limits.get(GPU, 0))
    return total


def _admission(record: dict[str, Any]) -> str | None:
    """This admission's identity: the record's UID and when it became Admitted; None if not admitted."""
    for c in record.get("status", {}).get("conditions", []) or []:
        if c.get("type") == ADMITTED and c.get("status") == "True":
            return f"{record['metadata'].get('uid')}@{c.get('lastTransitionTime')}"
    return None


def _said(record: dict[str, Any]) -> str:
    """The record's Admitted condition in a few words (for a note)."""
    for c in record.get("status", {}).get("conditions", []) or []:
        if c.get("type") == ADMITTED:
            return f"Admitted={c.get('status')} {c.get('reason', '')}: {str(c.get('message', ''))[:200]}"
    return "no Admitted condition"


@dataclass
class Tally:
    """The figures of one scenario, one row of the fault table."""

    scenario: str
    faults: int = 0
    double_admissions: int = 0
    peak_overrun: int = 0
    ungated_without_record: int = 0
    stuck: int = 0
    wrongful_deletions: int = 0
    late_writes: int = 0  # writes by a replica after its renew deadline had passed (audit log)
    settle_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    HEADER = (
        "| scenario | faults | admitted twice | peak overrun (GPUs) | ungated without record "
        "| stuck 30 s after | wrongful deletions | writes after its deadline | settled after (s) |"
    )

    def row(self) -> str:
        return (
            f"| {self.scenario} | {self.faults} | {self.double_admissions} | {self.peak_overrun} "
            f"| {self.ungated_without_record} | {self.stuck} | {self.wrongful_deletions} "
            f"| {self.late_writes} | {self.settle_seconds:.1f} |"
        )

    @property
    def clean(self) -> bool:
        return not (
            self.double_admissions
            or self.peak_overrun
            or self.ungated_without_record
            or self.stuck
            or self.wrongful_deletions
            or self.late_writes
        )


@dataclass
class _Group:
    admission: str | None = None
    pods: frozenset[str] = frozenset()  # UIDs of its ungated pods under that admission


@dataclass
class Monitor:
    """Samples one namespace and one pool once a second into a :class:`Tally`."""

    api: kr8s.asyncio.Api
    namespace: str
    pool: str
    quota_gpus: int
    tally: Tally
    groups: dict[tuple[str, int], _Group] = field(default_factory=dict)
    samples: int = 0

    async def sample(self) -> int:
        """One look; returns the GPUs of the pool's bound pods."""
        pods = await list_raw(self.api, "pods", namespace=self.namespace)
        records = await list_raw(self.api, RECORDS, namespace=self.namespace)
        return self.observe(pods, records)

    def observe(self, pods: list[dict[str, Any]], records: list[dict[str, Any]]) -> int:
        """Judge one look at the namespace's pods and records into the tally; returns bound GPUs."""
        admitted: dict[tuple[str, int], str] = {}
        said: dict[tuple[str, int], str] = {}  # each group's record's Admitted, in words
        for r in records:
            spec = r.get("spec", {})
            adm = _admission(r)
            if not isinstance(spec.get("groupIndex"), int):
                continue
            key = (str(spec.get("leaderWorkerSet")), spec["groupIndex"])
            if adm is not None:
                admitted[key] = adm
            said.setdefault(key, _said(r))
        bound_gpus = 0
        ungated: dict[tuple[str, int], set[str]] = {}
        names: dict[str, str] = {}
        for p in pods:
            labels = p["metadata"].get("labels", {})
            if labels.get(POOL_LABEL) != self.pool or p.get("status", {}).get("phase") in (
                "Succeeded",
                "Failed",
            ):
                continue
            if p.get("spec", {}).get("nodeName"):
                bound_gpus += _gpus(p)
            try:
                key = (str(labels[LWS_NAME_LABEL]), int(labels[GROUP_INDEX_LABEL]))
            except (KeyError, ValueError):
                continue
            gated = any(
                g.get("name") == SCHEDULING_GATE for g in p.get("spec", {}).get("schedulingGates", []) or []
            )
            if not gated:
                ungated.setdefault(key, set()).add(p["metadata"]["uid"])
                names[p["metadata"]["uid"]] = str(p["metadata"].get("name"))
        self.tally.peak_overrun = max(self.tally.peak_overrun, bound_gpus - self.quota_gpus)
        for key, uids in ungated.items():
            if key in admitted:
                continue
            # A give-back writes the record, then deletes the pods: those let through on the
            # group's last admission may still be there (their quota is held while they live).
            never = uids - (self.groups[key].pods if key in self.groups else frozenset())
            if never:
                self.tally.ungated_without_record = max(self.tally.ungated_without_record, len(never))
                self.tally.notes.append(
                    f"group {key}: pods {sorted(names[u] for u in never)} ungated, never under an "
                    f"admission; its record: {said.get(key, 'none')}"
                )
        for key, adm in admitted.items():
            seen = self.groups.setdefault(key, _Group())
            now = frozenset(ungated.get(key, ()))
            if seen.admission is not None and adm != seen.admission and seen.pods & now:
                self.tally.double_admissions += 1
                self.tally.notes.append(
                    f"group {key} admitted again ({seen.admission} -> {adm}) while its pods ran"
                )
            if adm != seen.admission:
                seen.admission, seen.pods = adm, now
            else:
                seen.pods = seen.pods | now
        self.samples += 1
        return bound_gpus

    async def whole(self, size: int) -> int:
        """Groups admitted with all ``size`` pods Ready right now."""
        return summarize(await list_raw(self.api, "pods", namespace=self.namespace), size).whole_groups

    async def run(self, stop: anyio.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                await self.sample()
            except Exception as exc:  # the API server may be the fault: a missed sample, not an end
                self.tally.notes.append(f"sample missed: {type(exc).__name__}")
            with anyio.move_on_after(max(0.0, 1.0 - (time.monotonic() - started))):
                await stop.wait()


def _audit_lines(sb: Sandbox) -> Iterator[dict[str, Any]]:
    path = sb.log_dir / AUDIT_LOG
    if not path.exists():
        return
    with path.open(errors="replace") as fh:
        for line in fh:
            try:
                yield json.loads(line)
            except ValueError:
                continue


@dataclass(frozen=True)
class AuditedWrite:
    identity: str
    verb: str
    resource: str
    namespace: str
    name: str
    code: int
    at: float  # the moment the API server received it, seconds since the epoch


def gatekeeper_writes(sb: Sandbox, *, since: float = 0.0) -> list[AuditedWrite]:
    """Every write a gatekeeper replica made (by its user agent), received at ``since`` or later."""
    found = []
    for ev in _audit_lines(sb):
        agent = str(ev.get("userAgent", ""))
        if not agent.startswith(USER_AGENT):
            continue
        at = datetime.fromisoformat(
            str(ev.get("requestReceivedTimestamp")).replace("Z", "+00:00")
        ).timestamp()
        if at < since:
            continue
        ref = ev.get("objectRef", {})
        identity = agent[agent.find("(") + 1 : agent.rfind(")")] if "(" in agent else agent
        found.append(
            AuditedWrite(
                identity=identity,
                verb=str(ev.get("verb")),
                resource=str(ref.get("resource", "")),
                namespace=str(ref.get("namespace", "")),
                name=str(ref.get("name", "")),
                code=int(ev.get("responseStatus", {}).get("code", 0)),
                at=at,
            )
        )
    return found


class BlackHole:
    """A loopback TCP proxy to ``target`` that can drop everything without closing a connection.

    ``kubeconfig(sb)`` writes a copy of the sandbox's kubeconfig that goes through it.
    ``swallow()`` starts dropping bytes both ways on every connection (open ones and new
    ones accepted); ``release()`` forwards again on new connections (old ones stay broken,
    as after a partition their TLS streams are lost).
    """

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port: int = self.server.getsockname()[1]
        self.dropping = False
        self._epoch = 0  # connections of an earlier epoch stay broken after release()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def kubeconfig(self, sb: Sandbox, path: Path) -> Path:
        text = sb.kubeconfig.read_text().replace(f"127.0.0.1:{self.target[1]}", f"127.0.0.1:{self.port}")
        path.write_text(text)
        path.chmod(0o600)
        return path

    def swallow(self) -> None:
        self.dropping = True
        self._epoch += 1

    def release(self) -> None:
        self.dropping = False

    def close(self) -> None:
        self._closed = True
        self.server.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            epoch = self._epoch
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b, epoch), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, epoch: int) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if self.dropping or epoch != self._epoch:
                    continue  # dropped on the floor; the connection stays open
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
