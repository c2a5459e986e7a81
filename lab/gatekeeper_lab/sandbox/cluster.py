"""Run a real Kubernetes control plane as local processes: the sandbox.

Why this exists: every claim this project makes happens inside a cluster, and our
machines run no containers. So the sandbox starts the real binaries (built by
``build.py``) as background processes that outlive the command that started them:
etcd, kube-apiserver, kube-scheduler, kube-controller-manager, KWOK (fake nodes whose
pods turn Running and Ready without a kubelet) and the LeaderWorkerSet controller with
its webhooks served on loopback; on request also the real Kueue (``kueue.py``) and the
real Karpenter with its KWOK cloud provider (``karpenter.py``), Volcano's scheduler
(``volcano.py``), a Prometheus that scrapes the gatekeeper (``prometheus.py``) and an
OCI registry (``registry.py``); ``sides.py`` lists those, with how each starts.
Everything a sandbox owns lives in one folder: certificates, etcd data, one log per
component, ``kubeconfig`` and ``state.json`` (ports and process ids), so ``down`` can
stop exactly what ``up`` started.

This module is the orchestrator the CLI, the demo, the tests and the benchmarks use
(:class:`Sandbox`); each component is started by its own module (``etcd.py``,
``control_plane.py``, ``kwok.py``, ``lws.py``, ``kueue.py``, ``karpenter.py``,
``volcano.py``, ``prometheus.py``, ``gatekeeper.py``), on the
process handling of ``process.py``, with the objects of ``manifests.py``.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gatekeeper.core.reservation import valid_cluster_name
from gatekeeper_lab.sandbox import (
    build,
    control_plane,
    etcd,
    karpenter,
    kueue,
    kwok,
    lws,
    process,
    prometheus,
    registry,
    volcano,
)
from gatekeeper_lab.sandbox import gatekeeper as gk
from gatekeeper_lab.sandbox.folder import Folder
from gatekeeper_lab.sandbox.hub import Hub
from gatekeeper_lab.sandbox.kubectl import Kubectl
from gatekeeper_lab.sandbox.manifests import (
    GATEKEEPER_NAMESPACE,
    POLICIES_LABEL,
    POLICIES_OFF,
    as_json_list,
    fake_node,
    lws_webhooks,
    sandbox_policies,
    webhooks_by_url,
)
from gatekeeper_lab.sandbox.pki import make_pki
from gatekeeper_lab.sandbox.process import SandboxError, alive, free_ports, ours
from gatekeeper_lab.sandbox.sides import Side, sides_of

# Sandbox and default_dir live here; the rest live in manifests.py and process.py and are
# re-exported for the code that imports them from here.
__all__ = [
    "GATEKEEPER_NAMESPACE",
    "LWS_GANG_OFF",
    "POLICIES_LABEL",
    "POLICIES_OFF",
    "SANDBOX_HEARTBEAT_SECONDS",
    "Sandbox",
    "SandboxError",
    "as_json_list",
    "default_dir",
    "fake_node",
    "lws_webhooks",
    "webhooks_by_url",
]

SANDBOX_HEARTBEAT_SECONDS = 10
"""A member sandbox's heartbeat on its hub (``--hub-heartbeat-seconds``)."""


#: ``Sandbox.up(lws_gang_scheduler=...)``: LWS's own gang scheduling off.
LWS_GANG_OFF = "none"


def default_dir(name: str = "default") -> Path:
    """Where a named sandbox keeps its files: ``$LWS_GATEKEEPER_SANDBOX_DIR`` or the cache folder."""
    env = os.environ.get("LWS_GATEKEEPER_SANDBOX_DIR")
    if env and name == "default":
        return Path(env)
    return build.cache_root() / "sandboxes" / name


