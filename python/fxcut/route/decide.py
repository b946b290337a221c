"""The route's decision step: what the core decides for a plan, and what the plan saves.

:func:`decide` runs the C core's decision for a :class:`~fxcut.route.plan.Plan`
over its lowered graph, under the plan's budget, solver and options
(:func:`decide_plan`), then -- when the plan has an objective -- lets the
objective choose the saved values from that decision (checked by
:func:`check_saved`), and last hands the saved values to
:func:`fxcut.route.safety.safe_saved` (torch's decision warned about where
it recomputes a random op or a reader of mutated state; kept saved under
``safe_budget`` and for an objective).  Read only: nothing is written to
the graph before the build step.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import fxcut._C as _C
from ..solve.arrays import GraphArrays
from ..solve.budget import BudgetDecision, check_regions
from ..solve.roles import plan_roles
from .plan import Plan
from .safety import safe_saved


class Decided(NamedTuple):
    """The core's decision under a plan (torch's, under the plan's budget)
    and the saved node indices the modules are built from (the objective's
    where the plan has one)."""

    decision: BudgetDecision
    saved: list[int]


def decide(plan: Plan, arrays: GraphArrays) -> Decided:
    """The decision step of the route for ``plan`` lowered as ``arrays``."""
    chosen = decide_plan(plan, arrays)
    saved = chosen.saved if plan.objective is None else check_saved(
        plan, chosen, plan.objective.choose_saved(plan, chosen))
    return Decided(chosen, safe_saved(plan, chosen, saved))


def decide_plan(plan: Plan, arrays: GraphArrays) -> BudgetDecision:
    """The route's decision step: the C core's decision for ``plan`` over
    its lowered graph, under the plan's budget, solver and options (read
    only).  With region budgets, torch checks them once the forward is
    classified and before any cut: a budget-0 decision classifies without
    cutting.  Raises NotImplementedError for a graph shape the core does not
    model (the guard hands such a graph to torch)."""
    graph = plan.graph
    estimates = plan.estimates()
    if plan.regions:
        probe = plan.budget_pass(arrays, 0.0, estimates)
        if probe.stage != "no_backward":
            fw = probe.decision.node_class
            check_regions(
                plan.regions,
                plan.unannotated,
                lambda n: n.graph is not graph
                or (n in arrays.index and n.op == "call_function"
                    and bool(fw[arrays.index[n]] & _C.C_REQUIRED_FW)),
                plan.rules,
            )
    return plan.budget_pass(arrays, estimates=estimates)



def check_saved(plan: Plan, chosen: BudgetDecision, saved: Any) -> list[int]:
    """An objective's choice as node indices the forward computes; a
    ValueError naming the first that is not."""
    try:
        indices = list(saved)
    except TypeError:
        raise ValueError(f"{plan.objective!r}.choose_saved returned {saved!r}, not a list of node indices") from None
    cls = chosen.decision.node_class
    nodes = chosen.decision.arrays.nodes
    roles: bytes | None = None
    for k, i in enumerate(indices):
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(nodes):
            raise ValueError(f"{plan.objective!r}.choose_saved()[{k}] = {i!r} is not a node index "
                             f"(0 to {len(nodes) - 1})")
        if cls[i] & (_C.C_REQUIRED_FW | _C.C_INPUT):
            continue
        # Not required by the forward, but the forward can compute it (it
        # depends on no tangent or backward seed), as torch's extraction does
        # for any saved value: the planner's roles say which nodes those are
        # (an input that is not a primal or forward seed -- a tangent -- is not).
        if roles is None:
            roles = plan_roles(chosen.decision)
        if roles[i] in (_C.PLAN_ROLE_BACKWARD, _C.PLAN_ROLE_INPUT) or nodes[i].op == "output":
            raise ValueError(f"{plan.objective!r}.choose_saved()[{k}]: node {i} ({nodes[i].name!r}) is not "
                             "computed by the forward, so it cannot be saved")
    return list(dict.fromkeys(indices))


__all__ = ["Decided", "check_saved", "decide", "decide_plan"]
