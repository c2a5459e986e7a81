"""The backends' front door: one registry, and everything that offers a backend iterates it.

A backend is its folders (``gatekeeper/core/backends/NAME/``, its controller module
``gatekeeper/controller/backends/NAME.py``), its render template and one line in each of the
two registries; these tests hold the rest of the program to that (docs/adding-a-backend.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from gatekeeper.cli import run_cmd
from gatekeeper.controller.backends import PLUGINS
from gatekeeper.core.backends import BACKENDS
from gatekeeper.core.plugin.backend import Backend, Registry
from gatekeeper.render.cli import render_cmd
from gatekeeper.render.manifests import TemplatesMissing, template_file

PRODUCT = Path(__file__).resolve().parents[2] / "gatekeeper"
REGISTRIES = {PRODUCT / "core/backends/__init__.py", PRODUCT / "controller/backends/__init__.py"}


def _choices(command: click.Command) -> tuple[str, ...]:
    (param,) = [p for p in command.params if p.name == "backend"]
    assert isinstance(param.type, click.Choice)
    return tuple(param.type.choices)


def test_the_two_registries_name_the_same_backends_in_the_same_order() -> None:
    assert tuple(PLUGINS) == BACKENDS.names
    assert all(name == plugin.name for name, plugin in PLUGINS.items())
    assert BACKENDS.default.name == "pools"


def test_the_commands_offer_exactly_the_registered_backends() -> None:
    assert _choices(run_cmd) == BACKENDS.names
    assert _choices(render_cmd) == BACKENDS.names


def test_every_backend_has_its_render_template_in_its_folder() -> None:
    for backend in BACKENDS:
        assert template_file(backend).is_file(), backend.name
        package, _, name = backend.template.partition(":")
        assert (PRODUCT / package.removeprefix("gatekeeper.").replace(".", "/") / name).is_file()
        assert _owned_by(PRODUCT / package.removeprefix("gatekeeper.").replace(".", "/") / name, backend.name)


def test_a_backend_without_its_template_is_told_so() -> None:
    async def nothing(*_: object) -> None:
        return None

    for where in ("gatekeeper.core.backends.pools:nothing.yaml.j2", "no.such.package:x.j2", "x.yaml.j2"):
        with pytest.raises(TemplatesMissing, match="missing"):
            template_file(Backend("x", "X", nothing, "s", "r", where))


def test_a_backend_registered_twice_is_refused() -> None:
    async def nothing(*_: object) -> None:
        return None

    one = Backend("x", "X", nothing, "s", "r", "x.yaml.j2")
    with pytest.raises(ValueError, match="registered twice"):
        Registry((one, one))
    with pytest.raises(KeyError, match="known: x"):
        Registry((one,))["y"]


def _owned_by(path: Path, name: str) -> bool:
    return (
        path.is_relative_to(PRODUCT / "core/backends" / name)
        or path == PRODUCT / "controller/backends" / f"{name}.py"
        or path in REGISTRIES
    )


SHARED_WORDS = {
    "pools": "Pool and pool are the product's own words (its CRD, its label)",
    "kueue": "Kueue also hosts the AdmissionCheck controllers, which are not a backend",
}
"""Backends whose name is a word the rest of the product uses for its own reasons."""


@pytest.mark.parametrize("name", [b.name for b in BACKENDS if b.name not in SHARED_WORDS])
def test_no_product_module_outside_a_backends_folders_names_it(name: str) -> None:
    """Adding a backend touches its folders and the registries only."""
    word = re.compile(re.escape(name), re.IGNORECASE)
    naming = [
        str(path.relative_to(PRODUCT))
        for path in sorted(PRODUCT.rglob("*.py"))
        if not _owned_by(path, name) and word.search(path.read_text(encoding="utf-8"))
    ]
    assert naming == [], f"{name} is named outside its folders by {naming}"


def test_every_check_is_a_registered_plugin_turned_on_by_a_run_option() -> None:
    """The checks' front door: one registry line each, an Options field that turns it on, and
    the AdmissionCheck controllerName it serves."""
    from dataclasses import fields

    from gatekeeper.controller.app import Options
    from gatekeeper.controller.checks import CHECKS
    from gatekeeper.core.kube.keys import NODE_FIT_CONTROLLER, SHARED_RESERVATION_CONTROLLER

    assert set(CHECKS) == {NODE_FIT_CONTROLLER, SHARED_RESERVATION_CONTROLLER}
    options = {f.name: f for f in fields(Options)}
    for check in CHECKS.values():
        assert options[check.option].default is False, check.name  # off unless asked
        flag = "--" + check.option.replace("_", "-")
        assert flag in {opt for p in run_cmd.params for opt in p.opts}, flag
