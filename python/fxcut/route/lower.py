"""The route's lowering step: the plan's graph as the graph array the decision reads.

Lowering itself reads fx nodes, and so is torch's side
(:mod:`fxcut.torchrules.lower`, through the call's adapter); this step
lowers the plan's joint graph as its planned dead-code elimination and CSE
will leave it, without modifying the graph.
"""

from __future__ import annotations

from ..torchrules.adapter import LoweredGraph
from .plan import Plan


def lower_plan(plan: Plan) -> LoweredGraph:
    """The graph array of ``plan``'s joint graph as the planned dead-code
    elimination and CSE will leave it (the graph itself is not modified)."""
    return plan.torch.lower(plan.graph, plan.prep)


__all__ = ["lower_plan"]
