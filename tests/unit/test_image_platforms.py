"""The image's architectures: which wheel goes into which, and what pip is told to fetch.

The image is one index of an amd64 and an arm64 image (``lab/gatekeeper_lab/image/build.py``);
the end-to-end test runs the arm64 one under emulation. These pin the choices the build
makes from the lock files, with no download.
"""

from __future__ import annotations

import pytest

from gatekeeper_lab.image import build, debian


@pytest.mark.parametrize(
    ("wheel", "arch"),
    [
        (
            "aiohttp-3.14.5-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
            "amd64",
        ),
        ("aiohttp-3.14.5-cp311-cp311-manylinux2014_aarch64.manylinux_2_17_aarch64.whl", "arm64"),
        ("cryptography-50.0.2-cp311-abi3-manylinux_2_34_aarch64.whl", "arm64"),
        ("httpx-0.28.1-py3-none-any.whl", None),
    ],
)
def test_a_wheel_is_for_the_machine_its_platform_tag_names(wheel: str, arch: str | None) -> None:
    assert build.wheel_arch(wheel) == arch


@pytest.mark.parametrize("arch", debian.ARCHES)
def test_each_architecture_gets_one_wheel_per_requirement_its_own_or_one_for_any(arch: str) -> None:
    wheels = build.locked_wheels(arch)
    names = [w.split("-")[0].lower() for w, _ in wheels]
    assert len(names) == len(set(names)) == len(build._pinned())
    assert all(build.wheel_arch(w) in (arch, None) for w, _ in wheels)
    assert all(len(sha) == 64 for _, sha in wheels)


def test_a_requirement_without_a_wheel_of_an_architecture_takes_the_one_for_any() -> None:
    """python-box publishes a compiled wheel for x86_64 only."""
    amd64 = dict(build.locked_wheels("amd64"))
    arm64 = dict(build.locked_wheels("arm64"))
    assert any(n.startswith("python_box-") and n.endswith("_x86_64.whl") for n in amd64)
    assert any(n.startswith("python_box-") and n.endswith("-py3-none-any.whl") for n in arm64)


def test_pip_is_told_the_target_machine() -> None:
    arm = build.platform_args("arm64")
    assert "manylinux_2_36_aarch64" in arm and not any("x86_64" in a for a in arm)
    assert "manylinux_2_17_x86_64" in build.platform_args("amd64")


def test_both_architectures_run_one_python_so_one_bytecode_serves_both() -> None:
    build._same_python()
    versions = {
        d.version for a in debian.ARCHES for d in debian.read_lock(a) if d.name == "python3.11-minimal"
    }
    assert len(versions) == 1
    assert {d.arch for d in debian.read_lock("arm64")} == {"arm64", "all"}
