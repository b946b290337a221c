"""Why a value was saved, recomputed, or left in the forward."""

from __future__ import annotations

from typing import Any

import torch.fx as fx

from . import _C
from .partition import decide
from .report import value_nbytes

_TAG_NAMES = {0: "MUST_SAVE", 1: "PREFER_SAVE", 2: "MUST_RECOMPUTE", 3: "PREFER_RECOMPUTE",
              4: "MUST_CPU_OFFLOAD", 5: "PREFER_CPU_OFFLOAD"}


def explain_value(
    joint_module: fx.GraphModule,
    name: str,
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
    **_: Any,
) -> dict[str, Any]:
    """The decision for the joint-graph node called ``name``, with the rule
    that made it.  The graph is prepared as the partitioner prepares it
    (dead code removed, CSE when config.cse) on a copy."""
    from torch._functorch import config
    from torch._functorch.partitioners import fx_graph_cse

    graph = joint_module.graph
    graph.eliminate_dead_code()
    if config.cse:
        graph = fx_graph_cse(graph)
    d = decide(graph, num_fwd_outputs=num_fwd_outputs, static_lifetime_input_indices=static_lifetime_input_indices)
    names = {n.name: i for i, n in enumerate(d.arrays.nodes)}
    if name not in names:
        close = sorted(n for n in names if n.startswith(name.rstrip("0123456789_")))[:8]
        raise KeyError(f"no node named {name!r} in the joint graph" + (f"; similar: {', '.join(close)}" if close else ""))
    i = names[name]
    node = d.arrays.nodes[i]
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
        "saved": bool(cls & _C.C_SAVED),
        "in_backward": bool(cls & _C.C_SINK_SIDE),
    }
    if facts["saved"]:
        why = (f"saved: its value edge (weight {weight}) is part of the minimum cut; "
               "saving it is cheaper than recomputing what the backward needs from it")
        if facts["banned"]:
            why += f", and it may not be recomputed ({facts['banned']})"
    elif cls & _C.C_REQUIRED_BW and cls & _C.C_TANGENTS_CLOSURE:
        why = "computed in backward: it depends on the incoming gradients (tangents)"
    elif cls & _C.C_MUST_RECOMPUTE:
        why = f"recomputed in backward: tagged {facts['tag']}"
    elif cls & _C.C_SINK_SIDE:
        why = "recomputed in backward: its inputs are saved or recomputed, which costs less than saving it"
    elif cls & _C.C_REQUIRED_FW:
        why = "forward only: the backward needs nothing that only it can provide"
    else:
        why = "not part of the forward"
    facts["why"] = why
    saved_inputs = [n.name for n in node.all_input_nodes if d.node_class[d.arrays.index[n]] & _C.C_SAVED]
    facts["saved_inputs"] = saved_inputs
    lines = [f"{name} = {facts['op']}  ({facts['bytes']} bytes)", f"  {why}"]
    lines.append(
        "  forward: {fw}  backward: {bw}  tag: {tag}  banned: {ban}  dist_from_bw: {dist}  weight: {w}".format(
            fw="yes" if facts["required_forward"] else "no",
            bw="yes" if facts["required_backward"] else "no",
            tag=facts["tag"] or "-",
            ban=facts["banned"] or "no",
            dist=facts["dist_from_bw"] if facts["dist_from_bw"] is not None else "-",
            w=facts["weight"] if facts["weight"] is not None else "-",
        )
    )
    if saved_inputs:
        lines.append(f"  saved inputs it can be recomputed from: {', '.join(saved_inputs)}")
    facts["text"] = "\n".join(lines)
    return facts
