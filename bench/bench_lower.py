"""Cost of lowering an fx graph and of the whole ZeRO-3 walk, per node.

Synthetic joint-graph-like fx graphs of 10^3 .. 10^5 nodes (parameter and
activation placeholders, tangents, seeds; per layer a transpose, casts and
views of a parameter, matmuls, element-wise ops, a split and getitems, an
in-place op) are timed for

  lower      fxcut.torchrules.lower.lower_structure (fx.Graph -> graph array)
  c walk     fxcut._C.param_alias_walk on the lowered array (validation too)
  full walk  fxcut.recompute_param_aliases (lowering + C walk + meta writes)
  py walk    tests/reference_walk.py's pure-Python walk (for the ratio)

Each figure is the median of --repeats runs, in microseconds per node.  The
last column is py walk / full walk measured in the same run.  A benchmark,
not a test: it asserts nothing about time.

    PYTHONPATH=python python bench/bench_lower.py [--sizes 1000 10000 100000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import gc
import operator
import statistics
import sys
import time
from array import array
from collections.abc import Callable
from pathlib import Path

import torch
import torch.fx as fx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import fxcut  # noqa: E402
from fxcut import _C  # noqa: E402
from fxcut.torchrules.lower import lower_structure  # noqa: E402
from fxcut.torchrules.ops import zero3_facts  # noqa: E402
from reference_walk import reference_param_alias_walk  # noqa: E402

aten = torch.ops.aten
prims = torch.ops.prims


def synthetic_joint_graph(n_nodes: int) -> tuple[fx.Graph, list[tuple[int, int, torch.Size]]]:
    """A graph of about n_nodes nodes; returns it and its param_indices."""
    graph = fx.Graph()
    layers = max(1, n_nodes // 20)
    params = [graph.placeholder(f"primals_{k + 1}") for k in range(layers)]
    x = graph.placeholder(f"primals_{layers + 1}")
    graph.placeholder("fwd_seed")
    graph.placeholder("fwd_base_offset")
    tangent = graph.placeholder("tangents_1")
    outs = []
    for w in params:
        wt = graph.call_function(aten.t.default, (w,))
        w16 = graph.call_function(prims.convert_element_type.default, (wt, torch.bfloat16))
        wv = graph.call_function(aten.view.default, (w16, [64, 64]))
        h = graph.call_function(aten.mm.default, (x, wv))
        h = graph.call_function(aten.add.Tensor, (h, x), {"alpha": 1})
        h = graph.call_function(aten.relu.default, (h,))
        parts = graph.call_function(aten.split.Tensor, (h, 32, 1))
        a = graph.call_function(operator.getitem, (parts, 0))
        b = graph.call_function(operator.getitem, (parts, 1))
        h = graph.call_function(aten.cat.default, ([a, b], 1))
        h = graph.call_function(aten.unsqueeze.default, (h, 0))
        h = graph.call_function(aten.squeeze.dim, (h, 0))
        c = graph.call_function(aten._to_copy.default, (h,), {"dtype": torch.float32})
        h = graph.call_function(aten.mul.Tensor, (c, tangent))
        h = graph.call_function(aten.add_.Tensor, (h, 1))
        g = graph.call_function(aten.mm.default, (h, wt))
        d = graph.call_function(aten.detach.default, (g,))
        s = graph.call_function(aten.sum.dim_IntList, (d, [0]))
        x = graph.call_function(aten.neg.default, (s,))
        outs.append(graph.call_function(aten.expand.default, (x, [64, 64])))
    graph.output(tuple(outs))
    return graph, [(k, k + 100, torch.Size([64, 64])) for k in range(layers)]


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm caches (op facts, first-call costs)
    times = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    facts = zero3_facts()
    no_copy = fxcut.get_no_copy_ops()
    print(f"torch {torch.__version__}, fxcut {fxcut.__version__}, median of {args.repeats} runs, µs per node")
    header = f"{'nodes':>8} {'targets':>7} {'lower':>8} {'c walk':>8} {'full walk':>10} {'py walk':>8} {'py/full':>8}"
    print(header)
    print("-" * len(header))
    for size in args.sizes:
        graph, param_indices = synthetic_joint_graph(size)
        n = len(graph.nodes)
        targets = len({node.target for node in graph.nodes if node.op == "call_function"})
        arrays = lower_structure(graph, facts)
        primals = [i for i, f in enumerate(arrays.flags) if f & _C.F_PRIMAL]
        params = array("i", sorted({primals[k] for k, _, _ in param_indices}))

        t_lower = median_seconds(lambda: lower_structure(graph, facts), args.repeats)
        t_c = median_seconds(lambda: _C.param_alias_walk(arrays, params), args.repeats)
        t_full = median_seconds(lambda: fxcut.recompute_param_aliases(graph, param_indices), args.repeats)
        t_py = median_seconds(lambda: reference_param_alias_walk(graph, param_indices, no_copy), args.repeats)

        def us(t: float) -> float:
            return t / n * 1e6

        print(f"{n:>8} {targets:>7} {us(t_lower):>8.3f} {us(t_c):>8.4f} {us(t_full):>10.3f} "
              f"{us(t_py):>8.3f} {t_py / t_full:>7.2f}x")


if __name__ == "__main__":
    main()
