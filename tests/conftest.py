"""Shared pytest options: which cluster the end-to-end tests run on."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lws-gatekeeper")
    group.addoption(
        "--cluster",
        choices=("sandbox", "kind"),
        default="sandbox",
        help="Where end-to-end tests run: the local-process sandbox (default) or a kind cluster "
        "made by pytest-kind (needs Docker).",
    )
    group.addoption(
        "--sandbox-dir",
        default=None,
        help="Folder of the test sandbox (default: the cache folder's sandboxes/pytest).",
    )
    group.addoption(
        "--keep-sandbox",
        action="store_true",
        help="Leave the test sandbox running after the session (faster re-runs).",
    )
