"""Why a value was saved, recomputed, or left in the forward.

Reads the partition's own :class:`fxcut.plan.Plan` (the same dead-code
elimination and CSE, with ``num_fwd_outputs``, the same memory budget and
solver, the same objective) and runs the same lower -> core steps as the
partition, so each account is of the decision the partitioner makes --
the budget pass's final cut included -- on the graph it makes it on.
Nothing is written to the joint graph.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import torch.fx as fx

from . import _C
from .budget import BudgetDecision, decide_plan
from .core import Decision
from .lower import TAG_NAMES, GraphArrays, lower_plan, value_nbytes
from .plan import Plan, make_plan


class UnknownNodeError(LookupError):
    """No node of that name in the (prepared) joint graph."""


class Placement(NamedTuple):
    """Node indices by where torch's module extraction puts them."""

    saved: set[int]  # saved for backward, and used there
    forward: set[int]
    backward: set[int]  # the saved values included


def placement(arrays: GraphArrays, saved: Iterable[int], num_fwd_outputs: int) -> Placement:
    """Where torch's module extraction puts each node, given the decision's
    saved values: the backward computes the gradients from the saved values
    and the tangents; a saved value it does not reach is dropped (the
    extraction prunes saved values the backward never reads); the forward
    computes its outputs and the remaining saved values from the primals.
    Read from the graph array, so it holds for the graph as dead-code
    elimination and CSE will leave it."""
    in_ptr, in_idx = arrays.in_ptr, arrays.in_idx

    def ancestors(roots: Iterable[int], stop: set[int]) -> set[int]:
        seen: set[int] = set()
        stack = [i for i in roots if i >= 0]
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            if i not in stop:
                stack.extend(in_idx[in_ptr[i]:in_ptr[i + 1]])
        return seen

    outputs = arrays.outputs
    chosen = set(saved)
    backward = ancestors(outputs[num_fwd_outputs:], chosen)
    kept = chosen & backward
    forward = ancestors([*outputs[:num_fwd_outputs], *kept], set())
    return Placement(kept, forward, backward)


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
    core steps, read only."""
    from .build import check_saved

    chosen = decide_plan(plan, lower_plan(plan))
    saved = chosen.saved if plan.objective is None else check_saved(
        plan, chosen, plan.objective.choose_saved(plan, chosen))
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
    graph = plan.graph
    num_fwd_outputs = plan.num_fwd_outputs
    before = {n.name for n in graph.nodes}
    chosen, saved = partition_decision(plan)
    d = chosen.decision
    arrays = d.arrays
    index = {n.name: i for i, n in enumerate(d.arrays.nodes) if n.op != "output"}
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
    has_backward = chosen.stage != "no_backward" and d.n_required_bw > 0
    where = placement(arrays, saved, num_fwd_outputs) if has_backward else Placement(set(), set(range(len(arrays))), set())
    accounts = [_explain_node(d, index[name], where, has_backward) for name in wanted]
    for facts in accounts:
        facts["budget"], facts["stage"] = chosen.budget, chosen.stage
    return accounts


def _explain_node(d: Decision, i: int, where: Placement, has_backward: bool) -> dict[str, Any]:
    saved, forward, backward = where
    node = d.arrays.nodes[i]
    name = node.name
    cls = d.node_class[i]
    tag = int.from_bytes(d.tag[i : i + 1], "little", signed=True)
    weight = d.weight[i]
    facts = {
        "node": name,
        "op": str(node.target),
        "bytes": value_nbytes(node),
        "required_forward": bool(cls & _C.C_REQUIRED_FW),
        "required_backward": bool(cls & _C.C_REQUIRED_BW),
        "tag": TAG_NAMES.get(tag),
        "banned": d.banned(i),
        "dist_from_bw": d.dist_from_bw[i] if cls & _C.C_REQUIRED_FW else None,
        "weight": None if weight == _C.WEIGHT_NONE else ("inf" if weight == _C.WEIGHT_INF else weight),
        "saved": i in saved,
        "in_forward": i in forward,
        "in_backward": i in backward and i not in saved,
    }
    if not has_backward:
        why = "forward only: the graph computes no gradients"
    elif facts["saved"]:
        why = (f"saved: its value edge (weight {weight}) is part of the minimum cut; "
               "saving it is cheaper than recomputing what the backward needs from it")
        if facts["banned"]:
            why += f", and it may not be recomputed ({facts['banned']})"
    elif facts["in_forward"] and facts["in_backward"]:
        if cls & _C.C_MUST_RECOMPUTE:
            why = f"recomputed in backward: tagged {facts['tag']}"
        else:
            why = "recomputed in backward: recomputing it from saved values costs less than saving it"
    elif facts["in_backward"]:
        if cls & _C.C_TANGENTS_CLOSURE:
            why = "computed in backward: it depends on the incoming gradients (tangents)"
        else:
            why = "computed in backward only: the forward does not need it, the backward computes it from saved values"
    elif facts["in_forward"]:
        why = "forward only: the backward does not use it"
    else:
        why = "in neither graph"
    facts["why"] = why
    a = d.arrays
    saved_inputs = [a.nodes[j].name for j in dict.fromkeys(a.in_idx[a.in_ptr[i]:a.in_ptr[i + 1]]) if j in saved]
    facts["saved_inputs"] = saved_inputs
    lines = [f"{name} = {facts['op']}  ({facts['bytes']} bytes)", f"  {why}"]
    lines.append(
        "  forward: {fw}  backward: {bw}  tag: {tag}  banned: {ban}  dist_from_bw: {dist}  weight: {w}".format(
            fw="yes" if facts["in_forward"] else "no",
            bw="yes" if facts["in_backward"] else "no",
            tag=facts["tag"] or "-",
            ban=facts["banned"] or "no",
            dist=facts["dist_from_bw"] if facts["dist_from_bw"] is not None else "-",
            w=facts["weight"] if facts["weight"] is not None else "-",
        )
    )
    if saved_inputs and facts["in_backward"]:
        lines.append(f"  computed in backward from the saved values: {', '.join(saved_inputs)}")
    facts["text"] = "\n".join(lines)
    return facts
