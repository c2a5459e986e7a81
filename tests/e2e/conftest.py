"""End-to-end fixtures: one cluster per session, a fresh namespace and own nodes per test.

The cluster is the local-process sandbox by default, or an existing cluster
(``--kubeconfig FILE``: a kind cluster, a cloud cluster, a sandbox started by hand) where
LWS and the gatekeeper are installed. There the tests that need the sandbox itself (its
processes restarted or killed, its logs, its admin files, its side sandboxes and hubs)
skip with the reason; the others talk to the API only. A sandbox that cannot start fails
every end-to-end test with its reason: it never becomes a skip, in CI or anywhere else.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import anyio
import kr8s
import kr8s.asyncio
import pytest
from kr8s.asyncio.objects import Namespace, Node, new_class

from gatekeeper.webhook.config import GARBAGE_COLLECTOR_USER
from gatekeeper_lab.sandbox import gatekeeper as gk
from gatekeeper_lab.sandbox.cluster import GATEKEEPER_NAMESPACE, Sandbox, as_json_list, default_dir, fake_node
from gatekeeper_lab.sandbox.hub import Hub
from gatekeeper_lab.sandbox.kubectl import Kubectl
from gatekeeper_lab.sandbox.replay import list_raw

from ..lanes import write_lanes
from . import attack_table, bystanders
from .watch import Others, Watch, watching

_ROWS_SENT = [0]
"""How many of this process's ``attack_table.ROWS`` have ridden on a report already."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """The attack rows a test added ride on its teardown report (after its fixtures, which may
    hold the watch that measures them, are gone), so that the table is whole when the tests
    ran in pytest-xdist workers (the process that prints it, ``tests/conftest.py``, ran none
    of them)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call":
        item.stash[SKIPPED] = bool(report.skipped)
    if report.when != "teardown":
        return
    fresh = attack_table.ROWS[_ROWS_SENT[0] :]
    _ROWS_SENT[0] = len(attack_table.ROWS)
    report.user_properties.extend((attack_table.REPORT_KEY, list(row)) for row in fresh)


SKIPPED = pytest.StashKey[bool]()
"""On an item: whether its test skipped (``attack_watch`` then judges nothing)."""

SIDE_SANDBOXES = (
    "kueue_sandbox",
    "shared_hub",
    "volcano_sandbox",
    "karpenter_sandbox",
    "prometheus_sandbox",
    "native_gang_sandbox",
)
"""The session fixtures that start a sandbox beside the main one."""

_STRETCHES = (
    frozenset(),
    frozenset({"kueue_sandbox"}),
    frozenset({"kueue_sandbox", "shared_hub"}),
    frozenset({"shared_hub"}),
    frozenset({"volcano_sandbox"}),
    frozenset({"karpenter_sandbox"}),
    frozenset({"prometheus_sandbox"}),
    frozenset({"native_gang_sandbox"}),
)
"""The order of the tests by the side sandboxes they use: each side sandbox's tests run in
one stretch (the Kueue sandbox joined to the hub between the two), so it is started at the
first and stopped after the last (``pytest_runtest_teardown``), and at most two side
sandboxes run beside the main one at any time."""

_LAST_KUEUE_OR_HUB_STRETCH = _STRETCHES.index(frozenset({"shared_hub"}))
"""The stretches up to this one share the Kueue sandbox or the hub: one lane."""

_LAST_USER: dict[str, pytest.Item] = {}
"""Side sandbox fixture -> the last test (in run order) that uses it (the item itself: under
pytest-xdist a test's node id gains its group's name after collection)."""
_STOPPERS: dict[str, Callable[[], None]] = {}
"""Side sandbox fixture -> how to stop it, while it runs."""


def _stretch(item: pytest.Item) -> int:
    used = frozenset(SIDE_SANDBOXES).intersection(getattr(item, "fixturenames", ()))
    return _STRETCHES.index(used) if used in _STRETCHES else len(_STRETCHES)


