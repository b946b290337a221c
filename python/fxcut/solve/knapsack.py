"""The knapsack of the activation memory budget.

Each solver takes ``(memory, runtimes, max_memory)`` and returns what the
installed torch's solver of the same name returns, ``(runtime, saved,
recomputable)`` -- the same item indices, in the same list order, and the
same runtime value:

- ``dp``: torch's ``dp_knapsack`` (memories quantised to 1e-4, a float32
  table, backtracking from the last item), in C.
- ``dp_lean``: fxcut's; the choice of ``dp`` (tested equal) without the
  table: about one float32 row of memory instead of one per item.
- ``greedy``: torch's ``greedy_knapsack``, in C.
- ``dp_knapsack_sliding_hirschberg``: torch's solver of that name, in C.
- ``ilp``: torch's ``ilp_knapsack``: scipy's ``milp`` (HiGHS), called with
  the same arguments, so it returns the same optimum and choice.

:func:`solve` also reports the solver's peak heap use (the C solvers' own
allocations, metered; ``None`` for ``ilp``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import fxcut._C as _C

#: Solvers fxcut runs itself; torch's ``dynamic_memory_budget_dp`` and
#: custom solvers are handed to torch (see fxcut.solve.budget).
SOLVERS: tuple[str, ...] = ("dp", "dp_lean", "greedy", "ilp", "dp_knapsack_sliding_hirschberg")

_DESCENDING_RECOMPUTE = frozenset({"dp", "dp_lean", "dp_knapsack_sliding_hirschberg"})


class KnapsackChoice(NamedTuple):
    runtime: float
    saved: list[int]
    recomputable: list[int]
    peak_bytes: int | None


def solve(solver: str, memory: Sequence[float], runtimes: Sequence[float], max_memory: float) -> KnapsackChoice:
    """Run ``solver`` (one of :data:`SOLVERS`); ValueError names an unknown one."""
    if solver == "ilp":
        runtime, saved, recomputable = ilp(memory, runtimes, max_memory)
        return KnapsackChoice(runtime, saved, recomputable, None)
    if solver not in SOLVERS:
        raise ValueError(
            f"unknown activation_memory_budget_solver {solver!r}; fxcut knows {', '.join(map(repr, SOLVERS))}"
        )
    save, order, value, peak = _C.knapsack(memory, runtimes, float(max_memory), solver)
    saved = [i for i in order if save[i]]
    recomputable = [i for i in order if not save[i]]
    if solver in _DESCENDING_RECOMPUTE:
        # torch's DP solvers list the recomputed items from the last one down.
        recomputable.reverse()
    if solver == "dp_knapsack_sliding_hirschberg":
        # torch sums the original values (ints stay ints), in index order.
        value = sum(runtimes[i] for i in saved)
    return KnapsackChoice(value, saved, recomputable, peak)


def dp(memory: Sequence[float], runtimes: Sequence[float], max_memory: float) -> tuple[float, list[int], list[int]]:
    return solve("dp", memory, runtimes, max_memory)[:3]


def dp_lean(memory: Sequence[float], runtimes: Sequence[float], max_memory: float) -> tuple[float, list[int], list[int]]:
    return solve("dp_lean", memory, runtimes, max_memory)[:3]


def greedy(memory: Sequence[float], runtimes: Sequence[float], max_memory: float) -> tuple[float, list[int], list[int]]:
    return solve("greedy", memory, runtimes, max_memory)[:3]


def sliding_hirschberg(
    memory: Sequence[float], runtimes: Sequence[float], max_memory: float
) -> tuple[float, list[int], list[int]]:
    return solve("dp_knapsack_sliding_hirschberg", memory, runtimes, max_memory)[:3]


def ilp(memory: Sequence[float], runtimes: Sequence[float], max_memory: float) -> tuple[float, list[int], list[int]]:
    """Maximise the saved runtime subject to the memory bound, items 0/1,
    with scipy's mixed-integer solver -- the problem torch poses, posed the
    same way (same arrays, bounds and integrality), so HiGHS answers alike.
    An item counts as saved only where the solution is exactly 1."""
    try:  # optional dependencies, for this solver only
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp
    except ImportError:
        raise RuntimeError("the 'ilp' memory-budget solver needs numpy and scipy") from None

    weights = np.array(memory)
    values = np.array(runtimes)
    objective = -values
    result = milp(
        c=objective,
        constraints=[LinearConstraint(A=weights, ub=np.array(max_memory))],
        integrality=np.ones_like(objective),
        bounds=Bounds(0, 1),
    )
    if not result.success:
        raise RuntimeError(f"scipy's milp found no solution for the memory budget: {result.message}")
    saved = [k for k, x in enumerate(result.x) if x == 1]
    recomputable = [k for k, x in enumerate(result.x) if x != 1]
    return -result.fun, saved, recomputable


__all__ = ["KnapsackChoice", "SOLVERS", "dp", "dp_lean", "greedy", "ilp", "sliding_hirschberg", "solve"]
