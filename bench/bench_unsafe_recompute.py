"""Where torch's budget path recomputes what it must not: the figures of the README's section.

A measurement, not a test (the tests assert the same facts:
tests/test_random_ops.py, tests/test_budget_models.py).  One Markdown
report to stdout (and, with --out, into its generated section of that file):

    PYTHONPATH=python python bench/bench_unsafe_recompute.py [--out docs/unsafe_recompute.md]

1. Random ops (tests/test_random_ops.py's cases: a function per random op,
   traced by AOT Autograd, no-op compilers on CPU): the largest absolute
   difference between the gradient of one step and eager mode's (same
   seed), for torch's own partitioner at each ``activation_memory_budget``,
   and the largest over every budget for fxcut's ``safe_budget=True`` and
   its plan (``planned_partitioner(b)``).  fxcut's default path makes
   torch's decision (the tests check it step for step) and warns there.
2. Models (tests/test_budget_models.py's, compiled whole with dynamo):
   torch's step at each budget -- ``ok``, the error it raises, or its
   largest gradient difference from eager -- and the same for fxcut's
   ``safe_budget=True`` and plan over every budget.
3. What ``safe_budget=True`` costs: the bytes the forward saves for the
   backward (the saved values the backward reads), torch's decision against
   fxcut's safe decision, per model and budget.

``--overhead ROUNDS``: instead, what the check costs the default path: the
time of the check (:func:`fxcut.route.safety.safe_saved`) inside a whole
``fxcut.min_cut_rematerialization_partition`` call on a 24-layer GPT-2
(dropout 0.1: the check runs to the end) and Llama (no random op) joint
graph, fake tensors; the median of the per-call ratios, gc on.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
import warnings
from typing import Any

import torch
from torch._functorch import config as functorch_config

import fxcut
from fxcut.route.decide import decide
from fxcut.route.lower import lower_plan
from fxcut.route.plan import make_plan
from fxcut.solve.account import placement
from fxcut.tools.decisions import torch_now
from fxcut.torchrules.snapshot import copy_graph_module

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
sys.path.insert(0, HERE)
import test_budget_models as models  # noqa: E402  (tests/: the models)
import test_random_ops as random_ops  # noqa: E402  (tests/: the random-op cases)
from docs_sections import replace_section  # noqa: E402

BUDGETS = (0.0, 0.3, 0.7, 1.0)
SAFE = functools.partial(fxcut.min_cut_rematerialization_partition, safe_budget=True)


def _grad_error(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]) -> float:
    return float((a[1] - b[1]).abs().max())


def _cell(x: float) -> str:
    return "0" if x == 0 else f"{x:.3g}"


def random_op_table() -> list[str]:
    head = " | ".join(f"torch b={b:g}" for b in BUDGETS)
    lines = [f"| random op (case) | {head} | fxcut safe_budget, every b | fxcut plan, every b |",
             "|---" * (len(BUDGETS) + 3) + "|"]
    for name, (fn, op) in random_ops.CASES.items():
        ref = random_ops.eager(fn)
        theirs = [_grad_error(random_ops.compiled(fn, random_ops.torch_min_cut, b), ref) for b in BUDGETS]
        safe = max(_grad_error(random_ops.compiled(fn, SAFE, b), ref) for b in BUDGETS)
        plan = max(_grad_error(random_ops.compiled(fn, fxcut.planned_partitioner(b)), ref) for b in BUDGETS)
        lines.append(f"| `{op}` ({name}) | " + " | ".join(map(_cell, theirs)) + f" | {_cell(safe)} | {_cell(plan)} |")
    return lines


def _step_cell(step: Any, ref: models.Step) -> str:
    if isinstance(step, str):
        return "fails: version check" if "modified by an inplace operation" in step else f"fails: {step[:60]}"
    worst = max((float((g - ref.grads[k]).abs().max()) for k, g in step.grads.items() if g is not None), default=0.0)
    return "ok" if worst <= 1e-5 else f"gradients off by {worst:.3g}"


def model_table() -> list[str]:
    head = " | ".join(f"torch b={b:g}" for b in BUDGETS)
    lines = [f"| model | {head} | fxcut safe_budget, every b | fxcut plan, every b |",
             "|---" * (len(BUDGETS) + 3) + "|"]
    for name in models.CASES:
        ref = models.run(name)
        cells = [_step_cell(models.outcome(name, models.TORCH, b), ref) for b in BUDGETS]
        safe = {_step_cell(models.outcome(name, fxcut.aot_backend(safe_budget=True), b), ref) for b in BUDGETS}
        plan = {_step_cell(models.outcome(name, fxcut.aot_backend(memory_budget=b), 1.0), ref) for b in BUDGETS}
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {', '.join(sorted(safe))} | {', '.join(sorted(plan))} |")
    return lines


def _saved_bytes(gm: torch.fx.GraphModule, kwargs: dict[str, Any], budget: float, safe: bool) -> int:
    with functorch_config.patch(activation_memory_budget=budget):
        plan = make_plan(copy_graph_module(gm), torch_now(), num_fwd_outputs=kwargs["num_fwd_outputs"],
                         static_lifetime_input_indices=kwargs.get("static_lifetime_input_indices"), safe_budget=safe)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fxcut.UnsafeRecomputeWarning)
            decided = decide(plan, lower_plan(plan))
    arrays = decided.decision.decision.arrays
    kept = placement(arrays, decided.saved, plan.num_fwd_outputs).saved
    return sum(max(arrays.nbytes[i], 0) for i in kept)


def cost_table() -> list[str]:
    head = " | ".join(f"b={b:g}" for b in BUDGETS)
    lines = ["| model: bytes saved for the backward, torch -> safe_budget | " + head + " |",
             "|---" * (len(BUDGETS) + 1) + "|"]
    for name in models.CASES:
        gm, kwargs = models.joint(name)
        cells = []
        for b in BUDGETS:
            theirs, ours = _saved_bytes(gm, kwargs, b, False), _saved_bytes(gm, kwargs, b, True)
            cells.append(f"{theirs:,}" if theirs == ours else f"{theirs:,} -> {ours:,}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def overhead(rounds: int) -> list[str]:
    import fxcut.route.decide as decide_step
    from training import capture_model

    checked = decide_step.safe_saved
    lines = ["| graph (24 layers, fake tensors) | nodes | whole partition, median ms | the check, median ms | "
             "check / partition, median of per-round ratios |", "|---|---|---|---|---|"]
    for name, cfg in (("gpt2", {"dropout": 0.1}), ("llama", {})):
        cap = capture_model(name, fake=True, layers=24, **cfg)
        spent: list[float] = []

        def timed(plan: Any, chosen: Any, saved: list[int], unsafe: Any) -> list[int]:
            t0 = time.perf_counter()
            try:
                return checked(plan, chosen, saved, unsafe)
            finally:
                spent.append(time.perf_counter() - t0)

        decide_step.safe_saved = timed  # type: ignore[assignment]
        try:
            whole, check = [], []
            for r in range(rounds + 1):
                gm = cap.fresh()
                t0 = time.perf_counter()
                fxcut.min_cut_rematerialization_partition(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs,
                                                          **cap.partition_kwargs)
                if r:  # the first call warms up
                    whole.append(time.perf_counter() - t0)
                    check.append(spent[-1])
        finally:
            decide_step.safe_saved = checked
        ratios = [c / w for c, w in zip(check, whole)]
        lines.append(f"| {name} | {len(list(cap.gm.graph.nodes)):,} | {statistics.median(whole) * 1e3:.0f} | "
                     f"{statistics.median(check) * 1e3:.1f} | {statistics.median(ratios):.4f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="a Markdown file whose 'unsafe-recompute' section to (re)write")
    parser.add_argument("--overhead", type=int, metavar="ROUNDS", default=0,
                        help="measure what the check costs the default path instead (ROUNDS interleaved rounds)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if args.overhead:
        print("\n".join(overhead(args.overhead)))
        return
    report = [f"torch {torch.__version__}, fxcut {fxcut.__version__}, CPU, eager kernels (no-op compilers).", "",
              "Largest |gradient - eager's| of one step (same seed):", "", *random_op_table(), "",
              "One training step of each model:", "", *model_table(), "",
              "Bytes the forward saves for the backward (the saved values the backward reads):", "",
              *cost_table()]
    text = "\n".join(report)
    print(text)
    if args.out:
        replace_section(args.out, "unsafe-recompute", text)


if __name__ == "__main__":
    main()
