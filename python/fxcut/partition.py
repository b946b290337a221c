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
from .route.guard import Call, Guard
from .route.lower import lower_plan
from .route.plan import Objective, Plan, make_plan, safe_budget_mode
from .solve.budget import BudgetDecision

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
    objective: Objective | None = None,
    safe_budget: bool | None = None,
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
                     safe_budget=safe_budget).modules


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
    objective: Objective | None = None,
    safe_budget: bool | None = None,
) -> Partitioned:
    """:func:`min_cut_rematerialization_partition` with the route behind
    its modules -- the plan and the decision -- for the tools that report
    on a partition (the HTML page, the CLI) without planning it again."""
    call = Call(joint_module, joint_inputs, compiler, num_fwd_outputs, static_lifetime_input_indices)
    routed: Routed | None = None
    safe = safe_budget_mode(safe_budget)
    with Guard(call, verify=verify, allow_untested=allow_untested,
               default_plan=objective is None and not safe) as guard:
        if guard.fxcut_decides:
            plan = make_plan(joint_module, num_fwd_outputs=num_fwd_outputs,
                             static_lifetime_input_indices=static_lifetime_input_indices, objective=objective,
                             rules=guard.rules, safe_budget=safe)
            routed = route(plan, joint_inputs)
            guard.result, guard.decided = routed.modules, Decided(routed.decision, routed.saved)
    assert guard.result is not None
    return Partitioned(guard.result, routed if routed is not None and guard.result is routed.modules else None)


class Routed(NamedTuple):
    """What the route made of one plan: the plan, the core's decision
    (torch's, under the plan's budget), the saved node indices the modules
    were built from (the objective's where the plan has one) and the
    modules."""

    plan: Plan
    decision: BudgetDecision
    saved: list[int]
    modules: PartitionResult


def route(plan: Plan, joint_inputs: Any) -> Routed:
    """lower -> core -> build for one plan, unguarded (no fallback, no
    verify, no count: the public entry is
    :func:`min_cut_rematerialization_partition`).  Writes to the plan's
    joint module; the caller restores it if this raises.  For tools and
    benchmarks that need the decision behind the modules."""
    chosen, saved = decide(plan, lower_plan(plan))
    return Routed(plan, chosen, saved, build(plan, chosen, saved, joint_inputs))


__all__ = ["Partitioned", "Routed", "min_cut_rematerialization_partition", "partition", "route"]
