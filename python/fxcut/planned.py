"""The peak-aware memory plan as a partition function: ``fxcut.planned_partitioner``.

:class:`PeakPlanner` (:mod:`fxcut.solve.peakplan`) is a plan's objective:
the default route (guard -> plan -> lower -> decide -> build,
:mod:`fxcut.partition`) makes torch's default decision, then runs the
planner over the graph array, torch's side of it (torch's decisions at
other budgets, the node facts, inductor's asks) made by the route through
the call's adapter (:func:`fxcut.route.decide.plan_inputs`).  Everything
else -- validation, DCE/CSE, tags, module building, fallback and restore on
failure -- is the default route's.  Verify mode does not apply: the plan is
meant to differ from torch's decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, cast

import torch.fx as fx

from .partition import min_cut_rematerialization_partition
from .solve.cost import MachineModel
from .solve.peakplan import (ASK_TIME_LIMIT, COSTS, DEFAULT_CHECK_TIME_LIMIT, DEFAULT_EXACT_TIME_LIMIT,
                             DEFAULT_MAX_CHECKS, MAX_TIME_LIMIT, SETTLE_BUDGETS, SOLVERS, PeakPlanner, PlanChoice)
from .solve.planner import DEFAULT_MAX_WORK, DEFAULT_SEED_BUDGETS, DEFAULT_TIME_LIMIT


class PlannedPartition(Protocol):
    """A partition_fn with torch's signature whose saved set is its
    ``planner``'s (:func:`planned_partitioner`)."""

    planner: PeakPlanner
    fxcut_takes_zero3: bool

    def __call__(self, joint_module: fx.GraphModule, joint_inputs: Any, compiler: str = "inductor", *,
                 num_fwd_outputs: int, static_lifetime_input_indices: list[int] | None = None,
                 **kwargs: Any) -> tuple[fx.GraphModule, fx.GraphModule]: ...


def planned_partitioner(memory_budget: float = 1.0, *, exact_max_candidates: int = 16,
                        max_work: int = DEFAULT_MAX_WORK, time_limit: float = DEFAULT_TIME_LIMIT,
                        seed_budgets: Sequence[float] = DEFAULT_SEED_BUDGETS, solver: str = "search",
                        exact_time_limit: float = DEFAULT_EXACT_TIME_LIMIT, memory_model: str = "unfused",
                        cost: str | None = None, machine: MachineModel | None = None, check: str | None = "default",
                        max_checks: int | None = None, check_time_limit: float | None = None) -> PlannedPartition:
    """A partition_fn with torch's signature ``(joint_module, joint_inputs,
    compiler="inductor", *, num_fwd_outputs, static_lifetime_input_indices=None)``
    whose saved set is :class:`PeakPlanner`'s (options as there; a bad one
    raises ValueError naming it).  The default path does the rest.

    ``solver``: "search" (the default: the C search alone), "exact" (then the
    MILP of :mod:`fxcut.solve.exact`, seeded with the search's plan, for up to
    ``exact_time_limit`` seconds: its plan when better, proven or not) or
    "auto" (the exact plan only where it is proven optimal, else the
    search's).  Either way ``fn.planner.last`` carries the proven bound and
    the gap.  "exact" and "auto" need HiGHS (``pip install 'fxcut[exact]'``)
    and the unfused memory model.  ``memory_model``: ``"inductor"`` when
    inductor compiles the modules this partition_fn builds, ``"unfused"``
    when they run op by op freeing each saved value after its last use
    (torch's ``aot_eager``), ``"unfused_held"`` when the backward holds
    them to its end (unboxed no-op compilers); ``fxcut.inductor_backend``,
    ``fxcut.aot_backend`` and the DeepSpeed integration choose for you.  ``fn.planner.last``: the last
    graph's plan (:class:`PlanChoice`)."""
    planner = PeakPlanner(memory_budget, exact_max_candidates=exact_max_candidates, max_work=max_work,
                          time_limit=time_limit, seed_budgets=seed_budgets, solver=solver,
                          exact_time_limit=exact_time_limit, memory_model=memory_model, cost=cost,
                          machine=machine, check=check, max_checks=max_checks, check_time_limit=check_time_limit)

    def planned_partition(joint_module: fx.GraphModule, joint_inputs: Any, compiler: str = "inductor", *,
                          num_fwd_outputs: int, static_lifetime_input_indices: list[int] | None = None,
                          **kwargs: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
        return min_cut_rematerialization_partition(
            joint_module, joint_inputs, compiler, num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=static_lifetime_input_indices, objective=planner, **kwargs)

    fn = cast(PlannedPartition, planned_partition)
    fn.planner = planner
    fn.fxcut_takes_zero3 = True
    return fn

__all__ = ["ASK_TIME_LIMIT", "COSTS", "DEFAULT_CHECK_TIME_LIMIT", "DEFAULT_EXACT_TIME_LIMIT", "DEFAULT_MAX_CHECKS",
           "MAX_TIME_LIMIT", "PeakPlanner", "PlanChoice", "PlannedPartition", "SETTLE_BUDGETS", "SOLVERS", "planned_partitioner"]
