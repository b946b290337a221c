"""Measure the kernel table: what each op of the table allocates inside itself.

    python -m fxcut.tools.kernel_table [--device cpu|cuda] [--out FILE] [--threads N]

Runs every op of :data:`fxcut.torchrules.kernels.FAMILIES` alone over a grid
of shapes per variant, reads the bytes the call held at its peak beyond its
inputs and outputs (CPU: the profiler's allocation events; CUDA: the caching
allocator's peak), fits them per variant as a non-negative combination of
the call's tensor sizes and a constant, and merges the table of the
installed torch and the device into ``--out`` (a table of the same release
and device is replaced).  The package ships the result as
``fxcut/data/kernel_table.json``; see docs/memory_model.md.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from ..solve.kernels import KernelFit, KernelTable, read_tables, write_tables
from ..torchrules.kernels import FAMILIES, Family
from .measure import profile_events

#: The positional arguments of one call of a family's op.
Call = tuple[Any, ...]

_KERNELS = (1, 3, 5, 7)
_STRIDES = (1, 2)
_SPATIAL = (2, 4, 8, 16, 28)
_BATCHES = (2, 4)
#: Two channel counts of each class (fxcut.torchrules.kernels.channel_class).
_CHANNELS = (3, 6, 12, 8, 24, 56, 32, 96, 256)
#: A grid convolution does at most this many multiply-adds (wide channels
#: with large images take seconds and add nothing the smaller ones miss).
_MAX_MACS = 4e8


def _as_layout(t: torch.Tensor, channels_last: bool) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last) if channels_last else t.contiguous()


def _conv_shapes(kind: str) -> Iterator[tuple[int, int, int, int]]:
    """(batch, in channels, out channels, size) of the grid."""
    for n, c, h in itertools.product(_BATCHES, _CHANNELS, _SPATIAL):
        for c_out in ((c,) if kind == "depthwise" else (max(c // 2, 4), max(c, 16), 2 * max(c, 16))):
            if n * h * h * c_out * (1 if kind == "depthwise" else c) * 49 <= _MAX_MACS:
                yield n, c, c_out, h


def conv_calls(backward: bool, device: str) -> Iterator[Call]:
    """Calls of the convolution (or its backward) over the grid: layouts x
    dense/depthwise x kernel sizes x strides x shapes."""
    for cl, kind, k, s in itertools.product((False, True), ("dense", "depthwise"), _KERNELS, _STRIDES):
        for n, c, c_out, h in _conv_shapes(kind):
            groups = c if kind == "depthwise" else 1
            x = _as_layout(torch.randn(n, c, h, h, device=device), cl)
            w = _as_layout(torch.randn(c_out, c // groups, k, k, device=device), cl)
            pad = [k // 2] * 2
            if not backward:
                yield (x, w, None, [s, s], pad, [1, 1], False, [0, 0], groups)
                continue
            out = torch.ops.aten.convolution.default(x, w, None, [s, s], pad, [1, 1], False, [0, 0], groups)
            grad = _as_layout(torch.randn_like(out), cl)
            yield (grad, x, w, [c_out], [s, s], pad, [1, 1], False, [0, 0], groups, [True, True, True])


def _image_inputs(device: str) -> Iterator[torch.Tensor]:
    """NCHW inputs of the grid, contiguous and channels-last."""
    for n, c, h in itertools.product(_BATCHES, (8, 32, 96, 640), _SPATIAL):
        x = torch.randn(n, c, h, h, device=device)
        yield x
        yield x.contiguous(memory_format=torch.channels_last)


def batch_norm_calls(backward: bool, device: str) -> Iterator[Call]:
    """Batch norm (or its backward), training and eval, over the grid."""
    for x, train in itertools.product(list(_image_inputs(device)), (True, False)):
        c = x.size(1)
        w, b = torch.ones(c, device=device), torch.zeros(c, device=device)
        rm, rv = torch.zeros(c, device=device), torch.ones(c, device=device)
        if not backward:
            yield (x, w, b, rm, rv, train, 0.1, 1e-5)
            continue
        _, mean, invstd = torch.ops.aten.native_batch_norm.default(x, w, b, rm.clone(), rv.clone(), train, 0.1, 1e-5)
        yield (torch.randn_like(x), x, w, rm, rv, mean, invstd, train, 1e-5, [True, True, True])


def layer_norm_calls(backward: bool, device: str) -> Iterator[Call]:
    """Layer norm (or its backward) over the last dim: contiguous (N, T, D)
    inputs and NCHW images permuted to NHWC (strided, as ConvNeXt runs it)."""
    inputs = [torch.randn(n, t, d, device=device) for n, t, d in itertools.product(_BATCHES, (64, 128), (32, 96, 256))]
    inputs += [x.permute(0, 2, 3, 1) for x in _image_inputs(device) if x.is_contiguous()]
    for x in inputs:
        d = x.size(-1)
        w, b = torch.ones(d, device=device), torch.zeros(d, device=device)
        if not backward:
            yield (x, [d], w, b, 1e-5)
            continue
        _, mean, rstd = torch.ops.aten.native_layer_norm.default(x, [d], w, b, 1e-5)
        yield (torch.randn_like(x), x, [d], mean, rstd, w, b, [True, True, True])


#: The grid of each family, by op name.
CALLS: dict[str, Callable[[str], Iterator[Call]]] = {
    "aten.convolution.default": lambda d: conv_calls(False, d),
    "aten.convolution_backward.default": lambda d: conv_calls(True, d),
    "aten.native_batch_norm.default": lambda d: batch_norm_calls(False, d),
    "aten.native_batch_norm_backward.default": lambda d: batch_norm_calls(True, d),
    "aten.native_layer_norm.default": lambda d: layer_norm_calls(False, d),
    "aten.native_layer_norm_backward.default": lambda d: layer_norm_calls(True, d),
}


def _storages_bytes(values: Any) -> int:
    seen: dict[int, int] = {}
    for t in torch.utils._pytree.tree_flatten(values)[0]:
        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def _cpu_inside(op: Any, args: Sequence[Any]) -> tuple[int, Any]:
    """The call's peak allocated bytes beyond its outputs (the profiler's
    allocation events, in order), and its outputs."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = op(*args)
    live = peak = 0
    for _, size in profile_events(prof)[0]:
        live += size
        peak = max(peak, live)
    return peak - _storages_bytes(out), out


