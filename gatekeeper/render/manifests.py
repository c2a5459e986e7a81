"""Cluster objects for the reserved pools, per backend, from each backend's jinja2 template.

Why this exists: the same few lines of pool description become each backend's objects
(a ``Pool``, a Kueue ResourceFlavor + ClusterQueue + LocalQueues, ...): the template and the
names it reads are the backend's own (``core.plugin.backend.Backend``), and the template
lives in the backend's folder (``render.yaml.j2``). This module only feeds them checked
values (see ``pools.py``) and quotes every string for YAML, so a label value such as
``"true"`` or ``"1"`` stays a string. The templates are found with ``importlib.resources``,
from a source checkout and from a built wheel alike (``[tool.setuptools.package-data]``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

import jinja2
import yaml

from gatekeeper.core.backends import BACKENDS
from gatekeeper.core.plugin.backend import Backend
from gatekeeper.render.pools import PoolsFile, PoolSpec

__all__ = [
    "MANAGED_BY",
    "RenderedPool",
    "TemplatesMissing",
    "render",
    "render_stream",
    "template_file",
]

MANAGED_BY = "lws-gatekeeper-render"
"""Value of app.kubernetes.io/managed-by on every rendered object (select them with -l)."""


class TemplatesMissing(RuntimeError):
    """The package was installed without its templates."""


@dataclass(frozen=True)
class RenderedPool:
    """One pool's objects for one backend, as a YAML stream (one or more documents)."""

    pool: str
    backend: str
    text: str

    @property
    def file_name(self) -> str:
        """Where ``render -o DIR`` writes it."""
        return f"{self.backend}-{self.pool}.yaml"


def template_file(backend: Backend) -> Traversable:
    """The render template shipped with ``backend``'s package; TemplatesMissing if absent."""
    package, _, name = backend.template.partition(":")
    try:
        path = resources.files(package).joinpath(name) if package and name else None
    except ModuleNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise TemplatesMissing(
            f"the render template {backend.template!r} of backend {backend.name!r} is missing: "
            "reinstall lws-gatekeeper (a wheel built without its package data?)"
        )
    return path


def render(pools: PoolsFile, backend: Backend | str) -> list[RenderedPool]:
    """Each pool's objects for ``backend`` (one or its name), in the description's order."""
    one = BACKENDS[backend] if isinstance(backend, str) else backend
    template = _environment().from_string(template_file(one).read_text(encoding="utf-8"))
    return [
        RenderedPool(pool.name, one.name, template.render(_context(pool, one)).rstrip("\n") + "\n")
        for pool in pools.pools
    ]


def render_stream(pools: PoolsFile, backend: Backend | str) -> str:
    """All pools' objects as one YAML stream (what ``render`` prints without ``-o``)."""
    return "---\n".join(rendered.text for rendered in render(pools, backend))


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # YAML, not HTML: strings are quoted by the `q` filter instead
    )
    env.filters["q"] = _quote
    env.filters["labels"] = _labels
    return env


def _context(pool: PoolSpec, backend: Backend) -> dict[str, object]:
    return {**backend.render_context, "pool": pool, "managed_by": MANAGED_BY}


def _quote(value: object) -> str:
    """A string as a YAML scalar that stays a string for every YAML parser.

    Plain when it is obviously a word (on-demand, nvidia.com/gpu); otherwise JSON's
    double-quoted form, which is valid YAML: ``"true"``, ``"1"``, ``"1e3"``, ``"no"``.
    """
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _YAML11_WORDS and yaml.safe_load(text) == text:
        return text
    return json.dumps(text)


_PLAIN = re.compile(r"^[A-Za-z][-A-Za-z0-9_./]*$")
_YAML11_WORDS = frozenset({"y", "yes", "n", "no", "true", "false", "on", "off", "null"})


def _labels(labels: Mapping[str, str]) -> str:
    return ", ".join(f"{key}={value}" for key, value in labels.items())
