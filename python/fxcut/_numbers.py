"""The one check of a numeric option: a real number (or an int) within its range, or a ValueError naming it.

Every numeric option of fxcut's public API (budgets, the planner's
``max_work``, ``time_limit``, ``exact_max_candidates``, ``seed_budgets``,
the command line's numbers) goes through :func:`check_number`, so each
rejects the same things the same way: a bool (an int to Python, never
meant as a number), anything that is not a real number, NaN, the
infinities, and an int too large for a float -- compared exactly before
any conversion, so ``10**400`` is an out-of-range value, not an
OverflowError.
"""

from __future__ import annotations

import math
import numbers
import operator


def check_number(name: str, value: object, lo: float, hi: float, *, integer: bool = False,
                 lo_open: bool = False) -> float:
    """``value`` as a float when it is a real number in ``[lo, hi]``
    (``(lo, hi]`` with ``lo_open``); ValueError naming ``name`` otherwise.
    ``lo`` and ``hi`` are finite."""
    number = _real(value, integer)
    if number is None or not _within(number, lo, hi, lo_open):
        kind = "an int" if integer else "a number"
        low = "(" if lo_open else "["
        raise ValueError(f"{name} must be {kind} in {low}{_bound(lo, integer)}, {_bound(hi, integer)}], "
                         f"got {_shown(value)}")
    return float(number)


def check_int(name: str, value: object, lo: int, hi: int) -> int:
    """``value`` as an int when it is an integer in ``[lo, hi]``;
    ValueError naming ``name`` otherwise (:func:`check_number`)."""
    check_number(name, value, lo, hi, integer=True)
    return operator.index(value)  # type: ignore[arg-type]  # an integer: checked above


def _real(value: object, integer: bool) -> int | float | None:
    """The value as an exact int or a float, or None when it is no number
    of the kind asked for (a bool is none)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return operator.index(value)
    if integer or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except (OverflowError, ValueError):  # e.g. a Fraction beyond a float's range
        return None
    return None if math.isnan(number) or math.isinf(number) else number


def _within(number: int | float, lo: float, hi: float, lo_open: bool) -> bool:
    # int against float compares exactly in Python, whatever the int's size
    return (lo < number if lo_open else lo <= number) and number <= hi


def _bound(x: float, integer: bool) -> str:
    return str(int(x)) if integer else f"{x:g}"


def _shown(value: object) -> str:
    text = repr(value)
    if len(text) <= 40:
        return text
    if isinstance(value, int) and not isinstance(value, bool):
        return f"an int of {len(str(abs(value)))} digits"
    return text[:37] + "..."


def human_bytes(n: float) -> str:
    """``n`` bytes for a log line or a report: ``512 B``, ``47.1 KiB``,
    ``23.99 MiB``, ``1.50 GiB`` (binary units, two decimals)."""
    if abs(n) < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.2f} {unit}"
    raise AssertionError("unreachable")


def human_cost(value: float, unit: str) -> str:
    """A recompute cost in its unit: ``"flops"`` (torch's FLOPs: ``1.2
    GFLOP``) or ``"time"`` (the time model's picoseconds: ``3.4 ms``)."""
    if unit == "time":
        seconds = value * 1e-12
        for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
            if abs(seconds) >= scale:
                return _sig3(seconds / scale, name)
        return "0 s" if value == 0 else f"{seconds / 1e-9:.3g} ns"
    for scale, name in ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP")):
        if abs(value) >= scale:
            return _sig3(value / scale, name)
    return f"{int(value)} FLOP"


def _sig3(x: float, unit: str) -> str:
    return f"{x:.3g} {unit}" if abs(x) < 1000 else f"{x:.0f} {unit}"


__all__ = ["check_int", "check_number", "human_bytes", "human_cost"]
