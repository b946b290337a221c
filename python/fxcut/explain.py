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
from typing import Any

import torch.fx as fx

from .partition import Routed
from .route.decide import decide
from .route.lower import lower_plan
from .route.plan import Plan, make_plan
from .solve.account import Placement, accounts, placement
from .solve.budget import BudgetDecision


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


def partition_decision(plan: Plan) -> tuple[BudgetDecision, list[int]]:
    """The partition's decision under ``plan`` and the node indices it saves
    (the objective's choice when the plan has one): the route's lower ->
    decide steps, read only."""
    chosen, saved = decide(plan, lower_plan(plan))
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
        plan = make_plan(joint_module, num_fwd_outputs=num_fwd_outputs,
                         static_lifetime_input_indices=static_lifetime_input_indices)
    before = {n.name for n in plan.graph.nodes}
    chosen, saved = partition_decision(plan)
    return _accounts(chosen, saved, plan.num_fwd_outputs, names, before)


def explain_routed(routed: Routed, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """:func:`explain_values` for a partition already made: the accounts of
    the decision its route carried out (:func:`fxcut.partition.partition`
    returns it), without deciding again."""
    return _accounts(routed.decision, routed.saved, routed.plan.num_fwd_outputs, names, set())


def _accounts(chosen: BudgetDecision, saved: list[int], num_fwd_outputs: int, names: Sequence[str] | None,
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


__all__ = ["Placement", "UnknownNodeError", "explain_routed", "explain_value", "explain_values", "partition_decision",
           "placement"]
