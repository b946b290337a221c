"""The exact plan solver on every zoo graph: search vs exact peak, proven bound, gap, time.

    PYTHONPATH=python python bench/bench_exact.py --time-limit 60 --section docs/plan.md

For each zoo case and b in (0, 0.5, 1): fxcut.planned_partitioner(b, solver="exact",
exact_time_limit=T) runs the search, then the MILP (fxcut.solve.exact) seeded with
the search's plan.  Peaks are the memory model's (simulated), in KiB.  The lower
bound is proven over every decision the plan's roles allow: no plan has a lower
peak (at b=0: the gap is the plan's distance from the optimum).  At b > 0 the
objective is the least recompute under the peak limit; its bound and gap are on
FLOPs.  "torch b=0": torch's own decision at activation_memory_budget=0 (the
memory model on its saved set); "torch optimal?" compares it with the bound.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def kib(x: int | None) -> str:
    return "-" if x is None else f"{x / 1024:.1f}"


def pct(x: float | None) -> str:
    return "-" if x is None else ("inf" if x == float("inf") else f"{100 * x:.1f}%")


def run(name: str, budget: float, seconds: float) -> tuple[Any, float]:
    import fxcut
    import zoo

    cap = zoo.capture(name)
    fn = fxcut.planned_partitioner(budget, solver="exact", exact_time_limit=seconds)
    t0 = time.perf_counter()
    fn(cap.fresh(), cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    return fn.planner.last, time.perf_counter() - t0


def run_big(layers: int, seconds: float) -> tuple[Any, int, float]:
    """The GPT of bench_plan.py's planning-time target (hidden 1024, seq 512,
    fake tensors) at b=0: (its plan record, joint nodes, the whole call's seconds)."""
    import fxcut
    from training import capture_model

    cap = capture_model("gpt2", fake=True, layers=layers, hidden=1024, seq=512)
    fn = fxcut.planned_partitioner(0.0, solver="exact", exact_time_limit=seconds)
    t0 = time.perf_counter()
    fn(cap.fresh(), cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    return fn.planner.last, cap.num_nodes, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    import zoo

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--time-limit", type=float, default=60.0, help="exact solver seconds per graph and budget")
    p.add_argument("--cases", nargs="*", default=list(zoo.CASES))
    p.add_argument("--budgets", nargs="*", type=float, default=[0.0, 0.5, 1.0])
    p.add_argument("--big-layers", type=int, default=0, help="also the N-layer GPT (hidden 1024, seq 512) at b=0")
    p.add_argument("--out", help="write the markdown here")
    p.add_argument("--section", metavar="FILE", help="write it as the 'exact' section of FILE (docs/plan.md)")
    args = p.parse_args(argv)
    lines = ["## The exact solver, measured", "",
             "`planned_partitioner(b, solver=\"exact\")`: the search, then a MILP over the same memory model "
             "(HiGHS, seeded with the search's plan; the formulation, what is exact and what is a bound, and why "
             "HiGHS rather than CP-SAT: [exact.md](exact.md)). Peaks simulated, KiB. *lower bound*: proven, no "
             "decision has a lower peak (at b > 0 the plan minimises recompute under the limit, so its peak "
             "is not aimed at the bound there; at b > 0 the bound is the instant one). *proven*: the solver "
             "proved its objective optimal (the lowest peak at b = 0, the least recompute under the limit at "
             "b > 0). FLOPs: recomputed forward ops (torch's knapsack estimator); *FLOPs bound*: proven least "
             "recompute under the limit. *exact s*: the exact solver's wall time (limit per graph and b).", "",
             f"Made by `PYTHONPATH=python python bench/bench_exact.py --time-limit {args.time_limit:g}"
             f"{' --cases ' + ' '.join(args.cases) if args.cases != list(zoo.CASES) else ''}"
             f"{f' --big-layers {args.big_layers}' if args.big_layers else ''} --section docs/plan.md` "
             f"(torch {__import__('torch').__version__}, load: {os.getloadavg()[0]:.1f} at start).", "",
             "| model | b | search peak | exact peak | lower bound | gap | proven | search FLOPs | exact FLOPs "
             "| FLOPs bound | FLOPs gap | exact s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for name in args.cases:
        b0 = None
        for b in args.budgets:
            c, _ = run(name, b, args.time_limit)
            sp, sf = c.search_point or (c.peak_bytes, c.recompute_flops)
            lines.append(f"| {name} | {b:g} | {kib(sp)} | {kib(c.peak_bytes)} | {kib(c.lower_bound_bytes)} | "
                         f"{pct(c.gap)} | {'yes' if c.proven_optimal else 'no'} | {sf} | {c.recompute_flops} | "
                         f"{'-' if c.recompute_lower_bound is None else c.recompute_lower_bound} | "
                         f"{pct(c.recompute_gap)} | {c.exact_seconds:.1f} |")
            print(lines[-1], flush=True)
            if b == 0:
                b0 = c
        if b0 is not None and b0.lower_bound_bytes is not None:
            tp = b0.torch_points.get(0.0, (b0.torch_peak_bytes, 0))[0]
            lb = b0.lower_bound_bytes
            if tp <= lb:
                v = f"yes: torch's b=0 peak {kib(tp)} KiB is the proven lowest"
            elif b0.peak_bytes < tp:
                v = (f"no: the plan reaches {kib(b0.peak_bytes)} KiB below torch's {kib(tp)} "
                     f"({pct(1 - b0.peak_bytes / tp)} lower); lowest proven >= {kib(lb)}")
            else:
                v = f"unknown: torch {kib(tp)} KiB, plan {kib(b0.peak_bytes)}, proven >= {kib(lb)}"
            verdicts.append(f"- {name}: {v}")
            print(verdicts[-1], flush=True)
    if args.big_layers:
        c, nodes, total = run_big(args.big_layers, args.time_limit)
        sp = c.search_point or (c.peak_bytes, c.recompute_flops)
        mib = 2 ** 20
        lines += ["", f"**{args.big_layers}-layer GPT** (hidden 1024, seq 512, {nodes} joint nodes) at b=0: "
                  f"search peak {sp[0] / mib:.1f} MiB, exact peak {c.peak_bytes / mib:.1f} MiB, proven lower bound "
                  f"{(c.lower_bound_bytes or 0) / mib:.1f} MiB (gap {pct(c.gap)}, "
                  f"{'optimal' if c.proven_optimal else 'not proven optimal'}); the exact solver "
                  f"{c.exact_seconds:.1f} s (limit {args.time_limit:g} s), the whole partition call {total:.1f} s; "
                  f"torch's default decision {c.torch_peak_bytes / mib:.1f} MiB."]
        print(lines[-1], flush=True)
    text = "\n".join(lines + ["", "**Is torch's budget-0 decision optimal?** (torch at activation_memory_budget=0, "
                                "the memory model on its saved set, against the proven bound)", ""] + verdicts) + "\n"
    if args.section:  # a generated section of a document (docs/plan.md), the rest of it untouched
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from docs_sections import replace_section

        replace_section(args.section, "exact", text)
    if args.out:
        Path(args.out).write_text(text)
    if not args.out and not args.section:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
