"""The pools description file (POOLS.yaml): read, checked, with errors that name line and field.

Why this exists: a person describes their reserved pools once, in a few lines of YAML,
and ``lws-gatekeeper render`` turns that into cluster objects for the chosen backend. A
typo there must not become a silently wrong ClusterQueue: every value is checked here,
unknown keys are errors (a misspelt optional field would otherwise be ignored), and each
error names the file, the line and the field, e.g.
``pools.yaml line 4: pools[0].gpus: must be a positive integer, got "four"``.

Optional fields beyond the GPUs: ``cpu`` and ``memory`` (quota of those, Kubernetes
quantities, kept as written so the rendered objects say what the user wrote) and
``admissionChecks`` (names of Kueue AdmissionCheck objects the pool's ClusterQueue
requires; only the ``kueue`` backend has a place for them).

Line numbers come from PyYAML's node tree (``yaml.compose``), whose nodes carry their
position; scalars are then built with the safe constructor, so the types are exactly
those of ``yaml.safe_load``. All errors of a file are reported together.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import yaml

from gatekeeper.core.kube.quantity import parse_quantity
from gatekeeper.core.model.pool import NodeFit, QueueingStrategy

__all__ = [
    "DEFAULT_GPU_RESOURCE",
    "MAX_ADMISSION_CHECKS",
    "MAX_NODE_LABELS",
    "PoolSpec",
    "PoolsError",
    "PoolsFile",
    "parse_pools",
]

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
MAX_NODE_LABELS = 8
"""Kueue's limit on a ResourceFlavor's nodeLabels (the Pool CRD allows 16): one rule for all backends."""
MAX_ADMISSION_CHECKS = 64
"""Kueue's limit on a ClusterQueue's spec.admissionChecksStrategy.admissionChecks."""

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_NAMESPACE = re.compile(rf"^{_DNS_LABEL}$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")

_SIMPLE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_FIELDS = (
    "name",
    "nodeLabels",
    "gpus",
    "gpuResource",
    "cpu",
    "memory",
    "namespaces",
    "queueingStrategy",
    "nodeFit",
    "admissionChecks",
)
_REQUIRED = ("name", "nodeLabels", "gpus", "namespaces")


@dataclass(frozen=True)
class PoolSpec:
    """One reserved pool as described by the user."""

    name: str
    node_labels: Mapping[str, str]
    gpus: int
    namespaces: tuple[str, ...]
    gpu_resource: str = DEFAULT_GPU_RESOURCE
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    cpu: str | None = None
    """Quota of cpu as a Kubernetes quantity as written ("64", "500m"); None: not limited."""
    memory: str | None = None
    """Quota of memory as a Kubernetes quantity as written ("512Gi"); None: not limited."""
    admission_checks: tuple[str, ...] = ()
    """Kueue AdmissionCheck names the ClusterQueue requires (the kueue backend only)."""
    node_fit: NodeFit = NodeFit.REQUIRED
    """Whether a group must fit the pool's nodes now (the pools backend only)."""


@dataclass(frozen=True)
class PoolsFile:
    """A checked description: the pools in file order."""

    pools: tuple[PoolSpec, ...]