@dataclass
class Sandbox(Folder):
    """One sandbox cluster, identified by its folder (its paths: ``Folder``)."""

    dir: Path
    say: Callable[[str], None] = field(default=print, repr=False)

    def state(self) -> dict[str, Any]:
        return self.runner.load()

    # ---- status ------------------------------------------------------------------
    def running(self) -> dict[str, bool]:
        """Each recorded component and whether its process is alive."""
        procs = self.state().get("processes", {})
        return {name: alive(int(info["pid"])) and ours(info) for name, info in procs.items()}

    def is_up(self) -> bool:
        run = self.running()
        port = self.state().get("ports", {}).get("apiserver")
        return bool(run) and all(run.values()) and control_plane.apiserver_ready(port, self.pki)

    def env(self) -> dict[str, str]:
        """Environment for a program driving the sandbox: its kubeconfig, its kubectl first on PATH."""
        return self.runner.env()

    def _kubectl(self) -> Kubectl:
        return Kubectl(self.bin_dir, self.kubeconfig)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run the sandbox's kubectl; on failure raise with its stderr."""
        return self._kubectl().run(*args, input=input, check=check)

    def apply(self, objects: Iterable[dict[str, Any]] | str) -> None:
        """Server-side apply objects (dicts or YAML text) with the admin identity."""
        self._kubectl().apply(objects)

    def create_nodes(self, nodes: Sequence[dict[str, Any]]) -> None:
        """Create fake nodes (``create``, not ``apply``: a Node's status is kept only on create)."""
        self._kubectl().create(nodes)

    # ---- up / down ---------------------------------------------------------------
    def up(
        self,
        *,
        nodes: int = 4,
        gpus_per_node: int = 1,
        labels: dict[str, str] | None = None,
        gatekeeper: bool = True,
        extra: Callable[[Sandbox], None] | None = None,
        with_kueue: bool = False,
        with_karpenter: bool = False,
        with_volcano: bool = False,
        with_prometheus: bool = False,
        with_registry: bool = False,
        lws_gang_scheduler: str | None = None,
        audit: bool = False,
        hub: Path | None = None,
        cluster_name: str = "",
        native_gang: bool = False,
    ) -> None:
        """Start the sandbox, or bring back what of it died.

        A sandbox whose processes all run is only reported. One where some died (a crash,
        a kill, a reboot) keeps its data: the dead ones are started again with the commands
        they were started with, in their order, so every object of the cluster stays. Only a
        sandbox whose etcd data is gone starts afresh. ``with_kueue`` also builds and runs
        the real Kueue (``kueue.py``), after LWS; on a running sandbox without it, Kueue is
        added. ``with_karpenter`` likewise builds and runs the real Karpenter
        (``karpenter.py``), which buys KWOK nodes for the NodePools made in the sandbox; a
        gatekeeper already running is started again, with Karpenter's instance types.
        ``with_volcano`` does the same for Volcano's scheduler (``volcano.py``), and
        ``with_prometheus`` for a Prometheus that scrapes the gatekeeper every second
        (``prometheus.py``; its URL is :meth:`prometheus_url`), and ``with_registry`` for an
        OCI registry (``registry.py``; its address is :meth:`registry_address`).
        ``lws_gang_scheduler`` (``volcano``) runs the LWS controller with LWS's own gang
        scheduling on for every LWS of the cluster (``lws.py``), and implies ``with_volcano``;
        ``"none"`` turns it off; on a running sandbox the LWS controller is restarted when it
        runs otherwise, and ``None`` (the default) keeps what it runs with.
        ``audit`` has the API server write an audit log of every write
        (``control_plane.AUDIT_LOG``), restarting it to turn it on if need be; ``native_gang``
        starts the API server, the scheduler and the controller manager with Kubernetes' native
        gang scheduling on (``control_plane.NATIVE_GANG``), restarting them if need be. ``hub`` (a
        sandbox hub's kubeconfig) joins the sandbox to that hub as member ``cluster_name``:
        it gets its own identity there (``hub.Hub.join``) and its gatekeeper runs with
        ``--hub-kubeconfig`` and ``--cluster-name``.
        """
        if hub is not None and not valid_cluster_name(cluster_name):
            raise SandboxError(f"--cluster-name {cluster_name!r}: a member needs a DNS label as its name")
        start = time.monotonic()
        runner, kubectl = self.runner, self._kubectl()
        if lws_gang_scheduler is not None and lws_gang_scheduler != LWS_GANG_OFF:
            if lws_gang_scheduler not in lws.GANG_SCHEDULERS:
                raise SandboxError(
                    f"LWS gang scheduling {lws_gang_scheduler!r}: LWS knows {', '.join(lws.GANG_SCHEDULERS)}"
                )
            with_volcano = True
        gang = None if lws_gang_scheduler in (None, LWS_GANG_OFF) else lws_gang_scheduler
        asked = (with_kueue, with_karpenter, with_volcano, with_prometheus, with_registry)
        sides = sides_of(runner, kubectl, self.pki, *asked)
        if not self.is_up() and self.state_file.exists():
            if self._resumable():
                self._restart_dead()
            else:
                self.say("sandbox found without its data: stopping what is left, starting afresh")
                self.down(quiet=True)
        if self.state_file.exists():
            self._amend(sides, audit, native_gang, lws_gang_scheduler, hub, cluster_name, gatekeeper)
            return

        wanted = ["kubernetes", "etcd", "kwok", "lws", *(side.component for side in sides)]
        installed = build.build_all(wanted, say=self.say)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        runner.rotate_logs()
        build.link_bins(self.bin_dir, installed)
        pki = make_pki(self.dir / "pki")
        names = [*etcd.PORTS, *control_plane.PORTS, *lws.PORTS, *gk.PORTS]
        ports = dict(zip(names, free_ports(len(names)), strict=True))
        state: dict[str, Any] = {"ports": ports, "processes": {}, "started": time.time(), "audit": audit}
        state[control_plane.NATIVE_GANG] = native_gang
        runner.save(state)
        control_plane.write_kubeconfig(self.kubeconfig, ports["apiserver"], pki)

        try:
            etcd.start(runner, state)
            control_plane.start_apiserver(runner, state, pki)
            control_plane.start_controller_manager(runner, state, pki)
            control_plane.start_scheduler(runner, state)
            kwok.start(runner, state, installed["kwok"])
            lws.start(runner, state, installed["lws"], pki, kubectl, gang_scheduler=gang)
            for side in sides:
                side.start(state, installed[side.component])
            self._wait_apiservices()
            gk.install_objects(kubectl)
            self.apply(sandbox_policies())
            if hub is not None:
                self._join_hub(hub, cluster_name)
            if gatekeeper:
                self.start_gatekeeper()
            self.create_nodes(
                [fake_node(f"gpu-node-{i}", gpus=gpus_per_node, labels=labels) for i in range(nodes)]
            )
            if extra is not None:
                extra(self)
        except Exception:
            self.say(f"sandbox failed to start; logs are in {self.log_dir}")
            self.down(quiet=True, keep_logs=True)
            raise
        state = self.state()  # start_gatekeeper() recorded its process meanwhile
        state["ready_seconds"] = round(time.monotonic() - start, 1)
        runner.save(state)
        self.say(f"sandbox up in {time.monotonic() - start:.1f}s; logs in {self.log_dir}")

    def _amend(
        self,
        sides: list[Side],
        audit: bool,
        native_gang: bool,
        lws_gang_scheduler: str | None,
        hub: Path | None,
        cluster_name: str,
        gatekeeper: bool,
    ) -> None:
        """A running sandbox: what ``up`` asks that it does not run yet is added or turned on."""
        runner, kubectl = self.runner, self._kubectl()
        gang = None if lws_gang_scheduler in (None, LWS_GANG_OFF) else lws_gang_scheduler
        self.say(f"sandbox running in {self.dir}")
        for key, wanted in (("audit", audit), (control_plane.NATIVE_GANG, native_gang)):
            if wanted and not self.state().get(key):
                self._turn_on(key)
        for side in [side for side in sides if side.process not in self.running()]:
            installed = build.build_all([side.component], say=self.say)
            build.link_bins(self.bin_dir, installed)
            side.start(self.state(), installed[side.component])
            if side.process == karpenter.COMPONENT and gk.COMPONENT in self.running():
                # Started before Karpenter, it was not given the instance types.
                self.stop(gk.COMPONENT)
        if lws_gang_scheduler is not None and self.state().get(lws.STATE_KEY) != gang:
            self.say(f"LWS controller: gang scheduling {gang or 'off'}, restarting it")
            lws.reconfigure(runner, self.state(), self.pki, gang)
        if hub is not None and self.state().get("hub", {}).get("cluster") != cluster_name:
            self._join_hub(hub, cluster_name)
        if gatekeeper and gk.COMPONENT not in self.running():
            gk.install_objects(kubectl)
            self.start_gatekeeper()

    def down(self, *, quiet: bool = False, keep_logs: bool = True) -> None:
        """Stop every process this sandbox started and remove its data (logs stay).

        Only processes that are still ours are signalled: after a reboot or a CI clean-up
        a recorded pid may belong to another program by now.
        """
        procs = {name: info for name, info in self.state().get("processes", {}).items() if ours(info)}
        process.stop_all(procs)
        for path in (self.dir / etcd.DATA_DIR, self.runner.run_dir):
            if path.exists():
                subprocess.run(["rm", "-rf", str(path)], check=False)
        if self.state_file.exists():
            self.state_file.unlink()
        if not keep_logs and self.log_dir.exists():
            subprocess.run(["rm", "-rf", str(self.log_dir)], check=False)
        if not quiet:
            self.say(f"sandbox in {self.dir} stopped ({len(procs)} processes)")

    # ---- faults: restart, pause ----------------------------------------------------
    def _resumable(self) -> bool:
        state = self.state()
        recorded = bool(state.get("ports")) and bool(state.get("processes"))
        return recorded and (self.dir / etcd.DATA_DIR).is_dir()

    def _restart_dead(self) -> None:
        """Start again each recorded process that died, in the order they were started, and
        wait until the API server answers (it may have lost etcd for a while)."""
        state = self.state()
        for name, info in list(state["processes"].items()):
            if alive(int(info["pid"])) and ours(info):
                continue
            self.say(f"{name} is not running: starting it again")
            self._start_again(state, name)
        port = state["ports"].get("apiserver")
        self.runner.wait(
            control_plane.APISERVER,
            lambda: control_plane.apiserver_ready(port, self.pki),
            timeout=90,
            what="the API server to answer /readyz after the restarts",
        )

    def _start_again(self, state: dict[str, Any], name: str) -> None:
        self.runner.restart(state, name)
        probe = self._probe(state, name)
        self.runner.wait(name, probe, timeout=120, what="it to answer again after a restart")

    def _probe(self, state: dict[str, Any], name: str) -> Callable[[], bool]:
        """Whether component ``name`` answers: the same endpoint its start waited for."""
        p, info = state["ports"], state["processes"][name]
        urls = {
            etcd.COMPONENT: f"http://127.0.0.1:{p.get('etcd')}/health",
            lws.COMPONENT: f"http://127.0.0.1:{p.get('lws_health')}/readyz",
            kueue.COMPONENT: f"http://127.0.0.1:{p.get('kueue_health')}/readyz",
            karpenter.COMPONENT: f"http://127.0.0.1:{p.get('karpenter_health')}/readyz",
            volcano.COMPONENT: f"http://127.0.0.1:{p.get('volcano_health')}/healthz",
            prometheus.COMPONENT: f"http://127.0.0.1:{p.get('prometheus')}/-/ready",
            registry.COMPONENT: f"http://127.0.0.1:{p.get(registry.COMPONENT)}/v2/",
        }
        if name == control_plane.APISERVER:
            return lambda: control_plane.apiserver_ready(p["apiserver"], self.pki)
        if "metrics" in info:  # a gatekeeper replica
            url = f"http://127.0.0.1:{info['metrics']}/readyz"
            return lambda: process.ready(url)
        if name in urls:
            url = urls[name]
            return lambda: process.ready(url)
        pid = int(info["pid"])
        return lambda: alive(pid)

    def restart(self, name: str, *, kill: bool = False) -> None:
        """Stop component ``name`` (SIGTERM, or SIGKILL for a crash) and start it again with the
        command it was started with; wait until it answers. Its data (etcd's) is kept."""
        state = self.state()
        info = state["processes"][name]
        if ours(info):
            process.stop(int(info["pid"]), kill=kill)
        self._start_again(state, name)

    def pause(self, name: str) -> None:
        """SIGSTOP component ``name``: it holds its connections and does nothing, as a hung process."""
        process.pause(int(self.state()["processes"][name]["pid"]))

    def resume(self, name: str) -> None:
        """SIGCONT a paused component."""
        process.resume(int(self.state()["processes"][name]["pid"]))

    def _turn_on(self, key: str) -> None:
        """Turn on a control-plane setting of the state (``audit``, ``native_gang``) and restart
        the programs it changes the flags of."""
        state = self.state()
        state[key] = True
        self.runner.save(state)
        programs = {
            control_plane.APISERVER: lambda: control_plane.start_apiserver(self.runner, state, self.pki),
            control_plane.CONTROLLER_MANAGER: lambda: control_plane.start_controller_manager(
                self.runner, state, self.pki
            ),
            control_plane.SCHEDULER: lambda: control_plane.start_scheduler(self.runner, state),
        }
        for name in control_plane.FLAGGED_BY[key]:
            info = state["processes"][name]
            if ours(info):
                process.stop(int(info["pid"]))
            programs[name]()

    # ---- pieces ------------------------------------------------------------------
    def _wait_apiservices(self) -> None:
        """Wait until the API server serves the LWS API and the default namespace has its service account."""

        def ok() -> bool:
            res = self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False)
            lws = self.kubectl("get", "leaderworkersets", "-A", check=False)
            return res.returncode == 0 and lws.returncode == 0

        self.runner.wait(
            control_plane.CONTROLLER_MANAGER,
            ok,
            timeout=60,
            what="the default service account and the LeaderWorkerSet API",
        )

    # ---- the hub ------------------------------------------------------------------
    def _join_hub(self, hub: Path, cluster_name: str) -> None:
        """Give this sandbox an identity of its own on the hub, as member ``cluster_name``."""
        member = Hub.of_kubeconfig(hub, self.say).join(cluster_name, self.dir / "hub")
        state = self.state()
        state["hub"] = {"kubeconfig": str(member), "cluster": cluster_name}
        self.runner.save(state)
        self.say(f"joined the hub {hub} as member {cluster_name}")

    def _hub_args(self) -> list[str]:
        joined = self.state().get("hub")
        if not joined:
            return []
        # A 10-second heartbeat (the default is 40): a member gone shows on the hub in seconds.
        return [
            f"--hub-kubeconfig={joined['kubeconfig']}",
            f"--cluster-name={joined['cluster']}",
            f"--hub-heartbeat-seconds={SANDBOX_HEARTBEAT_SECONDS}",
        ]

    # ---- the gatekeeper -----------------------------------------------------------
    def start_gatekeeper(
        self,
        name: str = gk.COMPONENT,
        *,
        register: bool = True,
        kubeconfig: Path | None = None,
        backend: str | None = None,
        args: Sequence[str] = (),
        image: gk.FromImage | None = None,
    ) -> None:
        """Run ``lws-gatekeeper run`` from this Python against the sandbox and register its webhook.

        Extra replicas (another ``name``) serve no webhook of the sandbox's own; they only
        campaign for the Lease, as a second replica of the chart would. ``kubeconfig``
        runs it with another identity than the admin's (the chart's ServiceAccount, say).
        ``backend`` is ``pools``, ``kueue`` or ``volcano``; by default ``kueue`` when the
        sandbox runs Kueue, ``volcano`` when it runs Volcano, else ``pools`` (a restart
        keeps what the sandbox was started with). ``args`` are further flags of
        ``lws-gatekeeper run``. With Karpenter running, the ``pools`` backend is given
        Karpenter's instance-type file. ``image`` runs it instead as a Deployment of the
        chart runs it, from the image's root file system (``gk.FromImage``: the
        Deployment's own args, so ``args`` do not apply).
        """
        processes = self.state()["processes"]
        if backend is None:
            backend = (
                "kueue"
                if kueue.COMPONENT in processes
                else "volcano"
                if volcano.COMPONENT in processes
                else "pools"
            )
        if backend == "pools" and karpenter.COMPONENT in processes:
            # The instance types Karpenter reads: Pools with spec.nodePools plan on them.
            args = [f"--karpenter-instance-types={karpenter.types_file_of(self.runner)}", *args]
        gk.start(
            self.runner,
            self.pki,
            self._kubectl(),
            name,
            backend=backend,
            register=register,
            kubeconfig=kubeconfig,
            args=[*self._hub_args(), *args],
            image=image,
        )

    def stop(self, name: str, *, kill: bool = False) -> None:
        """Stop one component (SIGTERM, or SIGKILL to simulate a crash) and forget it."""
        state = self.state()
        info = state["processes"].pop(name, None)
        if info is not None and ours(info):
            process.stop(int(info["pid"]), kill=kill)
        self.runner.save(state)

    def registry_address(self) -> str:
        """``host:port`` of the sandbox's OCI registry (``up(with_registry=True)``)."""
        if registry.COMPONENT not in self.state().get("processes", {}):
            raise SandboxError(f"the sandbox in {self.dir} runs no registry: sandbox up --with-registry")
        return registry.address_of(self.state())

    def prometheus_url(self) -> str:
        """The base URL of the sandbox's Prometheus (``up(with_prometheus=True)``)."""
        if prometheus.COMPONENT not in self.state().get("processes", {}):
            raise SandboxError(f"the sandbox in {self.dir} runs no Prometheus: sandbox up --with-prometheus")
        return prometheus.url_of(self.state())

    def metrics(self, name: str = gk.COMPONENT) -> str:
        """The gatekeeper's /metrics text."""
        return gk.metrics(self.runner, name)
