"""The benchmarks that need no cluster still run against the code as it is.

A benchmark is run by hand, so a change to a decision's inputs can break one unseen. Each
is run here at a small size (its module constants scaled down), its figures not judged.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("name", "small"),
    [
        ("bench_decide", {"NODES": 20, "LWSS": 5, "RUNS": 1}),
        ("bench_core", {"NODES": 20, "GROUPS": 10, "RUNS": 1}),
        ("bench_topology", {"NODES": 40, "BLOCK": 20, "RACK": 4, "LWSS": 10, "RUNS": 1}),
    ],
)
def test_a_pure_benchmark_runs_and_prints_its_figures(
    name: str, small: dict[str, int], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = load(name)
    for key, value in small.items():
        assert hasattr(module, key), f"{name} has no {key}"
        monkeypatch.setattr(module, key, value)
    monkeypatch.setattr(sys, "argv", [name])
    module.main()
    out = capsys.readouterr().out
    assert out.strip(), f"{name} printed nothing"
