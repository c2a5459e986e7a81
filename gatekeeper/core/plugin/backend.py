"""What a backend is to the rest of the program: the pure half of its plug-in contract.

Why this exists: a quota authority (our own Pools, Kueue, ...) is added by writing its
folder and one registry line, as Kueue adds a job integration with ``RegisterIntegration``.
Everything that offers a choice of backend iterates the registry instead of naming one: the
``run --backend`` and ``render --backend`` choices and their help, the pods webhook's patch,
the render templates, ``why``'s view of a pool, the chart's schema (checked against it by a
test). This module is the half of the contract that needs no client; ``controller.plugin`` is
the other half (the backend's controller loop). ``core.backends`` holds the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.core.plugin.explain import PoolViewer

__all__ = ["Backend", "PodPatch", "Registry"]

PodPatch = Callable[[Mapping[str, Any]], list[dict[str, Any]]]
"""JSON-patch operations for an opted-in pod being created (``[]``: none)."""


@dataclass(frozen=True)
class Backend:
    """A backend as the CLI, the webhook and ``render`` see it."""

    name: str
    """The value of ``run --backend``, ``render --backend`` and the chart's ``backend``."""
    pool_kind: str
    """What its pools are, in words (``Pool``, ``ClusterQueue``): ``why`` says none was found."""
    pool_view: PoolViewer
    """How ``why`` finds and shows a pool of this backend, through the reader it is given."""
    summary: str
    """One sentence for ``--help``: what the pool label names and who decides."""
    renders: str
    """What ``render --backend NAME`` writes, in a few words (``--help``)."""
    template: str
    """The render template, as ``PACKAGE:FILE``: a file of the backend's own folder (its
    package), read by ``render`` through the package's resources."""
    render_context: Mapping[str, str] = field(default_factory=dict)
    """Extra names the render template reads (the API versions it writes)."""
    pod_patch: PodPatch | None = None
    """What the pods webhook adds to an opted-in pod at creation, after the gate (or the
    pass-through); None: nothing (the backend's controller alone acts on the pods)."""


class Registry:
    """The backends by name, in the order they were registered (the first is the default)."""

    def __init__(self, backends: Iterable[Backend]) -> None:
        self._by_name: dict[str, Backend] = {}
        for one in backends:
            if one.name in self._by_name:
                raise ValueError(f"backend {one.name!r} registered twice")
            self._by_name[one.name] = one

    def __getitem__(self, name: str) -> Backend:
        try:
            return self._by_name[name]
        except KeyError:
            known = ", ".join(self.names)
            raise KeyError(f"no backend {name!r} (known: {known})") from None

    def __iter__(self) -> Iterator[Backend]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    @property
    def default(self) -> Backend:
        return next(iter(self._by_name.values()))
