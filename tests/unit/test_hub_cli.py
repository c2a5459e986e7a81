"""The hub's command-line checks, before anything starts: a member needs a name, a hub role no hub."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from gatekeeper.cli import main


def test_run_with_a_hub_needs_a_cluster_name(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["run", "--hub-kubeconfig", str(tmp_path / "k")])
    assert res.exit_code == 2 and "--hub-kubeconfig needs --cluster-name" in res.output


def test_run_with_a_bad_cluster_name(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        main, ["run", "--hub-kubeconfig", str(tmp_path / "k"), "--cluster-name", "Not_A_Name"]
    )
    assert res.exit_code == 2 and "a DNS label" in res.output


def test_the_hub_role_takes_no_hub_and_no_backend() -> None:
    res = CliRunner().invoke(main, ["run", "--role", "hub", "--backend", "kueue"])
    assert res.exit_code == 2 and "--role hub takes neither" in res.output


def test_sandbox_up_refuses_a_member_without_a_name(tmp_path: Path) -> None:
    hub = tmp_path / "kubeconfig"
    hub.write_text("{}")
    res = CliRunner().invoke(main, ["sandbox", "up", "--dir", str(tmp_path / "m"), "--hub", str(hub)])
    assert res.exit_code == 1 and "a member needs a DNS label as its name" in res.output
    assert not (tmp_path / "m").exists(), "nothing was started"
