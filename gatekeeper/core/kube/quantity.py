"""Kubernetes resource quantities: exact parsing, scheduler units, and readable formatting.

Every number the gatekeeper compares (requests, allocatable, quota) arrives as a
Kubernetes quantity string such as ``"500m"``, ``"8Gi"`` or ``"1e3"``. Parsing is exact
(``fractions.Fraction``), so no float rounding can ever admit a group that does not fit.

For comparisons the decision core then works in the integer units the kube-scheduler
and Kueue use: millicores for ``cpu`` and base units (bytes, devices, pods) for
everything else, rounded *up* exactly like ``Quantity.MilliValue()`` / ``Quantity.Value()``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

#: Quantity as found in Kubernetes JSON: normally a string; YAML-born dicts may hold numbers.
QuantityLike = str | int | float

_DECIMAL_SUFFIXES: dict[str, Fraction] = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_BINARY_SUFFIXES: dict[str, int] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
# <sign><digits>[.<digits>] | <sign>.<digits>, then a suffix checked separately.
_NUMBER = re.compile(r"([+-]?)(\d+(?:\.\d*)?|\.\d+)(.*)", re.ASCII)
_EXPONENT = re.compile(r"[eE]([+-]?\d+)", re.ASCII)
_MAX_EXPONENT = 64  # keeps "1e999999999" from becoming a huge integer
MAX_DIGITS = 40
"""More digits than this in a quantity is refused: no real amount needs them (10^40 bytes is
a billion billion exabytes), and a number of thousands of digits is slow to compute with
and cannot even be printed (Python refuses to format integers of over 4,300 digits)."""

_SIMPLE = re.compile(r"(\d+)(|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)", re.ASCII)
_SIMPLE_SCALES: dict[str, int] = {
    **{suffix: int(scale) for suffix, scale in _DECIMAL_SUFFIXES.items() if scale.denominator == 1},
    **_BINARY_SUFFIXES,
}

_MEMORY_LIKE = ("memory", "ephemeral-storage", "storage")


def parse_quantity(value: QuantityLike) -> Fraction:
    """Parse a Kubernetes quantity exactly.

    Accepts the grammar of ``k8s.io/apimachinery/pkg/api/resource``: an optionally
    signed decimal number followed by a decimal SI suffix (``n u m k M G T P E``), a
    binary suffix (``Ki Mi Gi Ti Pi Ei``) or a decimal exponent (``e3``, ``E-2``).
    Raises ``ValueError`` naming the offending value.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    if isinstance(value, int):
        if abs(value) >= 10**MAX_DIGITS:
            raise ValueError(f"a quantity of more than {MAX_DIGITS} digits is not supported")
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a Kubernetes quantity")
        return Fraction(repr(value))
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (expected a string)")
    match = _NUMBER.fullmatch(value)
    if match is None:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    sign, number, suffix = match.groups()
    if len(number) > MAX_DIGITS + 1:
        raise ValueError(f"{value[:20]}...: a quantity of more than {MAX_DIGITS} digits is not supported")
    magnitude = Fraction(number)
    if suffix in _DECIMAL_SUFFIXES:
        scale = _DECIMAL_SUFFIXES[suffix]
    elif suffix in _BINARY_SUFFIXES:
        scale = Fraction(_BINARY_SUFFIXES[suffix])
    else:
        exponent = _EXPONENT.fullmatch(suffix)
        if exponent is None:
            raise ValueError(f"{value!r} is not a Kubernetes quantity (unknown suffix {suffix!r})")
        power = int(exponent.group(1))
        if abs(power) > _MAX_EXPONENT:
            raise ValueError(f"{value!r} is not a Kubernetes quantity (exponent out of range)")
        scale = Fraction(10) ** power
    result = magnitude * scale
    return -result if sign == "-" else result


