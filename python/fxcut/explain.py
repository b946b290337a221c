"""Why a value was saved, recomputed, or left in the forward."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.fx as fx
import torch.utils._pytree as pytree

from . import _C
from .core import Decision, decide
from .report import value_nbytes

_TAG_NAMES = {0: "MUST_SAVE", 1: "PREFER_SAVE", 2: "MUST_RECOMPUTE", 3: "PREFER_RECOMPUTE",
              4: "MUST_CPU_OFFLOAD", 5: "PREFER_CPU_OFFLOAD"}


class UnknownNodeError(LookupError):
    """No node of that name in the (prepared) joint graph."""


def _placement(graph: fx.Graph, saved: set[fx.Node], num_fwd_outputs: int) -> tuple[set[fx.Node], set[fx.Node]]:
    """The nodes torch's module extraction puts in the forward and in the
    backward, given the saved values: the forward computes its outputs and
    the saved values from the primals; the backward computes the gradients
    from the saved values and the tangents."""
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    leaves = pytree.arg_tree_leaves(*output.args)
    fw_outputs = [x for x in leaves[:num_fwd_outputs] if isinstance(x, fx.Node)]
    bw_outputs = [x for x in leaves[num_fwd_outputs:] if isinstance(x, fx.Node)]

    def ancestors(roots: list[fx.Node], stop: set[fx.Node]) -> set[fx.Node]:
        seen: set[fx.Node] = set()
        stack = list(roots)
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if node not in stop:
                stack.extend(node.all_input_nodes)
        return seen

    forward = ancestors(fw_outputs + list(saved), set())
    backward = ancestors(bw_outputs, saved)
    return forward, backward


def explain_value(
    joint_module: fx.GraphModule,
    name: str,
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
    **_: Any,
) -> dict[str, Any]:
    """The decision for the joint-graph node called ``name``, with the rule
    that made it (see :func:`explain_values`)."""
    return explain_values(joint_module, [name], num_fwd_outputs=num_fwd_outputs,
                          static_lifetime_input_indices=static_lifetime_input_indices)[0]


def explain_values(
    joint_module: fx.GraphModule,
    names: Sequence[str] | None = None,
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
    **_: Any,
) -> list[dict[str, Any]]:
    """The decision for each named node (every node when ``names`` is None)
    from one partition decision.  The graph is prepared as the partitioner
    prepares it (dead code removed, CSE when config.cse); ``joint_module`` is
    modified (pass a copy).  Raises :class:`UnknownNodeError` naming the
    first name that is not a node of the prepared graph."""
    from torch._functorch import config
    from torch._functorch.partitioners import fx_graph_cse

    graph = joint_module.graph
    before = {n.name for n in graph.nodes}
    graph.eliminate_dead_code()
    if config.cse:
        graph = fx_graph_cse(graph)
    d = decide(graph, num_fwd_outputs=num_fwd_outputs, static_lifetime_input_indices=static_lifetime_input_indices)
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
    has_backward = d.n_required_bw > 0
    saved_nodes = set(d.saved_nodes) if has_backward else set()
    forward, backward = _placement(graph, saved_nodes, num_fwd_outputs) if has_backward else (set(graph.nodes), set())
    return [_explain_node(d, index[name], saved_nodes, forward, backward, has_backward) for name in wanted]


def _explain_node(d: Decision, i: int, saved_nodes: set[fx.Node], forward: set[fx.Node], backward: set[fx.Node],
                  has_backward: bool) -> dict[str, Any]:
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
        "tag": _TAG_NAMES.get(tag),
        "banned": d.banned(i),
        "dist_from_bw": d.dist_from_bw[i] if cls & _C.C_REQUIRED_FW else None,
        "weight": None if weight == _C.WEIGHT_NONE else ("inf" if weight == _C.WEIGHT_INF else weight),
        "saved": node in saved_nodes,
        "in_forward": node in forward,
        "in_backward": node in backward and node not in saved_nodes,
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
    saved_inputs = [n.name for n in node.all_input_nodes if n in saved_nodes]
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
