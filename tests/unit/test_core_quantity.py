"""Quantity parsing and formatting: exact values, scheduler units, clear errors."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gatekeeper.core.kube.quantity import (
    format_amount,
    format_quantity,
    format_resources,
    parse_quantity,
    parse_units,
    to_units,
)

GPU = "nvidia.com/gpu"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Fraction(0)),
        ("1", Fraction(1)),
        ("+1", Fraction(1)),
        ("-1", Fraction(-1)),
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("5.", Fraction(5)),
        ("0.1", Fraction(1, 10)),
        ("100n", Fraction(1, 10**7)),
        ("10u", Fraction(1, 10**5)),
        ("1k", Fraction(1000)),
        ("1M", Fraction(10**6)),
        ("2G", Fraction(2 * 10**9)),
        ("1T", Fraction(10**12)),
        ("1P", Fraction(10**15)),
        ("1E", Fraction(10**18)),
        ("1Ki", Fraction(1024)),
        ("1.5Ki", Fraction(1536)),
        ("8Gi", Fraction(8 * 2**30)),
        ("1Ti", Fraction(2**40)),
        ("1Pi", Fraction(2**50)),
        ("1Ei", Fraction(2**60)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("1e+3", Fraction(1000)),
        ("1.5e-3", Fraction(3, 2000)),
        ("12e0", Fraction(12)),
        (3, Fraction(3)),
        (0.5, Fraction(1, 2)),
        (0.1, Fraction(1, 10)),
    ],
)
def test_parse_quantity(text: str | int | float, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "bad",
    [
        "",
        " 1",
        "1 ",
        "1x",
        "1K",
        "1e",
        "1.2.3",
        "abc",
        ".",
        "Gi",
        "1Gi ",
        "1 Gi",
        "--1",
        "1e999",
        "1_000",
        "٣",
    ],
)
def test_parse_quantity_rejects_bad_strings_naming_them(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes quantity") as err:
        parse_quantity(bad)
    assert repr(bad) in str(err.value)


@pytest.mark.parametrize("bad", [True, None, [], float("nan"), float("inf")])
def test_parse_quantity_rejects_non_quantities(bad: object) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("resource", "text", "units"),
    [
        ("cpu", "1", 1000),
        ("cpu", "100m", 100),
        ("cpu", "0.1m", 1),  # rounded up to a millicore, like Quantity.MilliValue()
        ("cpu", "1.5", 1500),
        ("cpu", "2k", 2_000_000),
        ("memory", "1.5", 2),  # rounded up to a byte, like Quantity.Value()
        ("memory", "1Gi", 2**30),
        ("memory", "500m", 1),
        ("memory", "1e3", 1000),
        (GPU, "1", 1),
        (GPU, 2, 2),
        ("pods", "110", 110),
    ],
)
def test_units(resource: str, text: str | int, units: int) -> None:
    assert to_units(resource, parse_quantity(text)) == units
    assert parse_units(resource, text) == units


@pytest.mark.parametrize(
    "text", ["0", "7", "250m", "3m", "1500m", "4Ki", "64Gi", "3k", "2M", "1E", "1Ei", "12"]
)
@pytest.mark.parametrize("resource", ["cpu", "memory", "nvidia.com/gpu"])
def test_parse_units_fast_path_agrees_with_exact_path(text: str, resource: str) -> None:
    assert parse_units(resource, text) == to_units(resource, parse_quantity(text))


@pytest.mark.parametrize(
    ("value", "binary", "text"),
    [
        (Fraction(0), False, "0"),
        (Fraction(2), False, "2"),
        (Fraction(1, 2), False, "500m"),
        (Fraction(3, 2), False, "1500m"),
        (Fraction(1, 10**6), False, "1u"),
        (Fraction(1, 10**9), False, "1n"),
        (Fraction(2000), False, "2k"),
        (Fraction(10**9), False, "1G"),
        (Fraction(8 * 2**30), True, "8Gi"),
        (Fraction(1536 * 2**20), True, "1536Mi"),
        (Fraction(10**9), True, "1G"),
        (Fraction(1000), True, "1k"),
        (Fraction(1023), True, "1023"),
        (Fraction(-500), False, "-500"),
        (Fraction(-1, 2), False, "-500m"),
        (7, False, "7"),
    ],
)
def test_format_quantity(value: Fraction, binary: bool, text: str) -> None:
    assert format_quantity(value, binary=binary) == text
    assert parse_quantity(text) == value


def test_format_quantity_finer_than_nano_rounds_up() -> None:
    assert format_quantity(Fraction(1, 3 * 10**9)) == "1n"


@pytest.mark.parametrize(
    ("resource", "units", "text"),
    [
        ("cpu", 2000, "2"),
        ("cpu", 500, "500m"),
        ("cpu", 480_000, "480"),
        ("memory", 8 * 2**30, "8Gi"),
        ("hugepages-2Mi", 2**21, "2Mi"),
        ("ephemeral-storage", 10**9, "1G"),
        ("nvidia.com/gpu", 4, "4"),
        ("nvidia.com/gpu", 1024, "1024"),
        ("pods", 110, "110"),
    ],
)
def test_format_amount(resource: str, units: int, text: str) -> None:
    assert format_amount(resource, units) == text


def test_format_resources_sorted_by_name() -> None:
    assert format_resources({"nvidia.com/gpu": 1, "cpu": 2500}) == "2500m cpu, 1 nvidia.com/gpu"