def lane(item: pytest.Item) -> str:
    """Which pytest-xdist worker runs a test (``tests/lanes.py``): those on the main
    sandbox (``cluster``), those whose module makes sandboxes and hubs of its own (the
    faults, the chaos, the late grants), the tests that need no cluster, those on the Kueue
    sandbox and the hub, and those on the other side sandboxes, in their stretches. A
    lane's tests run in one process, in order, so a session sandbox is started once, by
    the one worker whose lane uses it; a worker takes the next lane when it is done."""
    if item.get_closest_marker("e2e") is None:
        return "unit"
    stretch = _stretch(item)
    if stretch == 0:
        return "main" if "cluster" in getattr(item, "fixturenames", ()) else "own"
    return "kueue-and-hub" if stretch <= _LAST_KUEUE_OR_HUB_STRETCH else "side"


def not_on_an_existing_cluster(item: pytest.Item) -> str | None:
    """Why an end-to-end test cannot run on an existing cluster (``--kubeconfig``), if it
    cannot: it runs on a side sandbox (Kueue's, Volcano's, Karpenter's, Prometheus', the
    hub's) or makes sandboxes of its own. Tests that need the main sandbox's processes or
    files skip when they ask for them (``Cluster.sandbox``)."""
    used = set(getattr(item, "fixturenames", ()))
    side = sorted(used.intersection(SIDE_SANDBOXES))
    if side:
        return f"runs on a sandbox of its own ({', '.join(side)}), not on an existing cluster"
    if "cluster" not in used:
        return "starts sandboxes or hubs of its own, or needs none: it runs in the sandbox suite"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    on_existing = existing(config) is not None
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.e2e)
            why = not_on_an_existing_cluster(item) if on_existing else None
            if why is not None:
                item.add_marker(pytest.mark.skip(reason=why))
    items[:] = sorted(items, key=_stretch)  # stable: files and tests keep their order within a stretch
    write_lanes({item.nodeid: lane(item) for item in items})
    _LAST_USER.clear()
    for item in items:
        for name in (*SIDE_SANDBOXES, "cluster"):
            if name in getattr(item, "fixturenames", ()):
                _LAST_USER[name] = item


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the last test that uses a side sandbox, or the main one (and its own fixtures'
    teardown), stop it: a worker that goes on to another lane does not keep it running."""
    yield
    if item.config.getoption("--keep-sandbox"):
        return
    for name, last in list(_LAST_USER.items()):
        if last is item and name in _STOPPERS:
            print(f"\nstopping {name}: its last test has run", flush=True)
            _STOPPERS.pop(name)()


def _register_stop(name: str, stop: Callable[[], None]) -> Callable[[], None]:
    """Register ``stop`` for the side sandbox ``name``; returns what the fixture's own end
    calls (nothing when the sandbox was stopped after its last test already)."""
    _STOPPERS[name] = stop

    def at_end() -> None:
        if _STOPPERS.pop(name, None) is not None:
            stop()

    return at_end


TEST_NODES_KEY = "lws-gatekeeper.io/test-nodes"


_HTTP_403 = re.compile(r"(?<![\w.])403(?![\w.])")
# A log line's time: its milliseconds may be 403 (a CI run failed on ",403 INFO").
_LOG_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ")


def refusals(log_text: str) -> list[str]:
    """The lines of a gatekeeper log that say the API server refused it something.

    A 403 as a number of its own, or "forbidden": a port such as 40333 in a log line is
    not a refusal (a CI run failed on ``('127.0.0.1', 40333)`` matching " 403").
    """
    return [
        line
        for line in log_text.splitlines()
        if _HTTP_403.search(_LOG_TIME.sub("", line)) or "forbidden" in line.lower()
    ]


@contextlib.contextmanager
def gatekeeper_running_as(
    sb: Sandbox,
    *,
    kubeconfig: Path | None = None,
    image: gk.FromImage | None = None,
    backend: str | None = None,
    args: Sequence[str] = (),
    refused: str | None = None,
) -> Iterator[None]:
    """The sandbox's gatekeeper restarted with another identity: ``kubeconfig`` (the chart's
    ServiceAccount, say) or ``image`` (the chart's Deployment run from the image), with
    ``backend`` and ``args`` as `Sandbox.start_gatekeeper` takes them. Its Lease is deleted
    first, so that the identity must create it, not only renew it. Afterwards the sandbox's own
    gatekeeper runs again, and nothing in the log of the run may say the API server refused it
    anything (the RBAC an identity lacks shows there, not always in a test's outcome), but
    lines holding ``refused`` (the one refusal a test means to provoke)."""
    sb.stop(gk.COMPONENT)
    sb.kubectl("delete", "lease", "lws-gatekeeper", "-n", GATEKEEPER_NAMESPACE, "--ignore-not-found")
    log = sb.log_dir / f"{gk.COMPONENT}.log"
    start = log.stat().st_size if log.exists() else 0
    try:
        sb.start_gatekeeper(kubeconfig=kubeconfig, image=image, backend=backend, args=args)
        yield
    finally:
        sb.stop(gk.COMPONENT)
        text = log.read_bytes()[start:].decode(errors="replace")
        print(text[-3000:])
        sb.start_gatekeeper(backend=backend)
    denials = [line for line in refusals(text) if refused is None or refused not in line]
    assert not denials, "the gatekeeper was refused something it needs:\n" + "\n".join(denials[:10])


TEST_FINALIZER = "tests.lws-gatekeeper.io/orphaning"


class Orphaning(NamedTuple):
    """The kubectl argument lists that delete an LWS with ``--cascade=orphan`` and keep its
    StatefulSets and pods, in the order they must run (iterate it to run them all).

    What the garbage collector does on an orphaning delete races two things. The LWS controller
    re-applies its owner reference to the leader StatefulSet on every reconcile until the LWS is
    being deleted; and the collector orphans only the dependents its graph has already seen, and
    deletes, as a dangling dependent, one it sees only after the LWS is gone (on a loaded
    machine it deleted a just-made leader StatefulSet, and with it the pods a test meant to keep).
    So the LWS is held by a finalizer of the test's own while it is deleted: the delete sets its
    deletion timestamp (nothing re-adds the reference after that), the collector's own merge
    patch makes the leader StatefulSet ownerless while its owner still exists (so it is not
    dangling), and only then the finalizer goes and the LWS with it."""

    hold: list[str]
    delete: list[str]
    ownerless: list[str]
    let_go: list[str]
    gone: list[str]


def orphaning(name: str, namespace: str) -> Orphaning:
    """The steps that delete LWS ``name`` orphaning its StatefulSets and pods (see `Orphaning`);
    ``delete`` is the one a tenant may run with its own identity."""
    return Orphaning(
        ["patch", "leaderworkerset", name, "-n", namespace, "--type=merge",
         "-p", json.dumps({"metadata": {"finalizers": [TEST_FINALIZER]}})],
        ["delete", "leaderworkerset", name, "-n", namespace, "--cascade=orphan", "--wait=false"],
        [
            f"--as={GARBAGE_COLLECTOR_USER}", "patch", "statefulset", name, "-n", namespace,
            "--type=merge", "-p", '{"metadata": {"ownerReferences": null}}',
        ],
        # Ours and, if the collector has not yet run, its orphan finalizer: the StatefulSet has
        # no owner any more, so an ordinary delete of the LWS takes nothing with it.
        ["patch", "leaderworkerset", name, "-n", namespace, "--type=merge",
         "-p", '{"metadata": {"finalizers": null}}'],
        ["wait", "--for=delete", f"leaderworkerset/{name}", "-n", namespace, "--timeout=90s"],
    )  # fmt: skip


@dataclass(frozen=True)
class Admin:
    """An existing cluster as the sandbox's helpers use it: ``kubectl`` from ``bin_dir`` with
    the admin ``kubeconfig`` (apply, create nodes, run)."""

    bin_dir: Path
    kubeconfig: Path

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return Kubectl(self.bin_dir, self.kubeconfig).run(*args, input=input, check=check)

    def apply(self, objects: Iterable[dict[str, Any]] | str) -> None:
        Kubectl(self.bin_dir, self.kubeconfig).apply(objects)

    def create_nodes(self, nodes: Sequence[dict[str, Any]]) -> None:
        Kubectl(self.bin_dir, self.kubeconfig).create(nodes)


@dataclass
class Cluster:
    """How tests reach the cluster under test: the sandbox (``own``), or an existing one."""

    kubeconfig: Path
    kind: str
    own: Sandbox | None = None

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox the tests started; a test that needs it skips on an existing cluster."""
        if self.own is None:
            caller = inspect.stack()[1]
            where = f"{Path(caller.filename).name}:{caller.lineno}"
            pytest.skip(
                f"needs the sandbox's own processes or files ({where}), not an existing cluster's API"
            )
        return self.own

    @property
    def kubectl_binary(self) -> str:
        """The sandbox's kubectl, or ``$KUBECTL`` / ``kubectl`` on the PATH."""
        return str(self.own.bin_dir / "kubectl") if self.own else os.environ.get("KUBECTL", "kubectl")

    def admin(self) -> Sandbox | Admin:
        """What the attack watch and its bystander tenant act through: the sandbox, or on an
        existing cluster its kubeconfig's user with ``kubectl``."""
        if self.own is not None:
            return self.own
        found = shutil.which(self.kubectl_binary)
        if found is None:
            pytest.fail(f"{self.kubectl_binary} is not on the PATH (set $KUBECTL)", pytrace=False)
        return Admin(Path(found).parent, self.kubeconfig)

    def kubectl(self, *args: str, input: str | None = None) -> str:
        res = subprocess.run(
            [self.kubectl_binary, f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            check=False,
        )
        assert res.returncode == 0, f"kubectl {' '.join(args)}: {res.stderr}"
        return res.stdout


def existing(config: pytest.Config) -> Path | None:
    """The kubeconfig of the existing cluster the tests run against (``--kubeconfig``), or None."""
    where = config.getoption("--kubeconfig")
    return Path(where).expanduser().resolve() if where else None


def sandbox_base(config: pytest.Config) -> Path:
    """The folder of this run's session sandbox (``--sandbox-dir``, or the cache's
    ``sandboxes/pytest``); every other sandbox and hub of the run is named after it with a
    ``-`` suffix. Under pytest-xdist each worker has its own (``pytest-gw0``, ``pytest-gw1``),
    so two workers never share, or sweep away, one another's sandboxes."""
    where = config.getoption("--sandbox-dir")
    base = Path(where) if where else default_dir("pytest")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return base.with_name(f"{base.name}-{worker}") if worker else base


@pytest.fixture(scope="session", autouse=True)
def _fresh_sandboxes(request: pytest.FixtureRequest) -> None:
    """Every sandbox and hub of this run starts afresh, unless ``--keep-sandbox``.

    ``Sandbox.up`` brings back a sandbox whose processes died with its data, as a developer
    wants after a crash. But a pytest run that was killed midway (a time-out, a ^C) leaves
    its sandboxes that way, with the objects of the tests it was running: webhook
    configurations naming a second replica's port, Leases, namespaces being deleted. The
    next run then brings them back, and its tests fail on another run's leftovers. So the
    folders of this run's sandboxes (the session sandbox's, and those named after it with a
    ``-`` suffix) are stopped and their data removed before any of them is started.
    """
    if request.config.getoption("--keep-sandbox") or existing(request.config):
        return
    base = sandbox_base(request.config)
    for folder in sorted({base, *base.parent.glob(f"{base.name}-*")}):
        if not folder.is_dir():
            continue
        left: Sandbox | Hub = Hub(folder) if folder.name.endswith("hub") else Sandbox(folder)
        if left.state_file.exists():
            print(f"{folder}: left by an earlier run that did not stop it; stopping it first", flush=True)
            left.down(quiet=True)


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    kubeconfig = existing(request.config)
    if kubeconfig is not None:
        yield Cluster(kubeconfig=kubeconfig, kind="existing")
        return
    sb = Sandbox(sandbox_base(request.config), say=lambda m: print(m, flush=True))
    try:
        sb.up(nodes=0)
    except Exception as exc:  # the reason goes into every e2e test's failure
        pytest.fail(f"the sandbox could not start (CI={os.environ.get('CI', '')}): {exc}", pytrace=False)
    at_end = _register_stop("cluster", sb.down)
    try:
        yield Cluster(kubeconfig=sb.kubeconfig, kind="sandbox", own=sb)
    finally:
        if not request.config.getoption("--keep-sandbox"):
            at_end()


def _sandbox_of_its_own(
    request: pytest.FixtureRequest, suffix: str, what: str, **up: Any
) -> Iterator[Sandbox]:
    """A session sandbox beside the main one, for the test modules that need ``what``.

    Its folder is the session sandbox's with ``-<suffix>`` appended (so two pytest runs
    with different ``--sandbox-dir`` never share, and race on, one); started with
    ``Sandbox.up(nodes=0, **up)``; stopped after the last test that uses it (the fixture
    ``<suffix>_sandbox``, see ``_STRETCHES``) unless ``--keep-sandbox``. One that cannot
    start fails every test that uses it, never a skip.
    """
    if existing(request.config):
        pytest.skip(f"runs on a sandbox of its own with {what}, not on an existing cluster")
    folder = Path(f"{sandbox_base(request.config)}-{suffix}")
    sb = Sandbox(folder, say=lambda m: print(m, flush=True))
    try:
        sb.up(nodes=0, **up)
    except Exception as exc:  # the reason goes into every test's failure, never a skip
        pytest.fail(
            f"the sandbox with {what} could not start (CI={os.environ.get('CI', '')}): {exc}", pytrace=False
        )
    at_end = _register_stop(f"{suffix}_sandbox", sb.down)
    try:
        yield sb
    finally:
        if not request.config.getoption("--keep-sandbox"):
            at_end()


@pytest.fixture(scope="session")
def kueue_sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """A second sandbox, with the real Kueue and the gatekeeper on its ``kueue`` backend."""
    # A Workload that can never fit is made again after 2 s (doubling), not 60: a test
    # sees the retry. Every gatekeeper this sandbox starts inherits it (NEVER_FIT_RETRY in
    # test_kueue_backend.py).
    os.environ["LWS_GATEKEEPER_NEVER_FIT_RETRY_SECONDS"] = "2"
    yield from _sandbox_of_its_own(request, "kueue", "Kueue", with_kueue=True)


@dataclass
class SharedHub:
    """One sandbox hub and two member sandboxes joined to it (``shared_hub``)."""

    hub: Hub
    members: dict[str, Sandbox]
    node_label: str
    """Every member's fake nodes carry ``pool=<node_label>``."""


@pytest.fixture(scope="session")
def shared_hub(request: pytest.FixtureRequest) -> Iterator[SharedHub]:
    """A hub (etcd, kube-apiserver, the hub's gatekeeper) and members cluster-a and cluster-b,
    each a sandbox with four 1-GPU KWOK nodes and its gatekeeper joined to the hub.

    Folders: the session sandbox's with ``-hub``, ``-cluster-a``, ``-cluster-b`` appended.
    A hub or member that cannot start fails every test that uses them, never a skip.
    """
    if existing(request.config):
        pytest.skip("runs on sandbox hubs and members of its own, not on an existing cluster")
    base = str(sandbox_base(request.config))
    say = lambda m: print(m, flush=True)  # noqa: E731
    hub = Hub(Path(f"{base}-hub"), say=say)
    members = {name: Sandbox(Path(f"{base}-{name}"), say=say) for name in ("cluster-a", "cluster-b")}
    label = "shared"
    try:
        hub.up()
        for name, sb in members.items():
            sb.up(nodes=4, labels={"pool": label}, hub=hub.kubeconfig, cluster_name=name)
    except Exception as exc:  # the reason goes into every test's failure, never a skip
        for sb in members.values():
            sb.down(quiet=True)
        hub.down(quiet=True)
        pytest.fail(f"the hub and its members could not start: {exc}", pytrace=False)

    def stop() -> None:
        for sb in members.values():
            sb.down()
        hub.down()

    at_end = _register_stop("shared_hub", stop)
    try:
        yield SharedHub(hub, members, label)
    finally:
        if not request.config.getoption("--keep-sandbox"):
            at_end()


@pytest.fixture(scope="session")
def karpenter_sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """A sandbox with the real Karpenter (KWOK cloud provider) and no static nodes: every GPU
    node in it is one Karpenter bought."""
    yield from _sandbox_of_its_own(request, "karpenter", "Karpenter", with_karpenter=True)


@pytest.fixture(scope="session")
def native_gang_sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """A sandbox of its own whose control plane has Kubernetes' native gang scheduling on
    (``sandbox up --native-gang``)."""
    yield from _sandbox_of_its_own(request, "native_gang", "native gang scheduling", native_gang=True)


@pytest.fixture(scope="session")
def volcano_sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """A sandbox of its own with Volcano's scheduler (``sandbox up --with-volcano``)."""
    # A group given back is offered again after 2 s (doubling), not 60: a test sees the
    # retry. Every gatekeeper this sandbox starts inherits it, as in ``kueue_sandbox``.
    os.environ["LWS_GATEKEEPER_NEVER_FIT_RETRY_SECONDS"] = "2"
    yield from _sandbox_of_its_own(request, "volcano", "Volcano", with_volcano=True)


@pytest.fixture(scope="session")
def prometheus_sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """A sandbox of its own with Prometheus scraping its gatekeeper (``sandbox up --with-prometheus``)."""
    yield from _sandbox_of_its_own(request, "prometheus", "Prometheus", with_prometheus=True)


@pytest.fixture(scope="session")
async def api(cluster: Cluster) -> kr8s.asyncio.Api:
    return await kr8s.asyncio.api(kubeconfig=str(cluster.kubeconfig))


@pytest.fixture
async def namespace(api: kr8s.asyncio.Api, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A fresh namespace for one test, deleted after it."""
    base = request.node.name.lower().replace("_", "-")[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:5]}"
    ns = await Namespace({"metadata": {"name": name}}, api=api)
    await ns.create()
    # Pods need the namespace's default service account (made by the controller manager).
    with anyio.fail_after(30):
        while not await list_raw(api, "serviceaccounts", namespace=name):
            await anyio.sleep(0.2)
    yield name
    await ns.delete()


def _attack_watch(sb: Sandbox | Admin, namespaces: list[str], others: Others) -> Iterator[Watch]:
    with watching(sb.bin_dir / "kubectl", sb.kubeconfig, namespaces, others=others) as seen:
        yield seen


@pytest.fixture
def attack_watch(cluster: Cluster, namespace: str, request: pytest.FixtureRequest) -> Iterator[Watch]:
    """The test's namespace watched while it runs (``watch.watching``): peak GPUs bound against
    the quota the test sets (``attack_watch.pool(nodes.selector, quota)``, or ``.quota = 0``
    with no pool), GPUs stranded in half-placed groups, and another tenant's group made at its
    end (``bystanders.in_pools``) that must run."""
    admin = cluster.admin()
    with watching(
        admin.bin_dir / "kubectl", admin.kubeconfig, [namespace], others=bystanders.in_pools(admin)
    ) as seen:
        yield seen
        seen.skipped = request.node.stash.get(SKIPPED, False)


@pytest.fixture
def kueue_attack_watch(kueue_sandbox: Sandbox) -> Iterator[Watch]:
    """``attack_watch`` in the sandbox with Kueue; the test names the ClusterQueue's nodes and
    quota (``.pool(queue.labels, gpus)``); the other tenant has a ClusterQueue of its own."""
    yield from _attack_watch(kueue_sandbox, [], bystanders.in_kueue(kueue_sandbox))


@pytest.fixture
def volcano_attack_watch(volcano_sandbox: Sandbox) -> Iterator[Watch]:
    """``attack_watch`` in the sandbox with Volcano; the other tenant has a Queue of its own."""
    yield from _attack_watch(volcano_sandbox, [], bystanders.in_volcano(volcano_sandbox))


@dataclass
class NodeSet:
    """Fake nodes that belong to one test: a unique label to select them, a taint to keep others out."""

    id: str
    names: list[str] = field(default_factory=list)

    @property
    def selector(self) -> dict[str, str]:
        return {TEST_NODES_KEY: self.id}

    @property
    def taint_key(self) -> str:
        return TEST_NODES_KEY


MakeNodes = Callable[..., Awaitable[NodeSet]]


@pytest.fixture
async def fake_nodes(api: kr8s.asyncio.Api, cluster: Cluster) -> AsyncIterator[MakeNodes]:
    """Factory: ``await fake_nodes(4, gpus=1)`` makes this test's own Ready fake GPU nodes.

    ``join=`` adds nodes to a set made before (as an autoscaler would grow a pool).
    """
    made: list[NodeSet] = []

    async def make(
        count: int,
        *,
        gpus: int = 1,
        cpu: str = "8",
        memory: str = "32Gi",
        labels: dict[str, str] | None = None,
        join: NodeSet | None = None,
    ) -> NodeSet:
        # A letter first: an id such as "3e814597" would read as a number in YAML.
        ns = join or NodeSet(id="n" + uuid.uuid4().hex[:7])
        objs: list[dict[str, Any]] = []
        first = len(ns.names)
        for i in range(first, first + count):
            name = f"t{ns.id}-{i}"
            objs.append(
                fake_node(
                    name,
                    gpus=gpus,
                    cpu=cpu,
                    memory=memory,
                    labels={**ns.selector, **(labels or {})},
                    taints=[{"key": TEST_NODES_KEY, "value": ns.id, "effect": "NoSchedule"}],
                )
            )
            ns.names.append(name)
        if objs:
            cluster.kubectl("create", "-f", "-", input=as_json_list(objs))
        if join is None:
            made.append(ns)
        with anyio.fail_after(60):
            while True:
                nodes = await list_raw(api, "nodes", label_selector=ns.selector)
                ready = [
                    n
                    for n in nodes
                    if any(
                        c.get("type") == "Ready" and c.get("status") == "True"
                        for c in n.get("status", {}).get("conditions", [])
                    )
                ]
                if len(ready) == len(ns.names):
                    return ns
                await anyio.sleep(0.2)

    yield make
    for ns in made:
        for name in ns.names:
            with contextlib.suppress(kr8s.NotFoundError):
                await (await Node.get(name, api=api)).delete()


Pool = new_class(kind="Pool", version="lws-gatekeeper.io/v1alpha1", namespaced=False, plural="pools")

MakePool = Callable[..., Awaitable[str]]


@pytest.fixture
async def make_pool(api: kr8s.asyncio.Api) -> AsyncIterator[MakePool]:
    """Factory: ``await make_pool(nodes, quota={"nvidia.com/gpu": 4})`` makes a Pool over a test's nodes.

    The Pool admits every namespace unless ``namespace_selector`` says otherwise.
    """
    made: list[Any] = []

    async def make(
        nodes: NodeSet,
        *,
        quota: dict[str, Any] | None = None,
        strategy: str = "BestEffortFIFO",
        node_fit: str | None = None,
        tolerations: list[dict[str, Any]] | None = None,
        namespace_selector: dict[str, Any] | None = None,
        levels: list[str] | None = None,
    ) -> str:
        name = f"pool-{nodes.id}-{len(made)}"
        spec: dict[str, Any] = {
            "nodeSelector": nodes.selector,
            "queueingStrategy": strategy,
            # Every namespace by default (absent would be none); a test narrows it.
            "namespaceSelector": namespace_selector if namespace_selector is not None else {},
        }
        if tolerations is not None:
            spec["tolerations"] = tolerations
        if node_fit is not None:
            spec["nodeFit"] = node_fit
        if quota is not None:
            spec["quota"] = quota
        if levels is not None:
            spec["topology"] = {"levels": levels}
        pool = await Pool({"metadata": {"name": name}, "spec": spec}, api=api)
        await pool.create()
        made.append(pool)
        return name

    yield make
    for pool in made:
        with contextlib.suppress(kr8s.NotFoundError):
            await pool.delete()


async def eventually(
    probe: Callable[[], Awaitable[bool]], *, timeout: float = 60, what: str = "the condition"
) -> None:
    """Poll ``probe`` until it is true; fail with ``what`` after ``timeout`` seconds."""
    deadline = anyio.current_time() + timeout
    while anyio.current_time() < deadline:
        if await probe():
            return
        await anyio.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


async def records(api: kr8s.asyncio.Api, namespace: str, lws: str | None = None) -> dict[int, dict[str, Any]]:
    """The namespace's GroupAdmission records by group index (``lws``: of that LWS only)."""
    objs = await list_raw(api, "groupadmissions.lws-gatekeeper.io", namespace=namespace)
    return {
        int(o["spec"]["groupIndex"]): o
        for o in objs
        if lws is None or o["spec"].get("leaderWorkerSet") == lws
    }


def admitted(record: Mapping[str, Any]) -> bool:
    for c in record.get("status", {}).get("conditions", []):
        if c.get("type") == "Admitted":
            return bool(c.get("status") == "True")
    return False


def states(recs: Mapping[int, Mapping[str, Any]]) -> str:
    """What the records say, a group a clause: "group 0: Admitted; group 1: WaitingForQuota"."""
    return "; ".join(
        f"group {i}: {'Admitted' if admitted(r) else condition(r).get('reason')}"
        for i, r in sorted(recs.items())
    )


def condition(record: Mapping[str, Any]) -> dict[str, Any]:
    for c in record.get("status", {}).get("conditions", []):
        if c.get("type") == "Admitted":
            return dict(c)
    return {}
