"""The route's decision step: what the core decides for a plan, and what the plan saves.

:func:`decide` runs the C core's decision for a :class:`~fxcut.route.plan.Plan`
over its lowered graph, under the plan's budget, solver and options
(:func:`decide_plan`); then, when the plan has an objective, chooses the
saved values with it -- fxcut's peak plan (:class:`~fxcut.solve.peakplan.PeakPlanner`,
run here over arrays, with torch's side of it made by :func:`plan_inputs`)
or a user's :class:`~fxcut.route.plan.Objective` (its choice checked by
:func:`check_saved`) -- and last hands the saved values to
:func:`fxcut.route.safety.safe_saved` (torch's decision warned about where
it recomputes a random op or a reader of mutated state; kept saved under
``safe_budget`` and for an objective).  Read only: nothing is written to
the graph before the build step.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import fxcut._C as _C
from ..solve.budget import BudgetDecision
from ..solve.hazards import Unsafe
from ..solve.peakplan import PeakPlanner, PlanChoice, PlanInputs
from ..solve.roles import plan_roles
from ..torchrules.adapter import LoweredGraph
from .plan import Plan
from .safety import safe_saved


class Decided(NamedTuple):
    """The core's decision under a plan (torch's, under the plan's budget),
    the saved node indices the modules are built from (the objective's
    where the plan has one) and, for fxcut's peak plan, its record."""

    decision: BudgetDecision[LoweredGraph]
    saved: list[int]
    choice: PlanChoice | None = None


def decide(plan: Plan, lowered: LoweredGraph) -> Decided:
    """The decision step of the route for ``plan`` lowered as ``lowered``."""
    chosen = decide_plan(plan, lowered)
    if chosen.stage == "no_backward":
        return Decided(chosen, chosen.saved)
    unsafe = plan.torch.unsafe(lowered)
    objective = plan.objective
    choice: PlanChoice | None = None
    if objective is None:
        saved = chosen.saved
    elif isinstance(objective, PeakPlanner):
        choice = objective.plan(plan_inputs(plan, objective, chosen, unsafe))
        saved = check_saved(plan, chosen, choice.saved, unsafe)
    else:
        saved = check_saved(plan, chosen, objective.choose_saved(plan, chosen), unsafe)
    return Decided(chosen, safe_saved(plan, chosen, saved, unsafe), choice)


def decide_plan(plan: Plan, lowered: LoweredGraph) -> BudgetDecision[LoweredGraph]:
    """The route's decision step: the C core's decision for ``plan`` over
    its lowered graph, under the plan's budget, solver and options (read
    only).  With region budgets, torch checks them once the forward is
    classified and before any cut: a budget-0 decision classifies without
    cutting.  Raises NotImplementedError for a graph shape the core does not
    model (the guard hands such a graph to torch)."""
    inputs = plan.budget_inputs(lowered)
    if plan.regions:
        probe = plan.budget_pass(lowered, 0.0, inputs=inputs)
        if probe.stage != "no_backward":
            plan.torch.check_regions(plan.regions, plan.unannotated, probe.decision, plan.graph)
    return plan.budget_pass(lowered, inputs=inputs)


def plan_inputs(plan: Plan, planner: PeakPlanner, chosen: BudgetDecision[LoweredGraph], unsafe: Unsafe
                ) -> PlanInputs:
    """What the peak plan reads of the plan's graph besides its array:
    torch's decisions at other budgets (the plan's own budget passes), the
    node facts, and -- for the check -- inductor's asks."""
    torch, lowered = plan.torch, chosen.arrays
    estimates = plan.estimates()
    inputs = plan.budget_inputs(lowered, estimates)

    def torch_saved(budget: float) -> list[int]:
        return list(plan.budget_pass(lowered, budget, inputs=inputs).saved)

    checking = planner.check == "inductor"
    no_ask = torch.unaskable(plan.joint_module) if checking else ""
    checking = checking and not no_ask
    return PlanInputs(
        decision=chosen, num_fwd_outputs=plan.num_fwd_outputs, torch_saved=torch_saved,
        model=torch.model_inputs(lowered, planner.memory_model, estimates), numel=torch.value_numel(lowered),
        device=torch.device(lowered), region_budget=torch.region_budget_of(lowered), unsafe=unsafe,
        seeded=torch.seeded(lowered),
        ask=torch.inductor_asker(plan.joint_module, plan.prep, lowered, plan.num_fwd_outputs) if checking else None,
        no_ask=no_ask,
        holds_saved=torch.holds_saved_tensors(plan.joint_module) if checking else False)


def check_saved(plan: Plan, chosen: BudgetDecision[LoweredGraph], saved: Any, unsafe: Unsafe) -> list[int]:
    """An objective's choice as node indices the forward computes; a
    ValueError naming the first that is not."""
    try:
        indices = list(saved)
    except TypeError:
        raise ValueError(f"{plan.objective!r}.choose_saved returned {saved!r}, not a list of node indices") from None
    cls = chosen.decision.node_class
    lowered = chosen.arrays
    roles: bytes | None = None
    for k, i in enumerate(indices):
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(lowered):
            raise ValueError(f"{plan.objective!r}.choose_saved()[{k}] = {i!r} is not a node index "
                             f"(0 to {len(lowered) - 1})")
        if cls[i] & (_C.C_REQUIRED_FW | _C.C_INPUT):
            continue
        # Not required by the forward, but the forward can compute it (it
        # depends on no tangent or backward seed), as torch's extraction does
        # for any saved value: the planner's roles say which nodes those are
        # (an input that is not a primal or forward seed -- a tangent -- is not).
        if roles is None:
            roles = plan_roles(chosen.decision, unsafe, plan.torch.seeded(lowered))
        if roles[i] in (_C.PLAN_ROLE_BACKWARD, _C.PLAN_ROLE_INPUT) or lowered.kind[i] == _C.KIND_OUTPUT:
            raise ValueError(f"{plan.objective!r}.choose_saved()[{k}]: node {i} ({lowered.name(i)!r}) is not "
                             "computed by the forward, so it cannot be saved")
    return list(dict.fromkeys(indices))


__all__ = ["Decided", "check_saved", "decide", "decide_plan", "plan_inputs"]