def to_units(resource: str, quantity: Fraction) -> int:
    """Convert an exact quantity to the scheduler's integer unit for ``resource``.

    ``cpu`` becomes millicores, everything else base units; both round up, as
    ``Quantity.MilliValue()`` and ``Quantity.Value()`` do.
    """
    if resource == "cpu":
        return math.ceil(quantity * 1000)
    return math.ceil(quantity)


def parse_units(resource: str, value: QuantityLike) -> int:
    """``parse_quantity`` then ``to_units``: the integer amount of ``resource`` in ``value``."""
    if type(value) is str:
        # Fast path for the forms nodes and pods use almost always ("110", "16Gi", "500m").
        simple = _SIMPLE.fullmatch(value)
        if simple is not None:
            number, suffix = int(simple.group(1)), simple.group(2)
            if suffix == "m":
                return number if resource == "cpu" else -(-number // 1000)
            number *= _SIMPLE_SCALES[suffix]
            return number * 1000 if resource == "cpu" else number
    return to_units(resource, parse_quantity(value))


def amounts(items: Mapping[str, Any], where: str) -> dict[str, int]:
    """Each ``resource: quantity`` of ``items`` (a quota, a capacity) in scheduler units;
    ValueError names ``where[resource]`` when a quantity cannot be read or is negative."""
    out: dict[str, int] = {}
    for resource, value in items.items():
        try:
            amount = parse_quantity(value)
        except ValueError as err:
            raise ValueError(f"{where}[{resource}]: {err}") from None
        if amount < 0:
            raise ValueError(f"{where}[{resource}]: {str(value)[:40]!r} is negative")
        out[resource] = to_units(resource, amount)
    return out


def is_memory_like(resource: str) -> bool:
    """True for byte-sized resources, which read best with binary suffixes (``8Gi``)."""
    return resource in _MEMORY_LIKE or resource.startswith("hugepages-")


def format_quantity(value: Fraction | int, *, binary: bool = False) -> str:
    """Format an exact quantity the way Kubernetes users write it.

    Integers use the largest suffix that divides them exactly (binary ones when
    ``binary``, e.g. ``"8Gi"``; decimal ``k M G ...`` otherwise); fractions use
    ``m``, ``u`` or ``n`` (``"500m"``). The result parses back to the same value.
    """
    value = Fraction(value)
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value.denominator == 1:
        whole = value.numerator
        if whole == 0:
            return "0"
        if binary:
            for suffix, factor in reversed(_BINARY_SUFFIXES.items()):
                if whole % factor == 0:
                    return f"{sign}{whole // factor}{suffix}"
        for suffix in ("E", "P", "T", "G", "M", "k"):
            factor = _DECIMAL_SUFFIXES[suffix].numerator
            if whole % factor == 0:
                return f"{sign}{whole // factor}{suffix}"
        return f"{sign}{whole}"
    for suffix in ("m", "u", "n"):
        scaled = value / _DECIMAL_SUFFIXES[suffix]
        if scaled.denominator == 1:
            return f"{sign}{scaled.numerator}{suffix}"
    # Finer than a nano: Kubernetes itself would round this up; show it in nanos.
    return f"{sign}{math.ceil(value * 10**9)}n"


def format_amount(resource: str, units: int) -> str:
    """Format an integer amount of ``resource`` (in scheduler units) for people.

    ``cpu`` millicores read as ``"2"`` or ``"500m"``; byte-sized resources as ``"8Gi"``;
    cores, device counts and pods as plain integers (``"4000"``, never ``"4k"``).
    """
    if resource == "cpu":
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    if is_memory_like(resource):
        return format_quantity(units, binary=True)
    return str(units)


def format_resources(resources: Mapping[str, int]) -> str:
    """``{"cpu": 2000, "nvidia.com/gpu": 1}`` -> ``"2 cpu, 1 nvidia.com/gpu"`` (sorted by name)."""
    return ", ".join(f"{format_amount(name, resources[name])} {name}" for name in sorted(resources))
