"""Accounts of a decision, node by node: where each value runs and the rule that put it there.

Read from the core's :class:`~fxcut.solve.core.Decision` and the saved node
indices, so an account describes exactly the decision it is given -- the
partition's own (verify mode's explanation of a mismatch, ``fxcut
explain``, the HTML page) -- without deciding again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import fxcut._C as _C
from .arrays import TAG_NAMES, GraphArrays
from .budget import BudgetDecision
from .core import Decision


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


def accounts(chosen: BudgetDecision[Any], saved: Sequence[int], num_fwd_outputs: int,
             indices: Iterable[int] | None = None) -> list[dict[str, Any]]:
    """The account of each node index in ``indices`` (every node but the
    output when None) under the decision ``chosen`` saving ``saved``; each
    names the budget and the stage that decided (``budget``, ``stage``)."""
    d = chosen.decision
    arrays = d.arrays
    has_backward = chosen.stage != "no_backward" and d.n_required_bw > 0
    where = (placement(arrays, saved, num_fwd_outputs) if has_backward
             else Placement(set(), set(range(len(arrays))), set()))
    wanted = [i for i in range(len(arrays)) if arrays.kind[i] != _C.KIND_OUTPUT] if indices is None else indices
    out = []
    for i in wanted:
        facts = account(d, i, where, has_backward)
        facts["budget"], facts["stage"] = chosen.budget, chosen.stage
        out.append(facts)
    return out


def _why(facts: dict[str, Any], cls: int, weight: int, has_backward: bool) -> str:
    """Why the node sits where the decision put it, in one sentence."""
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
    return why


def account(d: Decision[Any], i: int, where: Placement, has_backward: bool) -> dict[str, Any]:
    """Node ``i``'s entry in the decision's account: where it went, the facts
    that put it there, why in a sentence, and the text the report prints."""
    saved, forward, backward = where
    arrays = d.arrays
    name = arrays.name(i)
    cls = d.node_class[i]
    tag = int.from_bytes(d.tag[i : i + 1], "little", signed=True)
    weight = d.weight[i]
    facts = {
        "node": name,
        "op": arrays.target(i),
        "bytes": max(0, int(arrays.nbytes[i])),
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
    why = _why(facts, cls, weight, has_backward)
    facts["why"] = why
    a = d.arrays
    saved_inputs = [a.name(j) for j in dict.fromkeys(a.in_idx[a.in_ptr[i]:a.in_ptr[i + 1]]) if j in saved]
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


__all__ = ["Placement", "account", "accounts", "placement"]