def _cuda_inside(op: Any, args: Sequence[Any]) -> tuple[int, Any]:
    """The same on CUDA: the caching allocator's peak over the call, less
    what was allocated before it and the outputs."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = op(*args)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before - _storages_bytes(out), out


def measure_inside(op: Any, args: Sequence[Any], device: str) -> int:
    """Bytes ``op(*args)`` holds inside itself: the largest of two calls
    after a warm-up call (primitive caches filled), never below 0."""
    inside = _cuda_inside if device == "cuda" else _cpu_inside
    inside(op, args)
    return max(0, max(inside(op, args)[0] for _ in range(2)))


def _miss(pred: Sequence[float], ys: Sequence[int]) -> float:
    return max(abs(p - y) / max(y, 65536) for p, y in zip(pred, ys))


def _linear_fit(xs: Sequence[Sequence[int]], ys: Sequence[int]) -> KernelFit:
    """The least-squares fit of ``ys`` as a non-negative combination of the
    features and a constant: the best over every subset of the columns
    whose solution is non-negative."""
    k = len(xs[0])
    a = torch.tensor([list(x) + [1] for x in xs], dtype=torch.float64)
    y = torch.tensor(list(ys), dtype=torch.float64).unsqueeze(1)
    best: tuple[float, list[float]] = (float("inf"), [0.0] * (k + 1))
    for cols in itertools.chain.from_iterable(itertools.combinations(range(k + 1), r) for r in range(1, k + 2)):
        sol = torch.linalg.lstsq(a[:, list(cols)], y, driver="gelsd").solution.squeeze(1).tolist()
        if min(sol) < 0:
            continue
        coef = [0.0] * (k + 1)
        for c, v in zip(cols, sol):
            coef[c] = v
        sse = float(((a @ torch.tensor(coef, dtype=torch.float64).unsqueeze(1) - y) ** 2).sum())
        if sse < best[0] * (1 - 1e-9) - 1e-6:
            best = (sse, coef)
    coef = best[1]
    return KernelFit((tuple(coef[:k]),), coef[k], len(ys), 0.0)


def _two_piece_fit(xs: Sequence[Sequence[int]], ys: Sequence[int]) -> KernelFit:
    """The best fit ``c + max(u . x, v . x)`` with u, v over small whole
    multiples of the features (copies of the call's tensors), c the
    midrange of what is left: the least largest miss."""
    k = len(xs[0])
    grid = [g for g in itertools.product((0, 1, 2), repeat=k)]
    dots = {g: [sum(c * f for c, f in zip(g, x)) for x in xs] for g in grid}
    best: tuple[float, KernelFit] | None = None
    for u, v in itertools.combinations_with_replacement(grid, 2):
        base = [max(a, b) for a, b in zip(dots[u], dots[v])]
        rest = [y - b for y, b in zip(ys, base)]
        const = (max(rest) + min(rest)) / 2
        fit = KernelFit((tuple(map(float, u)), tuple(map(float, v))) if u != v else (tuple(map(float, u)),),
                        const, len(ys), 0.0)
        miss = _miss([fit.bytes(x) for x in xs], ys)
        if best is None or miss < best[0] - 1e-12:
            best = (miss, fit)
    assert best is not None
    return best[1]


def fit_points(xs: Sequence[Sequence[int]], ys: Sequence[int]) -> KernelFit:
    """The fit of one variant's points: the least-squares linear one, or
    the two-piece one where its largest miss is smaller."""
    fits = [_linear_fit(xs, ys), _two_piece_fit(xs, ys)]
    scored = [(_miss([f.bytes(x) for x in xs], ys), f) for f in fits]
    miss, fit = min(scored, key=lambda mf: mf[0])
    return KernelFit(fit.pieces, fit.const, fit.points, round(miss, 4))


#: The dtypes the grid runs in (bf16: what CPU autocast hands the kernels).
DTYPES = (torch.float32, torch.bfloat16)


def _in_dtype(args: Sequence[Any], dtype: torch.dtype) -> list[Any]:
    """``args`` with every floating tensor in ``dtype``, its layout kept."""
    return [a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


def measure_family(family: Family, device: str) -> dict[str, KernelFit]:
    """The fits of one family's variants, over its grid in each dtype (a
    call the kernel refuses in a dtype is left out)."""
    points: dict[str, tuple[list[tuple[int, ...]], list[int]]] = {}
    for args, dtype in itertools.product(CALLS[family.name](device), DTYPES):
        call = _in_dtype(args, dtype)
        try:
            inside = measure_inside(family.op, call, device)
        except RuntimeError:
            continue
        variant, features = family.call(call, family.op(*call))
        xs, ys = points.setdefault(variant, ([], []))
        xs.append(features)
        ys.append(inside)
    return {v: fit_points(xs, ys) for v, (xs, ys) in sorted(points.items())}


#: A fit whose largest miss exceeds this share is not shipped: its variant
#: counts no workspace (the model as it was before the table), listed in
#: the table's ``meta["unfit"]`` instead.
MAX_SHIPPED_ERROR = 0.5


def measure_table(device: str) -> KernelTable:
    fits: dict[str, dict[str, KernelFit]] = {}
    unfit: dict[str, float] = {}
    for family in FAMILIES:
        print(f"measuring {family.name} ...", file=sys.stderr, flush=True)
        measured = measure_family(family, device)
        fits[family.name] = {v: f for v, f in measured.items() if f.max_error <= MAX_SHIPPED_ERROR}
        unfit.update({f"{family.name} {v}": f.max_error for v, f in measured.items() if f.max_error > MAX_SHIPPED_ERROR})
    meta = {"threads": torch.get_num_threads(), "machine": platform.processor() or platform.machine(),
            "command": "python -m fxcut.tools.kernel_table --device " + device, "unfit": unfit}
    if device == "cuda":
        meta["gpu"] = torch.cuda.get_device_name()
    return KernelTable(torch.__version__.split("+")[0], device, fits, meta)


def _merge(path: Path, table: KernelTable) -> None:
    tables = read_tables(path.read_text(encoding="utf-8")) if path.exists() else []
    tables = [t for t in tables if (t.torch, t.device) != (table.torch, table.device)] + [table]
    path.write_text(write_tables(tables), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fxcut.tools.kernel_table", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--out", type=Path, help="the table file to merge into (default: print the table only)")
    p.add_argument("--threads", type=int, help="torch's intra-op threads while measuring (default: torch's)")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is available")
    if args.threads:
        torch.set_num_threads(args.threads)
    table = measure_table(args.device)
    for op, variants in table.fits.items():
        for v, f in variants.items():
            names = next(f.features for f in FAMILIES if f.name == op)
            terms = [" + ".join(f"{c:.3g}*{n}" for c, n in zip(p, names) if c) or "0" for p in f.pieces]
            shown = terms[0] if len(terms) == 1 else "max(" + ", ".join(terms) + ")"
            print(f"{op:40s} {v:32s} {shown} + {f.const:.0f}  (max error {f.max_error:.1%}, {f.points} points)")
    for name, err in table.meta["unfit"].items():
        print(f"{name}: not shipped (largest miss {err:.0%}): counts no workspace")
    if args.out is not None:
        _merge(args.out, table)
        print(f"wrote the torch {table.torch} {table.device} table into {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
