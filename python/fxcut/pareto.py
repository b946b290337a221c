"""The memory/runtime trade-off of the activation memory budget, read from the partition's plan.

:func:`memory_pareto` sweeps the budget over one joint graph as the
partitioner sees it -- its :class:`fxcut.route.plan.Plan`: dead code removed and
CSE as the partitioner runs them (with ``num_fwd_outputs``), the same
options and solver -- lowered once, and reports for each budget what the
partitioner would save and recompute.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch.fx as fx

import fxcut._C as _C
from .route.lower import lower_plan
from .route.plan import Plan, make_plan
from .solve.budget import check_budget
from .solve.core import Decision
from .torchrules.adapter import Solver, running_torch

class ParetoPoint(NamedTuple):
    budget: float
    saved_bytes: int
    recompute_runtime: float
    stage: str


DEFAULT_BUDGETS: tuple[float, ...] = tuple(k / 10 for k in range(11))


def saved_for_backward(decision: Decision[Any], saved: Sequence[int], num_fwd_outputs: int) -> list[int]:
    """The saved values the backward reads: those the backward outputs reach
    through their inputs without passing another saved value or a
    placeholder (the module extraction drops the others)."""
    arrays = decision.arrays
    kind, in_ptr, in_idx = arrays.kind, arrays.in_ptr, arrays.in_idx
    stop = set(saved)
    seen: set[int] = set()
    reached: set[int] = set()
    stack = [o for o in arrays.outputs[num_fwd_outputs:] if o >= 0]
    while stack:
        i = stack.pop()
        if i in stop:
            reached.add(i)
            continue
        if i in seen or kind[i] == _C.KIND_PLACEHOLDER:
            continue
        seen.add(i)
        stack.extend(in_idx[in_ptr[i]:in_ptr[i + 1]])
    return [i for i in saved if i in reached]


def recomputed_nodes(decision: Decision[Any], saved: Sequence[int], num_fwd_outputs: int) -> list[int]:
    """The forward ops the backward recomputes when ``saved`` is saved: the
    call_function forward nodes the backward outputs reach through their
    inputs without passing a saved value or a placeholder (getitems, which
    only unpack, left out)."""
    arrays = decision.arrays
    cls = decision.node_class
    kind, in_ptr, in_idx = arrays.kind, arrays.in_ptr, arrays.in_idx
    stop = set(saved)
    seen: set[int] = set()
    stack = [o for o in arrays.outputs[num_fwd_outputs:] if o >= 0]
    while stack:
        i = stack.pop()
        if i in seen or i in stop or kind[i] == _C.KIND_PLACEHOLDER:
            continue
        seen.add(i)
        stack.extend(in_idx[in_ptr[i]:in_ptr[i + 1]])
    flags = arrays.flags
    return sorted(
        i for i in seen
        if cls[i] & _C.C_REQUIRED_FW and kind[i] == _C.KIND_CALL_FUNCTION and not flags[i] & _C.F_GETITEM
    )


def memory_pareto(
    joint_module: fx.GraphModule,
    num_fwd_outputs: int,
    *,
    budgets: Sequence[float] = DEFAULT_BUDGETS,
    static_lifetime_input_indices: list[int] | None = None,
    solver: Solver | None = None,
    plot: str | None = None,
    plan: Plan | None = None,
) -> list[ParetoPoint]:
    """The memory/runtime trade-off of the budget, one point per budget.

    For each budget: the bytes the forward saves for the backward (the saved
    values the backward reads, as the module extraction keeps them) and the
    estimated runtime of the forward ops the backward recomputes (under the
    configured runtime estimator: flops by default), and the stage that
    decided -- what the partitioner would do under that budget.  The graph
    is the partition's: its :class:`fxcut.route.plan.Plan` (made from the
    arguments when ``plan`` is None: dead code removed and CSE as the
    partitioner runs them, with ``num_fwd_outputs``; the same options and
    solver), lowered once; ``joint_module`` is not modified; every estimate
    is shared across budgets.  ``plot``: a path to save a PNG of recompute
    runtime against saved bytes (needs matplotlib).
    """
    from ._paths import check_output_path

    if not isinstance(joint_module, fx.GraphModule):
        raise TypeError(f"joint_module must be a torch.fx.GraphModule, got {type(joint_module).__name__}")
    if plot is not None:  # fail now, not after the whole sweep
        plot = check_output_path(plot, "plot")
        _pyplot()
    points_budgets = [check_budget(b, f"budgets[{k}]") for k, b in enumerate(budgets)]
    if plan is None:
        plan = make_plan(joint_module, running_torch()[0], num_fwd_outputs=num_fwd_outputs,
                         static_lifetime_input_indices=static_lifetime_input_indices, solver=solver)
    if any(0.0 < b < 1.0 for b in points_budgets):  # the plan checked them only for a budget of its own below 1
        plan.torch.check_budget_settings(plan.solver, plan.estimator)
    arrays = lower_plan(plan)
    inputs = plan.budget_inputs(arrays)
    points = []
    for b in points_budgets:
        d = plan.budget_pass(arrays, b, inputs=inputs)
        if d.stage == "no_backward":
            points.append(ParetoPoint(b, 0, 0.0, d.stage))
            continue
        kept = saved_for_backward(d.decision, d.saved, plan.num_fwd_outputs)
        saved_bytes = sum(max(arrays.nbytes[i], 0) for i in kept)
        recomputed = recomputed_nodes(d.decision, d.saved, plan.num_fwd_outputs)
        runtime = float(sum(inputs.runtimes(recomputed))) if recomputed else 0.0
        points.append(ParetoPoint(b, saved_bytes, runtime, d.stage))
    if plot is not None:
        plot_pareto(points, plot)
    return points


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plotting the memory/runtime Pareto curve needs matplotlib") from None
    return plt


def plot_pareto(points: Sequence[ParetoPoint], path: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    xs = [p.saved_bytes / 2**20 for p in points]
    ys = [p.recompute_runtime for p in points]
    ax.plot(xs, ys, marker="o")
    for p, x, y in zip(points, xs, ys):
        ax.annotate(f"{p.budget:g}", (x, y), textcoords="offset points", xytext=(0, 8), ha="center")
    ax.set_xlabel("saved for backward (MiB)")
    ax.set_ylabel("estimated runtime of recomputed forward ops")
    ax.set_title("fxcut: activation memory budget")
    ax.grid(True)
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)


__all__ = ["DEFAULT_BUDGETS", "ParetoPoint", "memory_pareto", "plot_pareto", "recomputed_nodes",
           "saved_for_backward"]
