"""Why a value was saved, recomputed, or left in the forward.

Reads the partition's own :class:`fxcut.route.plan.Plan` (the same dead-code
elimination and CSE, with ``num_fwd_outputs``, the same memory budget and
solver, the same objective) and runs the same lower -> decide steps as the
partition, so each account is of the decision the partitioner makes --
the budget pass's final cut included -- on the graph it makes it on.
Nothing is written to the joint graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch.fx as fx

import fxcut._C as _C
from .partition import Routed
from .route.decide import decide
from .route.lower import lower_plan
from .route.plan import Plan, make_plan
from .solve.account import Placement, accounts, placement
from .solve.budget import BudgetDecision
from .solve.memory import MemoryEstimate, simulate
from .solve.peakplan import PeakPlanner
from .torchrules.adapter import LoweredGraph, running_torch


class UnknownNodeError(LookupError):
    """No node of that name in the (prepared) joint graph."""


def explain_value(
    joint_module: fx.GraphModule,
    name: str,
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
    plan: Plan | None = None,
    **_: Any,
) -> dict[str, Any]:
    """The decision for the joint-graph node called ``name``, with the rule
    that made it (see :func:`explain_values`)."""
    return explain_values(joint_module, [name], num_fwd_outputs=num_fwd_outputs,
                          static_lifetime_input_indices=static_lifetime_input_indices, plan=plan)[0]


def partition_decision(plan: Plan) -> tuple[BudgetDecision[LoweredGraph], list[int]]:
    """The partition's decision under ``plan`` and the node indices it saves
    (the objective's choice when the plan has one): the route's lower ->
    decide steps, read only."""
    chosen, saved, _ = decide(plan, lower_plan(plan))
    return chosen, saved


def explain_values(
    joint_module: fx.GraphModule,
    names: Sequence[str] | None = None,
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
    plan: Plan | None = None,
    **_: Any,
) -> list[dict[str, Any]]:
    """The decision for each named node (every node when ``names`` is None)
    from one partition decision -- the partition's ``plan`` (made from the
    arguments when None) -- on the graph as the partitioner prepares it.
    ``joint_module`` is not modified.  Each account names the budget and
    the stage that decided (``budget``, ``stage``).  Raises
    :class:`UnknownNodeError` naming the first name that is not a node of
    the prepared graph."""
    if plan is None:
        plan = make_plan(joint_module, running_torch()[0], num_fwd_outputs=num_fwd_outputs,
                         static_lifetime_input_indices=static_lifetime_input_indices)
    before = {n.name for n in plan.graph.nodes}
    chosen, saved = partition_decision(plan)
    return _accounts(chosen, saved, plan.num_fwd_outputs, names, before)


def explain_routed(routed: Routed, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """:func:`explain_values` for a partition already made: the accounts of
    the decision its route carried out (:func:`fxcut.partition.partition`
    returns it), without deciding again."""
    return _accounts(routed.decision, routed.saved, routed.plan.num_fwd_outputs, names, set())


def _accounts(chosen: BudgetDecision[LoweredGraph], saved: list[int], num_fwd_outputs: int, names: Sequence[str] | None,
              before: set[str]) -> list[dict[str, Any]]:
    """The accounts of ``names`` under ``chosen``; ``before``: the names of
    the graph before dead-code elimination and CSE (to say why a name is
    missing)."""
    nodes = chosen.decision.arrays.nodes
    index = {n.name: i for i, n in enumerate(nodes) if n.op != "output"}
    wanted = list(index) if names is None else list(names)
    for name in wanted:
        if name not in index and name in before:
            raise UnknownNodeError(
                f"{name!r} is not in the graph the partitioner sees: dead code, or a duplicate "
                "that common-subexpression elimination merged"
            )
        if name not in index:
            close = sorted(n for n in index if n.startswith(name.rstrip("0123456789_")))[:8]
            raise UnknownNodeError(
                f"no node named {name!r} in the joint graph"
                + (f"; similar: {', '.join(close)}" if close else "")
            )
    return accounts(chosen, saved, num_fwd_outputs, [index[name] for name in wanted])


@dataclass(frozen=True)
class PlanFigures:
    """A memory plan set against torch on the graph it planned, every figure
    from one memory model (the plan's): the plan's decision, torch's at the
    same b (``activation_memory_budget=b``) and torch's at its default
    budget (the decision the plan starts from).  fxcut's b bounds the peak
    (b=1: no higher than torch's default decision, b=0: the lowest the
    search finds); torch's bounds the bytes it saves, so the same number
    means different things: this is the comparison at the same number."""

    budget: float
    default_budget: float
    memory_model: str
    plan: MemoryEstimate
    torch_same_budget: MemoryEstimate
    torch_default: MemoryEstimate
    #: torch's decision at the same b: node indices it saves, and the decision
    torch_saved: list[int]
    torch_decision: BudgetDecision[LoweredGraph]

    def as_dict(self) -> dict[str, Any]:
        """Plain data: peak and recompute FLOPs of each side (bytes, FLOPs)."""
        def side(e: MemoryEstimate, budget: float) -> dict[str, Any]:
            return {"budget": budget, "peak_bytes": e.peak_bytes, "recompute_flops": e.recompute_flops,
                    "saved_bytes": e.saved_bytes}

        return {"memory_model": self.memory_model, "plan": side(self.plan, self.budget),
                "torch_same_budget": side(self.torch_same_budget, self.budget),
                "torch_default": side(self.torch_default, self.default_budget)}


def plan_figures(routed: Routed) -> PlanFigures:
    """:class:`PlanFigures` of a partition made with a peak plan
    (``routed``: the route of a partition whose objective is a
    :class:`~fxcut.solve.peakplan.PeakPlanner`), read from the route: no
    second plan.  The memory model is the plan's, its FLOPs torch's."""
    planner = routed.plan.objective
    if not isinstance(planner, PeakPlanner):
        raise ValueError("plan_figures: this partition made no memory plan (its objective is not a PeakPlanner)")
    plan, lowered, nfo = routed.plan, routed.decision.arrays, routed.plan.num_fwd_outputs
    b = planner.memory_budget
    at_b = plan.budget_pass(lowered, b)
    inputs = plan.torch.model_inputs(lowered, planner.memory_model)

    def model(saved: Sequence[int]) -> MemoryEstimate:
        return simulate(lowered, list(saved), nfo, inputs, timeline=True)

    return PlanFigures(b, plan.budget, planner.memory_model, model(routed.saved), model(at_b.saved),
                       model(routed.decision.saved), list(at_b.saved), at_b)


def _plan_why(facts: dict[str, Any], role: int | None) -> str:
    """Why a plan put a node where it did, in the plan's terms (a plan's
    choice is not torch's minimum cut)."""
    if facts["saved"]:
        if role == _C.PLAN_ROLE_SAVE:
            reason = facts["banned"] or "recomputing it would draw other random numbers or read mutated state"
            return f"saved: the plan may not recompute it ({reason})"
        return ("saved: the plan's choice: within its peak limit, keeping it costs less recompute than "
                "recomputing it in the backward")
    if facts["in_forward"] and facts["in_backward"]:
        if role == _C.PLAN_ROLE_RECOMPUTE:
            return f"recomputed in backward: the plan must recompute it (tagged {facts['tag'] or 'to be recomputed'})"
        return ("recomputed in backward: the plan's choice: freed after the forward and recomputed, to hold "
                "the peak within its limit")
    why: str = facts["why"]
    return why


def _place(facts: dict[str, Any]) -> str:
    """Where an account puts its node, in a word or two."""
    if facts["saved"]:
        return "saved"
    if facts["in_forward"] and facts["in_backward"]:
        return "recomputed"
    if facts["in_backward"]:
        return "backward"
    return "forward only" if facts["in_forward"] else "in neither graph"


def explain_plan(routed: Routed, names: Sequence[str] | None = None,
                 figures: PlanFigures | None = None) -> list[dict[str, Any]]:
    """The accounts of a memory plan's decision (``routed``: as for
    :func:`plan_figures`), each node where the plan put it and why in the
    plan's terms, beside torch's accounts of it at the same b
    (``"torch_same_budget"``) and at its default budget
    (``"torch_default"``); ``"place"``: where each side puts it.
    Raises :class:`UnknownNodeError` as :func:`explain_values` does."""
    figures = figures if figures is not None else plan_figures(routed)
    nfo = routed.plan.num_fwd_outputs
    planned = _accounts(routed.decision, routed.saved, nfo, names, set())
    at_b = _accounts(figures.torch_decision, figures.torch_saved, nfo, names, set())
    default = _accounts(routed.decision, routed.decision.saved, nfo, names, set())
    planner = routed.plan.objective
    problem = planner.last_problem if isinstance(planner, PeakPlanner) else None
    roles = problem.roles if problem is not None and problem.arrays is routed.decision.arrays else None
    index = {n.name: i for i, n in enumerate(routed.decision.arrays.nodes)}
    b, b0 = figures.budget, figures.default_budget
    for facts, theirs, theirs0 in zip(planned, at_b, default):
        role = roles[index[facts["node"]]] if roles is not None else None
        facts["why"] = _plan_why(facts, role)
        facts["place"] = _place(facts)
        facts["torch_same_budget"] = {"budget": b, "place": _place(theirs), "why": theirs["why"]}
        facts["torch_default"] = {"budget": b0, "place": _place(theirs0), "why": theirs0["why"]}
        head = facts["text"].splitlines()
        facts["text"] = "\n".join([head[0], f"  the plan at b={b:g}: {facts['why']}",
                                   f"  torch at the same b ({b:g}): {theirs['why']}",
                                   f"  torch at its default budget ({b0:g}): {theirs0['why']}", *head[2:]])
    return planned


__all__ = ["Placement", "PlanFigures", "UnknownNodeError", "explain_plan", "explain_routed", "explain_value",
           "explain_values", "partition_decision", "placement", "plan_figures"]
