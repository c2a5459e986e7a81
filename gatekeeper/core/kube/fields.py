"""Small, strict readers for Kubernetes JSON dicts, with errors that name the field.

The decision core takes objects exactly as the API server (or a YAML file) hands
them over. Malformed input must fail with a message a person can act on
("LeaderWorkerSet ns/x: spec.leaderWorkerTemplate.size: expected an integer"),
never with a KeyError deep inside the planner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def mapping(value: object, where: str) -> Mapping[str, Any]:
    """``value`` as an object; None reads as empty."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def sequence(value: object, where: str) -> Sequence[Any]:
    """``value`` as a list; None reads as empty."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise ValueError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def string(value: object, where: str, default: str = "") -> str:
    """``value`` as a string; None reads as ``default``."""
    if value is None:
        return default
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string, got {value!r}")
    return value


def integer(value: object, where: str, default: int) -> int:
    """``value`` as an integer (booleans rejected); None reads as ``default``."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: expected an integer, got {value!r}")
    return value
