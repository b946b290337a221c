"""Where a real partition put each node, read from the modules it extracted.

The oracle of the explain and HTML tests: it knows nothing of fxcut's
decision or of the placement those modules compute, only the forward and
backward graph modules that torch's partitioner returned.
"""

from __future__ import annotations

import torch.fx as fx

#: The four places a call_function node of the joint graph can end up.
SAVED, RECOMPUTED, BACKWARD, FORWARD = "saved", "recomputed", "computed in backward", "forward only"


def _saved_names(fw: fx.GraphModule, num_fwd_outputs: int) -> set[str]:
    """The forward's extra outputs past the user's: the values saved for backward."""
    output = next(n for n in reversed(fw.graph.nodes) if n.op == "output")
    return {n.name for n in output.args[0][num_fwd_outputs:] if isinstance(n, fx.Node)}


def partition_placement(cap) -> dict[str, str]:
    """Each call_function node's place in torch's own partition of ``cap``,
    and every saved value's (inputs the forward saves included)."""
    fw, bw = cap.partition()  # torch's min_cut_rematerialization_partition, on a fresh copy
    saved = _saved_names(fw, cap.num_fwd_outputs)
    fw_names = {n.name for n in fw.graph.nodes if n.op == "call_function"}
    bw_names = {n.name for n in bw.graph.nodes if n.op == "call_function"}
    placement = dict.fromkeys(saved, SAVED)
    for name in fw_names | bw_names:
        if name in saved:
            placement[name] = SAVED
        elif name in fw_names and name in bw_names:
            placement[name] = RECOMPUTED
        elif name in bw_names:
            placement[name] = BACKWARD
        else:
            placement[name] = FORWARD
    return placement


def graph_state(gm: fx.GraphModule) -> tuple[str, list[str], list[dict[str, object]], list[list[str]]]:
    """What a read-only function must leave as it was: code, nodes, meta, users."""
    nodes = list(gm.graph.nodes)
    return gm.code, [n.name for n in nodes], [dict(n.meta) for n in nodes], [[u.name for u in n.users] for n in nodes]
