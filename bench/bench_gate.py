"""What the compatibility gate costs (fxcut.torchrules.gate, docs/compat_gate.md).

On the forward and backward graphs of a captured model (torch's partition of
its joint graph), measures

  codegen     fxcut's code generator (``codegen._generate``) against torch's
              (``Graph.python_code``) on the same graph: interleaved rounds,
              the median of the per-round ratios torch / fxcut;
  self-check  what the first module of a process costs more: fxcut's
              ``python_code`` with the process's check not made yet (fxcut's
              code, torch's code, the comparison) minus fxcut's code alone,
              also as a multiple of one torch generation;
  names       the table's rows checked once per process
              (``gate.problems``: the private names resolved, the node slots
              looked at, the probe graph built), after the imports a
              partition makes anyway.

Every figure is a median over --rounds (gc on, as in a compile).  A
benchmark, not a test: nothing is asserted about time.

    PYTHONPATH=python python bench/bench_gate.py [--model gpt2] [--layers 12] [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from fxcut.tools.capture import capture, torch_min_cut_partition
from fxcut.tools.models import build_model
from fxcut.torchrules import codegen, gate, versions


def _seconds(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _graphs(model: str, layers: int) -> dict[str, fx.Graph]:
    built = build_model(model, layers=layers)
    cap = capture(built.model, built.make_inputs(), built.loss_fn)
    fw, bw = cap.partition(torch_min_cut_partition)
    return {"forward": fw.graph, "backward": bw.graph}


def measure(graph: fx.Graph, rounds: int) -> dict[str, float]:
    def torchs() -> Any:
        return graph.python_code(root_module="self")

    def fxcuts() -> Any:
        return codegen._generate(graph)

    def first_module() -> Any:
        codegen._self_check = codegen._SelfCheck()
        assert codegen.python_code(graph) is not None
        assert codegen.self_check_state() == "passed"

    ratios, fx_times, torch_times, extra = [], [], [], []
    saved = codegen._self_check
    try:
        for _ in range(rounds):
            t = _seconds(torchs)
            f = _seconds(fxcuts)
            first = _seconds(first_module)
            ratios.append(t / f)
            fx_times.append(f)
            torch_times.append(t)
            extra.append(first - f)
    finally:
        codegen._self_check = saved
    torch_s = statistics.median(torch_times)
    return {"nodes": float(len(graph.nodes)), "torch_ms": torch_s * 1e3, "fxcut_ms": statistics.median(fx_times) * 1e3,
            "ratio": statistics.median(ratios), "check_ms": statistics.median(extra) * 1e3,
            "check_in_torch_gens": statistics.median(extra) / torch_s}


def measure_names(rounds: int) -> float:
    rules = versions.current()
    assert rules is not None
    gate.problems(rules)  # the imports a partition makes anyway
    return statistics.median(_seconds(lambda: gate.problems(rules)) for _ in range(rounds)) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    graphs = _graphs(args.model, args.layers)
    print(f"torch {torch.__version__}, {args.model} with {args.layers} layers, {args.rounds} rounds, medians")
    print("| graph | nodes | torch's generator ms | fxcut's ms | torch / fxcut | self-check ms (first module) "
          "| in torch generations |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, graph in graphs.items():
        m = measure(graph, args.rounds)
        print(f"| {name} | {m['nodes']:.0f} | {m['torch_ms']:.2f} | {m['fxcut_ms']:.2f} | {m['ratio']:.2f}x | "
              f"{m['check_ms']:.2f} | {m['check_in_torch_gens']:.2f} |")
    print(f"the table's rows checked once per process (gate.problems): {measure_names(args.rounds):.2f} ms")


if __name__ == "__main__":
    main()
