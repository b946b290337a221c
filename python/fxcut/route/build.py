"""The route's last step: the decision carried out, the forward and backward modules built.

:func:`build` is the only step that writes to the user's joint graph,
through the call's adapter (:mod:`fxcut.torchrules.build`): the plan's
dead-code elimination and CSE applied (a graph that does not end as
planned is a gap: the guard restores it and torch decides), the recompute
tags the core's passes changed written back, and the two modules built
from the saved values.  A graph without a backward goes to torch's
``default_partition``.  The caller (the guard) restores the joint graph if
this raises.
"""

from __future__ import annotations

import logging
from typing import Any

from ..solve.budget import BudgetDecision
from ..solve.core import Decision
from ..torchrules.adapter import LoweredGraph, PartitionResult
from .plan import Plan

log = logging.getLogger("fxcut")


def build(plan: Plan, chosen: BudgetDecision[LoweredGraph], saved: list[int], joint_inputs: Any) -> PartitionResult:
    """Carry out ``chosen`` with the saved node indices ``saved`` (the
    decision's own, or the plan's objective's): DCE and CSE in place, the
    recompute tags, then the modules."""
    torch = plan.torch
    lowered = chosen.arrays
    # As torch reads them: the tags on the graph, before the passes.
    recomputable = torch.recomputable_rng(lowered)
    saved_values = lowered.nodes_at(saved)
    torch.apply_preparation(plan.joint_module, plan.prep, lowered)
    if chosen.stage == "knapsack" and torch.config("visualize_memory_budget_pareto"):
        log.warning("fxcut: visualize_memory_budget_pareto is torch's SVG; fxcut.memory_pareto() "
                    "sweeps the budget and plots it")
    decision = chosen.decision
    torch.write_back_tags(lowered, decision)
    if chosen.stage == "no_backward":
        return torch.default_partition(plan.joint_module, joint_inputs, plan.num_fwd_outputs, plan.static_indices)
    _log_decision(decision, chosen.seconds, budget=chosen.budget, stage=chosen.stage,
                  level=logging.INFO if plan.objective is None else logging.DEBUG)
    return torch.build_modules(plan.joint_module, saved_values, plan.num_fwd_outputs, plan.static_indices,
                               recomputable)


def _log_decision(decision: Decision[LoweredGraph], seconds: dict[str, float], *, budget: float, stage: str,
                  level: int = logging.INFO) -> None:
    """The one INFO line of a partition (DEBUG under a plan with an
    objective: torch's decision it started from; the plan's own line is
    :mod:`fxcut.route.report`'s), and the bans per rule at DEBUG."""
    lower = decision.arrays.seconds
    core = sum(v for k, v in seconds.items() if k != "lower")
    log.log(
        level, "decision: %d nodes, %d needed by backward, %d saved, cut %d (lower %.1f ms, core %.1f ms)",
        len(decision.arrays), decision.n_required_bw, len(decision.saved), decision.cut_value,
        lower * 1e3, core * 1e3,
    )
    if log.isEnabledFor(logging.DEBUG):
        counts = decision.ban_counts()
        log.debug("bans: %s", ", ".join(f"{reason} {n}" for reason, n in counts.items()) or "none")
        if budget < 1:
            log.debug("budget %g decided by the %s pass", budget, stage)


__all__ = ["build"]
