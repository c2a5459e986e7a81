"""Cluster objects for the reserved pools, per backend, from the jinja2 templates in ``templates/``.

Why this exists: the same few lines of pool description become each backend's objects
(a ``Pool``, a Kueue ResourceFlavor + ClusterQueue + LocalQueues, ...): the template and the
names it reads are the backend's own (``core.plugin.backend.Backend``). The
shapes live in templates a person can read next to the backends' docs; this module only
feeds them checked values (see ``pools.py``) and quotes every string for YAML, so a
label value such as ``"true"`` or ``"1"`` stays a string.

Where the templates come from: the source of truth is ``templates/`` at the repository
root (the layout in docs/development.md). ``gatekeeper/render/templates`` is a symbolic link to it, so
the package finds them with ``importlib.resources`` both from a source checkout
(``pip install -e .``) and from a built wheel, where setuptools copies the linked files
in as package data (``[tool.setuptools.package-data]``).
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
    "templates_dir",
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


def templates_dir() -> Traversable:
    """The templates folder shipped with the package; TemplatesMissing names the fix if absent."""
    folder = resources.files("gatekeeper.render").joinpath("templates")
    if not folder.is_dir() or not folder.joinpath(BACKENDS.default.template).is_file():
        raise TemplatesMissing(
            f"the render templates are missing from {folder}: it should be a link to the "
            "repository's templates/ folder (a source checkout) or hold its files (a wheel). "
            "Reinstall lws-gatekeeper, or restore the link with "
            "`ln -s ../../templates gatekeeper/render/templates`."
        )
    return folder


def render(pools: PoolsFile, backend: Backend | str) -> list[RenderedPool]:
    """Each pool's objects for ``backend`` (one or its name), in the description's order."""
    one = BACKENDS[backend] if isinstance(backend, str) else backend
    template = _environment().get_template(one.template)
    return [
        RenderedPool(pool.name, one.name, template.render(_context(pool, one)).rstrip("\n") + "\n")
        for pool in pools.pools
    ]


def render_stream(pools: PoolsFile, backend: Backend | str) -> str:
    """All pools' objects as one YAML stream (what ``render`` prints without ``-o``)."""
    return "---\n".join(rendered.text for rendered in render(pools, backend))


def _environment() -> jinja2.Environment:
    folder = templates_dir()

    def load(name: str) -> str | None:
        path = folder.joinpath(name)
        return path.read_text(encoding="utf-8") if path.is_file() else None

    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(load),
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