class PoolsError(ValueError):
    """A description that cannot be rendered; ``problems`` are one line each: ``FILE line N: FIELD: WHAT``."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


T = TypeVar("T")


@dataclass
class _Reader:
    """Walks the node tree, collecting problems instead of stopping at the first."""

    source: str
    found: list[tuple[int, str]] = field(default_factory=list)
    _constructor: yaml.SafeLoader = field(default_factory=lambda: yaml.SafeLoader(""))

    def problem(self, node: yaml.Node | None, where: str, what: str) -> None:
        line = node.start_mark.line + 1 if node is not None else 0
        at = f" line {line}" if line else ""
        prefix = f"{where}: " if where else ""
        self.found.append((line, f"{self.source}{at}: {prefix}{what}"))

    @property
    def problems(self) -> list[str]:
        """The problems in the order of the file's lines."""
        return [message for _, message in sorted(self.found, key=lambda found: found[0])]

    def shown(self, node: yaml.Node) -> str:
        """How a value is quoted in an error: strings in quotes, other scalars as written, with their type."""
        if isinstance(node, yaml.MappingNode):
            return "a mapping"
        if isinstance(node, yaml.SequenceNode):
            return "a list"
        value = self.value(node)
        if value is None:
            return "nothing"
        text = str(node.value)
        if len(text) > 60:
            text = text[:57] + "..."
        if isinstance(value, str):
            return f'"{text}"'
        kind = {bool: "a boolean", int: "a number", float: "a number"}.get(type(value), type(value).__name__)
        return f"{text} ({kind})"

    def value(self, node: yaml.Node) -> Any:
        """The node as yaml.safe_load builds it; an unknown tag (``!foo 4``) reads as the plain text."""
        try:
            return self._constructor.construct_object(node, deep=True)
        except yaml.YAMLError:
            return str(node.value) if isinstance(node, yaml.ScalarNode) else None

    def mapping(self, node: yaml.Node, where: str) -> dict[str, tuple[yaml.Node, yaml.Node]] | None:
        """The mapping's entries by key (with their key node), or None after reporting why not."""
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, where, f"must be a mapping, got {self.shown(node)}")
            return None
        entries: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            key = self.value(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                self.problem(key_node, where, f"keys must be strings, got {self.shown(key_node)}")
                continue
            if key in entries:
                self.problem(key_node, _join(where, key), "appears twice")
                continue
            entries[key] = (key_node, value_node)
        return entries

    def sequence(self, node: yaml.Node, where: str) -> list[yaml.Node] | None:
        if not isinstance(node, yaml.SequenceNode):
            self.problem(node, where, f"must be a list, got {self.shown(node)}")
            return None
        return list(node.value)

    def string(self, node: yaml.Node, where: str, check: Callable[[str], str | None]) -> str | None:
        """A string scalar that passes ``check`` (which returns what is wrong, or None)."""
        value = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(value, str):
            self.problem(node, where, f"must be a string, got {self.shown(node)}")
            return None
        wrong = check(value)
        if wrong is not None:
            self.problem(node, where, f"{wrong}, got {self.shown(node)}")
            return None
        return value

    def unknown_keys(
        self, entries: Mapping[str, tuple[yaml.Node, yaml.Node]], known: Sequence[str], where: str
    ) -> None:
        for key, (key_node, _) in entries.items():
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"did you mean {close[0]}? " if close else ""
                self.problem(key_node, _join(where, key), f"unknown field ({hint}known: {', '.join(known)})")


def parse_pools(text: str, source: str = "pools.yaml") -> PoolsFile:
    """Read and check a pools description; ``source`` is the name errors show (the file's path).

    Raises PoolsError listing every problem found.
    """
    reader = _Reader(source)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f" line {mark.line + 1}" if mark is not None else ""
        what = ", ".join(part for part in (exc.context, exc.problem) if part)
        raise PoolsError([f"{source}{line}: not valid YAML: {what}"]) from exc
    except yaml.YAMLError as exc:
        raise PoolsError([f"{source}: not valid YAML: {exc}"]) from exc
    if root is None:
        raise PoolsError([f"{source}: is empty; expected a mapping with a `pools:` list"])
    pools = _read_root(reader, root)
    if reader.problems:
        raise PoolsError(reader.problems)
    return PoolsFile(pools=tuple(pools))


def _read_root(reader: _Reader, root: yaml.Node) -> list[PoolSpec]:
    entries = reader.mapping(root, "")
    if entries is None:
        return []
    reader.unknown_keys(entries, ("pools",), "")
    if "pools" not in entries:
        reader.problem(root, "", "missing required field `pools` (a list of pools)")
        return []
    list_node = entries["pools"][1]
    items = reader.sequence(list_node, "pools")
    if items is None:
        return []
    if not items:
        reader.problem(list_node, "pools", "must list at least one pool")
    pools: list[PoolSpec] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        pool = _read_pool(reader, item, f"pools[{i}]")
        if pool is None:
            continue
        if pool.name in seen:
            earlier = f"pools[{seen[pool.name]}]"
            reader.problem(item, f"pools[{i}].name", f'"{pool.name}" is already the name of {earlier}')
            continue
        seen[pool.name] = i
        pools.append(pool)
    return pools


def _read_pool(reader: _Reader, node: yaml.Node, where: str) -> PoolSpec | None:
    entries = reader.mapping(node, where)
    if entries is None:
        return None
    before = len(reader.problems)
    reader.unknown_keys(entries, _FIELDS, where)
    for required in _REQUIRED:
        if required not in entries:
            reader.problem(node, where, f"missing required field `{required}`")

    def get(name: str, read: Callable[[yaml.Node, str], T | None]) -> T | None:
        return read(entries[name][1], _join(where, name)) if name in entries else None

    name = get("name", lambda n, w: reader.string(n, w, _pool_name_problem))
    labels = get("nodeLabels", lambda n, w: _read_node_labels(reader, n, w))
    gpus = get("gpus", lambda n, w: _read_gpus(reader, n, w))
    namespaces = get("namespaces", lambda n, w: _read_namespaces(reader, n, w))
    resource = get("gpuResource", lambda n, w: reader.string(n, w, _resource_problem))
    strategy = get("queueingStrategy", lambda n, w: reader.string(n, w, _strategy_problem))
    cpu = get("cpu", lambda n, w: _read_quantity(reader, n, w))
    memory = get("memory", lambda n, w: _read_quantity(reader, n, w))
    checks = get("admissionChecks", lambda n, w: _read_admission_checks(reader, n, w))
    node_fit = get("nodeFit", lambda n, w: reader.string(n, w, _node_fit_problem))
    if len(reader.problems) > before:
        return None
    assert name is not None and labels is not None and gpus is not None and namespaces is not None
    return PoolSpec(
        name=name,
        node_labels=labels,
        gpus=gpus,
        namespaces=namespaces,
        gpu_resource=resource or DEFAULT_GPU_RESOURCE,
        queueing_strategy=QueueingStrategy(strategy) if strategy else QueueingStrategy.BEST_EFFORT_FIFO,
        cpu=cpu,
        memory=memory,
        admission_checks=checks or (),
        node_fit=NodeFit(node_fit) if node_fit else NodeFit.REQUIRED,
    )


def _read_gpus(reader: _Reader, node: yaml.Node, where: str) -> int | None:
    value = reader.value(node) if isinstance(node, yaml.ScalarNode) else None
    # bool is an int in Python; `gpus: yes` is not a count.
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        reader.problem(node, where, f"must be a positive integer, got {reader.shown(node)}")
        return None
    return value


def _read_quantity(reader: _Reader, node: yaml.Node, where: str) -> str | None:
    """A positive Kubernetes quantity (``64``, ``500m``, ``512Gi``, ``1e3``), as text.

    A number YAML reads as an int is kept as that int's digits; a float as written
    (``1.5``), so the rendered quota is what the user wrote, never a float's repr.
    """
    value = reader.value(node) if isinstance(node, yaml.ScalarNode) else None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        text = None
    elif isinstance(value, float):
        text = str(node.value)
    else:
        text = str(value)
    try:
        amount = parse_quantity(text) if text is not None else None
    except ValueError:
        amount = None
    if text is None or amount is None:
        reader.problem(node, where, f"must be a Kubernetes quantity, got {reader.shown(node)}")
        return None
    if amount <= 0:
        reader.problem(
            node,
            where,
            f"must be a Kubernetes quantity above zero such as 64, 500m or 512Gi, got {reader.shown(node)}",
        )
        return None
    return text


def _read_admission_checks(reader: _Reader, node: yaml.Node, where: str) -> tuple[str, ...] | None:
    items = reader.sequence(node, where)
    if items is None:
        return None
    if len(items) > MAX_ADMISSION_CHECKS:
        reader.problem(
            node, where, f"at most {MAX_ADMISSION_CHECKS} AdmissionChecks (Kueue's limit), got {len(items)}"
        )
        return None
    return _distinct_names(reader, items, where, _admission_check_problem)


def _read_node_labels(reader: _Reader, node: yaml.Node, where: str) -> dict[str, str] | None:
    entries = reader.mapping(node, where)
    if entries is None:
        return None
    if not entries:
        reader.problem(node, where, "must hold at least one label (those that select the pool's nodes)")
        return None
    if len(entries) > MAX_NODE_LABELS:
        reader.problem(node, where, f"at most {MAX_NODE_LABELS} labels (Kueue's limit), got {len(entries)}")
        return None
    labels: dict[str, str] = {}
    ok = True
    for key, (key_node, value_node) in entries.items():
        wrong = _label_key_problem(key)
        if wrong is not None:
            reader.problem(key_node, _join(where, key), f"{wrong}, got {reader.shown(key_node)}")
            ok = False
            continue
        value = reader.value(value_node) if isinstance(value_node, yaml.ScalarNode) else None
        if not isinstance(value, str):
            # `gpu: true` or `zone: 1` would reach the API server as a bool or a number.
            hint = f'; quote it: "{value_node.value}"' if isinstance(value_node, yaml.ScalarNode) else ""
            reader.problem(
                value_node, _join(where, key), f"must be a string, got {reader.shown(value_node)}{hint}"
            )
            ok = False
            continue
        if len(value) > 63 or not _LABEL_VALUE.match(value):
            reader.problem(
                value_node,
                _join(where, key),
                "must be a label value (at most 63 letters, digits, '-', '_' or '.', starting and "
                f"ending with a letter or digit), got {reader.shown(value_node)}",
            )
            ok = False
            continue
        labels[key] = value
    return labels if ok else None


def _read_namespaces(reader: _Reader, node: yaml.Node, where: str) -> tuple[str, ...] | None:
    items = reader.sequence(node, where)
    if items is None:
        return None
    if not items:
        reader.problem(node, where, "must list at least one namespace that may use the pool")
        return None
    return _distinct_names(reader, items, where, _namespace_problem)


def _distinct_names(
    reader: _Reader, items: Sequence[yaml.Node], where: str, problem: Callable[[str], str | None]
) -> tuple[str, ...] | None:
    """The names of a list, each checked by ``problem`` and none twice; None after any problem."""
    names: list[str] = []
    ok = True
    for i, item in enumerate(items):
        name = reader.string(item, f"{where}[{i}]", problem)
        if name is None:
            ok = False
        elif name in names:
            reader.problem(item, f"{where}[{i}]", f'"{name}" is listed twice')
            ok = False
        else:
            names.append(name)
    return tuple(names) if ok else None


def _pool_name_problem(name: str) -> str | None:
    # The name is a Pool / ClusterQueue / ResourceFlavor / LocalQueue / Queue name and the
    # value of the lws-gatekeeper.io/pool label: a DNS subdomain of at most 63 characters.
    if len(name) > 63 or not _DNS_SUBDOMAIN.match(name):
        return (
            "must be a lowercase name of at most 63 characters (letters, digits, '-' and '.', "
            "starting and ending with a letter or digit), as it names cluster objects and is "
            "the value of the label lws-gatekeeper.io/pool"
        )
    return None


def _admission_check_problem(name: str) -> str | None:
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        return (
            "must be the name of an AdmissionCheck (at most 253 lowercase letters, digits, '-' "
            "and '.', starting and ending with a letter or digit)"
        )
    return None


def _namespace_problem(name: str) -> str | None:
    if len(name) > 63 or not _NAMESPACE.match(name):
        return "must be a namespace name (at most 63 lowercase letters, digits and '-')"
    return None


def _bad_qualified_name(name: str, *, prefix_required: bool) -> bool:
    """Is ``name`` NOT a Kubernetes qualified name ([prefix/]name)?"""
    prefix, slash, base = name.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return True
    if prefix_required and not slash:
        return True
    return not base or len(base) > 63 or not _LABEL_NAME.match(base)


def _label_key_problem(key: str) -> str | None:
    if _bad_qualified_name(key, prefix_required=False):
        return "must be a label key such as pool or example.com/pool"
    return None


def _resource_problem(name: str) -> str | None:
    if _bad_qualified_name(name, prefix_required=True) or name.startswith(("kubernetes.io/", "requests.")):
        return "must be an extended resource name such as nvidia.com/gpu or amd.com/gpu"
    return None


def _strategy_problem(name: str) -> str | None:
    allowed = [s.value for s in QueueingStrategy]
    if name not in allowed:
        return f"must be one of {', '.join(allowed)}"
    return None


def _node_fit_problem(name: str) -> str | None:
    allowed = [f.value for f in NodeFit]
    if name not in allowed:
        return f"must be one of {', '.join(allowed)}"
    return None


def _join(where: str, key: str) -> str:
    """``where.key``, or ``where["key"]`` when the key would not read as one name."""
    if not _SIMPLE_KEY.match(key):
        return f'{where}["{key}"]'
    return f"{where}.{key}" if where else key
