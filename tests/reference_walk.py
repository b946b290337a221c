"""A plain-Python statement of the ZeRO-3 parameter-alias walk, for tests.

Written from the behaviour fxcut promises (see ``fxcut.zero3``'s issue
text), not from fxcut's code, so that a differential test compares two
independent readings of the same rule:

* the primal placeholders are the placeholders whose target names no
  tangent and no forward/backward seed or offset, taken in graph order;
* of each ``(arg_idx, ds_id, shape)`` entry only ``arg_idx`` is used, as a
  position among those primals;
* every node lacking ``meta["ac_graph_id"]`` gets 1; present values stay;
* visiting nodes in graph order, a ``call_function`` node whose target is in
  ``no_copy_ops`` or is a cast, and one of whose *positional, top-level*
  arguments is a parameter placeholder or a node tagged earlier in the walk,
  gets ``meta["recompute"] = MUST_RECOMPUTE`` (replacing any earlier value);
* nothing else is written.

No input validation: the tests only feed it well-formed graphs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any

import torch
import torch.fx as fx
from torch.utils.checkpoint import CheckpointPolicy

_NOT_PRIMAL_MARKERS = ("tangents", "fwd_seed", "fwd_base_offset", "bwd_seed", "bwd_base_offset")


def is_primal_placeholder(node: fx.Node) -> bool:
    if node.op != "placeholder":
        return False
    name = str(node.target)
    return not any(marker in name for marker in _NOT_PRIMAL_MARKERS)


def deepcompile_cast(node: fx.Node) -> bool:
    """The two cast forms DeepCompile recognises, as a bare predicate."""
    if node.op != "call_function":
        return False
    if node.target == torch.ops.prims.convert_element_type.default:
        return True
    if node.target == torch.ops.aten._to_copy.default:
        return sorted(node.kwargs.keys()) == ["dtype"]
    return False


def reference_param_alias_walk(
    graph: fx.Graph,
    param_indices: Iterable[Any],
    no_copy_ops: Collection[Any],
    is_cast: Callable[[fx.Node], bool] = deepcompile_cast,
) -> list[fx.Node]:
    """Tag ``graph`` in place as described above; return the tagged nodes."""
    primals = [node for node in graph.nodes if is_primal_placeholder(node)]
    # Nodes are compared by identity: fx.Node hashes by identity anyway, but
    # being explicit keeps this independent of that detail.
    marked: set[int] = {id(primals[entry[0]]) for entry in param_indices}
    tagged: list[fx.Node] = []
    for node in graph.nodes:
        if "ac_graph_id" not in node.meta:
            node.meta["ac_graph_id"] = 1
        if node.op != "call_function":
            continue
        aliasing = node.target in no_copy_ops or is_cast(node)
        if not aliasing:
            continue
        if any(isinstance(arg, fx.Node) and id(arg) in marked for arg in node.args):
            node.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
            marked.add(id(node))
            tagged.append(node)
    return tagged
