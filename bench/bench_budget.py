"""The activation memory budget, fxcut against torch, on large GPT joint graphs.

A benchmark, not a test: one table of medians and ratios measured in the
same run, written to stdout (and to --out as Markdown).

    PYTHONPATH=python python bench/bench_budget.py [--layers 24 48] [--budget 0.5]
        [--reps 3] [--out docs/bench_budget.md]

Graphs: ``capture_model("gpt2", fake=True, layers=L,
hidden=1024, seq=512)``, the joint graph AOT Autograd hands its
partitioner (fake tensors: nothing is allocated).  Both sides start from the
same graph after dead-code elimination and CSE, as the partitioner sees it.

What is timed (each rep on a fresh copy of the graph):

- torch: its tag passes, ``classify_nodes``, ``dist_from_bw`` and
  ``choose_saved_values_set`` at the budget (solver ``dp``, estimator
  ``flops``): up to four networkx min-cuts, a flop count per candidate, the
  knapsack.
- fxcut: ``fxcut.tools.decisions.decide_with_budget``: lowering the fx graph to the
  graph array, the input-storage mask, the C plan (the cuts and the
  candidates), the flop counts (torch's ``estimate_runtime``, once per op
  signature), the knapsack (``dp_lean``), the last cut.

The saved values must be equal, node for node, or the run fails.

Knapsack memory, on the instance of this graph and budget: torch's
``dp_knapsack`` measured with torch's profiler (every CPU tensor allocation
and free, in order: the peak of live tensor bytes) plus tracemalloc (the
Python heap; it does not see tensors); fxcut's solvers report their own C
heap peak (every allocation metered).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
import tracemalloc
from typing import Any

import torch
from torch._functorch import config
from torch._functorch import partitioners as tp

from fxcut.tools.decisions import decide_with_budget, lower_graph
from fxcut.solve.knapsack import solve

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from training import capture_model  # noqa: E402  (tests/: the zoo's models, captured)
from torch_reference import torch_budget_decision, torch_prepared  # noqa: E402  (tests/: torch's decision, step by step)


def _prepared(cap: Any) -> torch.fx.GraphModule:
    return torch_prepared(cap.fresh())


def _torch_tensor_peak(fn: Any) -> int:
    """Peak bytes of live CPU tensors while fn runs (torch's profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    changes = []
    for e in prof.events():
        delta = e.cpu_memory_usage if e.name == "[memory]" else e.self_cpu_memory_usage
        if delta:
            changes.append((e.time_range.start, delta))
    changes.sort()
    live = peak = 0
    for _, delta in changes:
        live += delta
        peak = max(peak, live)
    return peak


def _python_peak(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _median_time(fn: Any, reps: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(reps):
        gc.collect()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def bench_one(layers: int, budget: float, reps: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    cap = capture_model("gpt2", fake=True, layers=layers, hidden=1024, seq=512,
                        delegate=tp.default_partition)
    print(f"  captured {layers} layers: {cap.num_nodes} nodes in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr, flush=True)
    k = cap.num_fwd_outputs
    statics = cap.partition_kwargs.get("static_lifetime_input_indices")
    row: dict[str, Any] = {"layers": layers, "nodes": cap.num_nodes}

    with config.patch(activation_memory_budget_solver="dp", activation_memory_budget_runtime_estimator="flops"):
        torch_times, fx_times, parts = [], [], []
        expected = got = None
        for _ in range(reps):
            gm = _prepared(cap)
            gc.collect()
            t = time.perf_counter()
            expected = torch_budget_decision(gm, k, budget, statics)
            torch_times.append(time.perf_counter() - t)
            gm = _prepared(cap)
            gc.collect()
            t = time.perf_counter()
            d = decide_with_budget(gm.graph, budget, num_fwd_outputs=k, static_lifetime_input_indices=statics,
                                   solver="dp_lean", arrays=lower_graph(gm.graph))
            fx_times.append(time.perf_counter() - t)
            got = [n.name for n in d.arrays.nodes_at(d.saved)]
            parts.append(d.seconds)
        if got != expected:
            raise SystemExit(f"{layers} layers: fxcut saved {len(got or [])} values, torch "
                             f"{len(expected or [])}; they differ")
    row.update(stage=d.stage, candidates=len(d.candidates), saved=len(got),
               torch_s=statistics.median(torch_times), fxcut_s=statistics.median(fx_times))
    row["fxcut_parts"] = {key: statistics.median(p.get(key, 0.0) for p in parts) for key in parts[0]}

    # The knapsack instance of this decision, both ways.
    mem, rts, cap_mem = d.memories, d.runtimes, max(budget, 0)
    from torch._functorch._activation_checkpointing.knapsack import dp_knapsack

    torch_kn_s, torch_kn = _median_time(lambda: dp_knapsack(mem, rts, cap_mem), reps)
    lean_s, lean = _median_time(lambda: solve("dp_lean", mem, rts, cap_mem), reps)
    table = solve("dp", mem, rts, cap_mem)
    if tuple(torch_kn) != tuple(lean[:3]) or tuple(torch_kn) != tuple(table[:3]):
        raise SystemExit(f"{layers} layers: the knapsack choices differ")
    row.update(
        torch_kn_s=torch_kn_s,
        lean_kn_s=lean_s,
        torch_tensor_peak=_torch_tensor_peak(lambda: dp_knapsack(mem, rts, cap_mem)),
        torch_python_peak=_python_peak(lambda: dp_knapsack(mem, rts, cap_mem)),
        lean_peak=lean.peak_bytes,
        table_peak=table.peak_bytes,
    )
    return row


def _fmt_bytes(b: float) -> str:
    return f"{b / 1e6:.2f} MB" if b >= 1e6 else f"{b / 1e3:.1f} kB"


def render(rows: list[dict[str, Any]], budget: float, reps: int) -> str:
    out = [
        f"# Activation memory budget {budget}: fxcut vs torch {torch.__version__}",
        "",
        f"GPT-2 joint graphs (fake tensors, hidden 1024, seq 512), medians of {reps} runs on one machine, "
        f"one process. Command: `PYTHONPATH=python python bench/bench_budget.py --budget {budget} "
        f"--reps {reps}`.",
        "",
        "## The whole decision (saved values equal node for node)",
        "",
        "| layers | nodes | candidates | saved | torch `choose_saved_values_set` | fxcut `decide_with_budget` | speed-up |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        out.append(f"| {r['layers']} | {r['nodes']} | {r['candidates']} | {r['saved']} | {r['torch_s'] * 1e3:.0f} ms "
                   f"| {r['fxcut_s'] * 1e3:.1f} ms | {r['torch_s'] / r['fxcut_s']:.0f}x |")
    out += ["", "fxcut's time by step (ms): " + "; ".join(
        f"{r['layers']} layers: " + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in r["fxcut_parts"].items())
        for r in rows), ""]
    out += [
        "## The knapsack (this graph's instance, same choice)",
        "",
        "| layers | items | torch `dp_knapsack` peak (tensors + Python heap) | fxcut `dp` (table, C) | fxcut `dp_lean` | memory ratio | torch time | `dp_lean` time |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        torch_peak = r["torch_tensor_peak"] + r["torch_python_peak"]
        out.append(f"| {r['layers']} | {r['candidates']} | {_fmt_bytes(torch_peak)} "
                   f"({_fmt_bytes(r['torch_tensor_peak'])} + {_fmt_bytes(r['torch_python_peak'])}) "
                   f"| {_fmt_bytes(r['table_peak'])} | {_fmt_bytes(r['lean_peak'])} "
                   f"| 1/{torch_peak / r['lean_peak']:.0f} | {r['torch_kn_s'] * 1e3:.1f} ms "
                   f"| {r['lean_kn_s'] * 1e3:.2f} ms |")
    out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[24, 48])
    ap.add_argument("--budget", type=float, default=0.5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=None, help="also write the table here (Markdown)")
    args = ap.parse_args(argv)
    rows = [bench_one(n, args.budget, args.reps) for n in args.layers]
    text = render(rows, args.budget, args.reps)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
