"""Shared pytest options: which cluster the end-to-end tests run on."""

from __future__ import annotations

import pytest

from .e2e import attack_table
from .lanes import lane_scheduling, make_lanes_folder, remove_lanes_folder


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lws-gatekeeper")
    group.addoption(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        help="Run the end-to-end tests against the existing cluster of this kubeconfig (LWS and "
        "the gatekeeper installed; KWOK's controller for the tests' fake nodes) instead of the "
        "sandbox: the tests that restart processes, read the sandbox's own files or start "
        "sandboxes of their own skip, each with its reason (docs/development.md).",
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


def pytest_configure(config: pytest.Config) -> None:
    """The process that starts pytest-xdist workers makes the folder of their lanes."""
    if config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
        make_lanes_folder()


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
        remove_lanes_folder()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Whole lanes to a worker at a time (``tests/lanes.py``)."""
    return lane_scheduling(config, log)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Gather the attack rows the reports carry (``tests/e2e/attack_table.py``). Here, not in
    ``tests/e2e/conftest.py``: the process that runs xdist's workers loads only this file."""
    attack_table.SHOWN.extend(
        tuple(v)
        for k, v in report.user_properties
        if k == attack_table.REPORT_KEY  # type: ignore[misc]
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The attack suite's table, when attacks ran."""
    if attack_table.SHOWN:
        terminalreporter.write_sep("=", f"attack suite: {len(attack_table.SHOWN)} attacks")
        for line in attack_table.lines(attack_table.SHOWN):
            terminalreporter.write_line(line)
