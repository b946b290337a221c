"""fxcut's drop-in ``min_cut_rematerialization_partition``: the one route of a joint graph.

A joint graph goes through five modules, each entered once, in order:

1. :mod:`fxcut.route.guard` -- who decides (torch on an untested torch or a graph
   fxcut does not model), wrapping the rest: it restores the graph and hands
   it to torch if fxcut fails for a gap of its own, checks the result
   against torch's in verify mode, and counts the graph once;
2. :mod:`fxcut.route.plan` -- the call validated and planned once (:class:`Plan`:
   the running torch's rules, the options, budget and solver, DCE/CSE
   planned, the objective);
3. :mod:`fxcut.route.lower` -- the graph array of the graph as the plan leaves it;
4. the core -- the C decision (:mod:`fxcut.solve.core`, under the budget policy of
   :mod:`fxcut.solve.budget`), then the plan's objective if it has one;
5. :mod:`fxcut.route.build` -- DCE/CSE and the tags written, the forward and
   backward modules built (by :mod:`fxcut.torchrules.extract` on the releases it
   models, by torch's passes on the others).

Nothing is written to the joint graph before step 5.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch.fx as fx

from .route.build import build
from .route.decide import Decided, decide
from .route.guard import Call, Guard, Zero3Walk
from .route.lower import lower_plan
from .route.plan import Objective, Plan, make_plan, safe_budget_mode
from .route.report import PATHS, partitioned, path_of
from .solve.budget import BudgetDecision
from .solve.peakplan import PeakPlanner, PlanChoice
from .torchrules.adapter import LoweredGraph, TorchAdapter

PartitionResult = tuple[fx.GraphModule, fx.GraphModule]


def min_cut_rematerialization_partition(
    joint_module: fx.GraphModule,
    _joint_inputs: Any,
    compiler: str = "inductor",
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
    verify: Any = None,
    allow_untested: bool | None = None,
    objective: PeakPlanner | Objective | None = None,
    safe_budget: bool | None = None,
    _zero3: Zero3Walk | None = None,
) -> PartitionResult:
    """Drop-in for torch's ``min_cut_rematerialization_partition``.

    Same signature and result (an unknown keyword argument is a TypeError,
    as in torch); the decision of what to save is made by fxcut's C core
    and equals the installed torch's.  Reads ``torch._functorch.config`` at
    call time.  ``verify`` (or ``FXCUT_VERIFY``): also run torch's own
    partitioner and compare (:mod:`fxcut.route.guard`); ``allow_untested``: run
    fxcut on a torch outside the tested range; ``objective``: choose the
    saved values another way (:class:`fxcut.route.plan.Objective`; verify mode
    does not apply then).  ``safe_budget`` (or ``FXCUT_SAFE_BUDGET=1``):
    where torch's decision would recompute a random op or a value that
    reads state the step mutates (its budget path does), keep that value
    saved instead (:mod:`fxcut.route.safety`; a deviation from torch's
    decision, so verify mode does not apply); without it fxcut makes torch's
    decision and warns (:class:`fxcut.UnsafeRecomputeWarning`).  On any
    error the module is left exactly as it was (nodes, args, kwargs, meta,
    generated code).
    """
    return partition(joint_module, _joint_inputs, compiler, num_fwd_outputs=num_fwd_outputs,
                     static_lifetime_input_indices=static_lifetime_input_indices, verify=verify,
                     allow_untested=allow_untested, objective=objective,
                     safe_budget=safe_budget, zero3=_zero3).modules


#: fxcut.zero3.wrap_partitioner hands DeepCompile's walk to this function, which runs it inside its guard.
min_cut_rematerialization_partition.fxcut_takes_zero3 = True  # type: ignore[attr-defined]


class Partitioned(NamedTuple):
    """A guarded partition: the modules, and the route that made them
    (None where torch's partitioner decided: a fallback, an untested torch,
    or verify mode's warn-only answer after a mismatch)."""

    modules: PartitionResult
    routed: Routed | None


def partition(
    joint_module: fx.GraphModule,
    joint_inputs: Any,
    compiler: str = "inductor",
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
    verify: Any = None,
    allow_untested: bool | None = None,
    objective: PeakPlanner | Objective | None = None,
    safe_budget: bool | None = None,
    zero3: Zero3Walk | None = None,
    torch: TorchAdapter | None = None,
) -> Partitioned:
    """:func:`min_cut_rematerialization_partition` with the route behind
    its modules -- the plan and the decision -- for the tools that report
    on a partition (the HTML page, the CLI) without planning it again.
    ``zero3``: DeepCompile's ZeRO-3 walk to run first, inside the guard
    (:func:`fxcut.zero3.wrap_partitioner`); ``torch``: the running torch as
    this compile already looked it up (None: the guard looks it up)."""
    call = Call(joint_module, joint_inputs, compiler, num_fwd_outputs, static_lifetime_input_indices, zero3)
    routed: Routed | None = None
    # a plan with an objective never reads FXCUT_SAFE_BUDGET: it keeps unsafe values saved whatever it says
    safe = safe_budget_mode(safe_budget) if objective is None or safe_budget is not None else False
    path = path_of(objective, safe)
    with Guard(call, verify=verify, allow_untested=allow_untested, default_plan=objective is None and not safe,
               torch=torch, count_as=PATHS[path]) as guard:
        if guard.fxcut_decides:
            assert guard.torch is not None
            plan = make_plan(joint_module, guard.torch, num_fwd_outputs=num_fwd_outputs,
                             static_lifetime_input_indices=static_lifetime_input_indices, objective=objective,
                             safe_budget=safe)
            routed = route(plan, joint_inputs)
            guard.result, guard.decided = routed.modules, Decided(routed.decision, routed.saved, routed.choice)
    assert guard.result is not None
    mine = routed if routed is not None and guard.result is routed.modules else None
    if mine is not None:
        partitioned(guard.torch, path, mine.plan, Decided(mine.decision, mine.saved, mine.choice))
    else:
        partitioned(guard.torch, "torch", None, None, reason=guard.reason, outcome=guard.outcome)
    return Partitioned(guard.result, mine)


class Routed(NamedTuple):
    """What the route made of one plan: the plan, the core's decision
    (torch's, under the plan's budget), the saved node indices the modules
    were built from (the objective's where the plan has one), the modules,
    and fxcut's peak plan's record where the plan ran one."""

    plan: Plan
    decision: BudgetDecision[LoweredGraph]
    saved: list[int]
    modules: PartitionResult
    choice: PlanChoice | None = None


def route(plan: Plan, joint_inputs: Any) -> Routed:
    """lower -> core -> build for one plan, unguarded (no fallback, no
    verify, no count: the public entry is
    :func:`min_cut_rematerialization_partition`).  Writes to the plan's
    joint module; the caller restores it if this raises.  For tools and
    benchmarks that need the decision behind the modules."""
    chosen, saved, choice = decide(plan, lower_plan(plan))
    return Routed(plan, chosen, saved, build(plan, chosen, saved, joint_inputs), choice)


__all__ = ["Partitioned", "Routed", "min_cut_rematerialization_partition", "partition", "route"]
