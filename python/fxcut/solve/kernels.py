"""The per-op table of what kernels allocate inside themselves.

Some kernels allocate and free memory while they run that no graph value
shows: oneDNN reorders a CPU convolution's input or gradient into its blocked
layout, a batch norm's backward makes a temporary the size of its input, a
channels-last 7x7 depthwise convolution's backward a buffer proportional to
its weight.  The step's measured peak holds them; the memory model counts
them at the kernel's step (``workspace`` of ``fxcut._C.memory_simulate``)
from this table.

The table is measured, never written by hand:
``python -m fxcut.tools.kernel_table`` runs each op of
:data:`fxcut.torchrules.kernels.FAMILIES` alone over a grid of shapes, for
each variant (layout, kind, kernel size, stride), reads the bytes the call
held beyond its outputs, and fits them as a non-negative combination of the
call's tensor sizes (``features``) and a constant.  One table per torch
release and device; the package ships ``fxcut/data/kernel_table.json``.

This module reads the table (no torch): :func:`shipped_table` picks the rows
of a release and device, :meth:`KernelTable.bytes` evaluates one op.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

#: The table's format; a file of another format is not read.
TABLE_FORMAT = 1


@dataclass(frozen=True)
class KernelFit:
    """Bytes one op variant holds inside itself: ``const + max over pieces
    of sum(coef[i] * features[i])`` (never below 0): one piece is a linear
    fit; two are a kernel that holds one set of copies or another (oneDNN's
    reorders of the inputs, then of the output).  ``max_error``: the largest
    miss over the measured points, a fraction of the larger of the
    measurement and 64 KiB."""

    pieces: tuple[tuple[float, ...], ...]
    const: float
    points: int
    max_error: float

    def bytes(self, features: Sequence[int]) -> int:
        if any(len(features) != len(p) for p in self.pieces):
            raise ValueError(f"the fit takes {len(self.pieces[0])} features, got {len(features)}")
        best = max(sum(c * f for c, f in zip(p, features)) for p in self.pieces)
        return max(0, int(round(self.const + best)))

    def to_json(self) -> dict[str, Any]:
        return {"pieces": [list(p) for p in self.pieces], "const": self.const, "points": self.points,
                "max_error": self.max_error}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> KernelFit:
        pieces = tuple(tuple(float(c) for c in p) for p in d["pieces"])
        if not pieces or len({len(p) for p in pieces}) != 1:
            raise ValueError(f"a kernel fit needs pieces of one length, got {d['pieces']!r}")
        return cls(pieces, float(d["const"]), int(d["points"]), float(d["max_error"]))


@dataclass(frozen=True)
class KernelTable:
    """The fits of one torch release on one device: ``fits[op][variant]``."""

    torch: str
    device: str
    fits: dict[str, dict[str, KernelFit]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def fit(self, op: str, variant: str) -> KernelFit | None:
        return self.fits.get(op, {}).get(variant)

    def bytes(self, op: str, variant: str, features: Sequence[int]) -> int:
        """What ``op`` in ``variant`` holds inside itself for a call of
        ``features``; 0 for an op or variant the table has not measured."""
        f = self.fit(op, variant)
        return 0 if f is None else f.bytes(features)

    def to_json(self) -> dict[str, Any]:
        return {"torch": self.torch, "device": self.device, "meta": self.meta,
                "fits": {op: {v: f.to_json() for v, f in sorted(vs.items())} for op, vs in sorted(self.fits.items())}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> KernelTable:
        fits = {op: {v: KernelFit.from_json(f) for v, f in vs.items()} for op, vs in d["fits"].items()}
        return cls(str(d["torch"]), str(d["device"]), fits, dict(d.get("meta", {})))


def read_tables(text: str) -> list[KernelTable]:
    """The tables of a table file's text (a ValueError naming what is wrong)."""
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("format") != TABLE_FORMAT:
        raise ValueError(f"a kernel table file has format {TABLE_FORMAT}; this one has {data.get('format')!r}"
                         if isinstance(data, dict) else "a kernel table file is a JSON object")
    return [KernelTable.from_json(t) for t in data.get("tables", [])]


def write_tables(tables: Sequence[KernelTable]) -> str:
    """A table file's text, tables ordered by device then release."""
    ordered = sorted(tables, key=lambda t: (t.device, release_key(t.torch)))
    return json.dumps({"format": TABLE_FORMAT, "tables": [t.to_json() for t in ordered]}, indent=1) + "\n"


def release_key(version: str) -> tuple[int, ...]:
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)``: the numeric release, local part dropped."""
    out: list[int] = []
    for part in version.split("+")[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def pick_table(tables: Sequence[KernelTable], torch_version: str, device: str) -> KernelTable | None:
    """The table for ``torch_version`` on ``device``: the same minor release,
    else the newest measured release before it, else the oldest after it;
    None when no table of the device exists."""
    rows = [t for t in tables if t.device == device]
    if not rows:
        return None
    want = release_key(torch_version)[:2]
    same = [t for t in rows if release_key(t.torch)[:2] == want]
    if same:
        return max(same, key=lambda t: release_key(t.torch))
    before = [t for t in rows if release_key(t.torch)[:2] < want]
    if before:
        return max(before, key=lambda t: release_key(t.torch))
    return min(rows, key=lambda t: release_key(t.torch))


@lru_cache(maxsize=1)
def shipped_tables() -> tuple[KernelTable, ...]:
    """The tables the package ships (``fxcut/data/kernel_table.json``)."""
    text = resources.files("fxcut").joinpath("data", "kernel_table.json").read_text(encoding="utf-8")
    return tuple(read_tables(text))


def shipped_table(torch_version: str, device: str) -> KernelTable | None:
    """The shipped table for ``torch_version`` on ``device`` (:func:`pick_table`)."""
    return pick_table(shipped_tables(), torch_version, device)


__all__ = ["KernelFit", "KernelTable", "TABLE_FORMAT", "pick_table", "read_tables", "release_key",
           "shipped_table", "shipped_tables", "write_tables"]
