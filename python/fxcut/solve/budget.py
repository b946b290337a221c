"""The activation memory budget: torch's ``choose_saved_values_set``, decided by fxcut.

With ``torch._functorch.config.activation_memory_budget`` (or a node's
``meta["memory_budget"]``, or a ``region_activation_memory_budget``
annotation) below 1, torch trades recomputation for memory:

1. budget 0 saves the inputs and nothing else;
2. otherwise the plain min-cut; budget 1 stops there, and so does a cut
   that saves no more than the inputs;
3. the "more aggressive" and "aggressive" cuts (fewer bans), each taken when
   its memory ratio is under the budget;
4. else a 0-1 knapsack over the nodes still banned and needed by the
   backward: which to keep saved so that the most runtime stays saved within
   the budget; the others are un-banned for a last cut.

Steps 1-3 and the candidate list (order and ties as torch forms them) run
in C over one graph array (:func:`fxcut.solve.core.budget_plan`); the
knapsack runs in C (:mod:`fxcut.solve.knapsack`); the last cut reuses the
same graph array.  What torch knows and fxcut does not copy comes in as
:class:`BudgetInputs` (made by :mod:`fxcut.torchrules.budget` from torch's
config): the candidates' runtimes (torch's own ``estimate_runtime``), which
values live in an input's storage, and -- for torch's own solvers and custom
ones -- torch's knapsack dispatch.  :func:`budget_pass` is the route's
decision step and the planner's and the Pareto sweep's budget pass.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeAlias

import fxcut._C as _C
from .._numbers import check_number
from .arrays import A
from .core import Decision, MinCutOptions, budget_plan, decide
from .knapsack import SOLVERS, KnapsackChoice, solve

#: The runtimes of nodes (indices) as torch's estimator gives them.
RuntimeFn: TypeAlias = Callable[[Sequence[int]], list[float]]
#: A knapsack fxcut does not run itself (torch's ``dynamic_memory_budget_dp``,
#: a custom solver): (memories, runtimes, max memory, candidate node indices,
#: the decision classifying the graph) -> the choice.
KnapsackFn: TypeAlias = Callable[[list[float], list[float], float, list[int], "Decision[Any]"], KnapsackChoice]


@dataclass(frozen=True)
class BudgetInputs:
    """What the budget pass reads besides the graph array and the options,
    from torch (:func:`fxcut.torchrules.budget.budget_inputs`): ``solver``,
    a name of :data:`fxcut.solve.knapsack.SOLVERS` or a :data:`KnapsackFn`;
    ``runtimes``; ``input_storage()``, one byte per node, 1 where its value
    lives in a graph input's storage (asked for a budget strictly between 0
    and 1 only); ``no_candidates_saves_aggressive_cut``: the release's rule
    when no banned node is left for the knapsack."""

    solver: str | KnapsackFn
    runtimes: RuntimeFn
    input_storage: Callable[[], bytes]
    no_candidates_saves_aggressive_cut: bool


STAGES: dict[int, str] = {
    _C.STAGE_NO_BACKWARD: "no_backward",
    _C.STAGE_INPUTS: "inputs",
    _C.STAGE_MIN_CUT: "min_cut",
    _C.STAGE_MORE_AGGRESSIVE: "more_aggressive",
    _C.STAGE_AGGRESSIVE: "aggressive",
    _C.STAGE_NO_CANDIDATES: "no_candidates",
    _C.STAGE_KNAPSACK: "knapsack",
}

# --------------------------------------------------------------------------- configuration


def check_budget(budget: object, name: str = "activation_memory_budget") -> float:
    """The budget as a float; ValueError naming it (``name``) unless it is
    a number in [0, 1] (:func:`fxcut._numbers.check_number`)."""
    return check_number(name, budget, 0.0, 1.0)


# --------------------------------------------------------------------------- the decision


@dataclass
class BudgetDecision(Generic[A]):
    """What the budget pass decided, by node index."""

    budget: float
    stage: str
    saved: list[int]
    decision: Decision[A]  # of the last cut (tags, classes)
    min_act_size: float = 0.0
    max_act_size: float = 0.0
    ratio_more_aggressive: float = math.nan
    ratio_aggressive: float = math.nan
    candidates: list[int] = field(default_factory=list)
    memories: list[float] = field(default_factory=list)
    runtimes: list[float] = field(default_factory=list)
    knapsack: KnapsackChoice | None = None
    n_cuts: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def arrays(self) -> A:
        """The graph array decided on."""
        return self.decision.arrays

    @property
    def recomputed_candidates(self) -> list[int]:
        if self.knapsack is None:
            return []
        return [self.candidates[k] for k in self.knapsack.recomputable]


def _knapsack(solver: str | KnapsackFn, memories: list[float], runtimes: list[float], max_memory: float,
              candidates: list[int], decision: Decision[A]) -> KnapsackChoice:
    if isinstance(solver, str):
        return solve(solver, memories, runtimes, max_memory)
    return solver(memories, runtimes, max_memory, candidates, decision)


def budget_pass(
    arrays: A,
    budget: float,
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: Sequence[int],
    options: MinCutOptions,
    inputs: BudgetInputs,
) -> BudgetDecision[A]:
    """torch's budget pass (module docstring) over the graph array
    ``arrays`` (read only: one graph array serves every budget), with every
    input already checked (budget in [0, 1], a known solver): nothing is
    looked up or checked again."""
    opts, statics = options, list(static_lifetime_input_indices)
    t1 = time.perf_counter()
    mask = inputs.input_storage() if 0.0 < budget < 1.0 else None
    t2 = time.perf_counter()
    out = budget_plan(arrays, opts, memory_budget=budget, num_fwd_outputs=num_fwd_outputs,
                      static_lifetime_input_indices=statics, input_storage=mask)
    t3 = time.perf_counter()
    plan = Decision.from_core(arrays, out.decision)
    stage = STAGES[out.stage]
    result = BudgetDecision(
        budget=budget, stage=stage, saved=list(plan.saved), decision=plan, min_act_size=out.min_act_size,
        max_act_size=out.max_act_size, ratio_more_aggressive=out.ratio_more_aggressive,
        ratio_aggressive=out.ratio_aggressive, candidates=list(out.candidates), memories=list(out.memories),
        n_cuts=out.n_passes, seconds={"lower": arrays.seconds, "storage": t2 - t1, "plan": t3 - t2},
    )
    if stage == "no_candidates" and inputs.no_candidates_saves_aggressive_cut:
        # Nothing left to trade off: the cut the knapsack would end with.
        final = decide(arrays, num_fwd_outputs=num_fwd_outputs, static_lifetime_input_indices=statics,
                       options=opts.aggressive())
        result.decision, result.saved = final, list(final.saved)
        result.n_cuts += 1
    if stage != "knapsack":
        return result
    result.runtimes = inputs.runtimes(result.candidates)
    t4 = time.perf_counter()
    result.knapsack = _knapsack(inputs.solver, result.memories, result.runtimes, max(budget, 0),
                                result.candidates, plan)
    t5 = time.perf_counter()
    dont_ban = bytearray(len(arrays))
    for k in result.knapsack.recomputable:
        dont_ban[result.candidates[k]] = 1
    final = decide(arrays, num_fwd_outputs=num_fwd_outputs, static_lifetime_input_indices=statics,
                   options=opts.aggressive(), dont_ban_mask=bytes(dont_ban))
    t6 = time.perf_counter()
    result.decision = final
    result.saved = list(final.saved)
    result.n_cuts += 1
    result.seconds.update(estimate=t4 - t3, knapsack=t5 - t4, final_cut=t6 - t5)
    return result


__all__ = ["BudgetDecision", "BudgetInputs", "KnapsackFn", "RuntimeFn", "SOLVERS", "STAGES", "budget_pass",
           "check_budget"]
