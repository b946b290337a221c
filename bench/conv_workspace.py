"""What a CPU convolution's backward allocates inside itself, by input layout.

    PYTHONPATH=python:bench python bench/conv_workspace.py [--threads N]

Runs ``aten.convolution_backward`` alone under the torch profiler (memory
events on) for a few convolution shapes, once with contiguous (NCHW) input
and gradient and once with channels-last ones, and prints the bytes the call
held at its peak beyond its own outputs: buffers it allocated and freed
inside (oneDNN's reorders and scratch), which no wrapper line and no graph
value shows.  Inductor hands a convolution_backward channels-last tensors
only in a graph its layout optimisation is on for (a graph with a forward
convolution: ``GraphLowering.decide_layout_opt``); otherwise the tensors
come as the graph has them.  docs/memory_model.md cites these figures.
"""

from __future__ import annotations

import argparse
from typing import NamedTuple

import torch

#: (name, batch, in channels, out channels, size, kernel, groups)
SHAPES: tuple[tuple[str, int, int, int, int, int, int], ...] = (
    ("dense 3x3", 8, 64, 64, 32, 3, 1),
    ("dense 1x1", 8, 64, 64, 32, 1, 1),
    ("depthwise 3x3", 4, 64, 64, 8, 3, 64),
    ("depthwise 7x7", 4, 64, 64, 8, 7, 64),
    ("depthwise 7x7", 4, 128, 128, 4, 7, 128),
    ("depthwise 7x7", 4, 256, 256, 2, 7, 256),
)


class Workspace(NamedTuple):
    peak_beyond_outputs: int
    largest_block: int


def workspace(batch: int, cin: int, cout: int, size: int, kernel: int, groups: int,
              channels_last: bool) -> Workspace:
    """The call's peak bytes beyond its outputs, and its largest single
    allocation, for one convolution (stride 1, padding kernel // 2)."""
    from torch.profiler import ProfilerActivity, profile

    from fxcut.tools.measure import profile_events

    x = torch.randn(batch, cin, size, size)
    grad = torch.randn(batch, cout, size, size)
    weight = torch.randn(cout, cin // groups, kernel, kernel)
    if channels_last:
        x, grad = x.to(memory_format=torch.channels_last), grad.to(memory_format=torch.channels_last)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        outs = torch.ops.aten.convolution_backward(grad, x, weight, [cout], [1, 1], [kernel // 2] * 2, [1, 1], False,
                                                   [0, 0], groups, [True, True, True])
    events = profile_events(prof)[0]
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    out_bytes = sum(t.untyped_storage().nbytes() for t in outs if t is not None)
    return Workspace(peak - out_bytes, max((d for _, d in events), default=0))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s): bytes the call held beyond its outputs "
          "(its largest allocation, outputs included)")
    print("| convolution | N, C_in, C_out, H=W | NCHW | channels-last |")
    print("|---|---|---:|---:|")
    for name, n, cin, cout, size, kernel, groups in SHAPES:
        cells = []
        for cl in (False, True):
            w = workspace(n, cin, cout, size, kernel, groups, cl)
            cells.append(f"{w.peak_beyond_outputs:,} ({w.largest_block:,})")
        print(f"| {name} | {n}, {cin}, {cout}, {size} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
