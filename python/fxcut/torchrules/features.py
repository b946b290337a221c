"""Graph features fxcut does not model on the running release: torch decides such graphs.

One pass over the nodes (:func:`unmodelled_feature`), only for the rules the
running release has (``Rules.splits_control_deps``,
``effectful_leaves_only``, ``device_values_are_free``,
``epilogue_mutated_inputs_unsaveable``).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx

from .versions import Rules


def unmodelled_feature(joint_module: fx.GraphModule, rules: Rules) -> str | None:
    """Why fxcut cannot decide this graph as the running torch would, or
    None when it can (one pass over the nodes, only for the rules the
    running release has)."""
    control_deps = _control_deps_hop() if rules.splits_control_deps else None
    with_effects = getattr(torch.ops.higher_order, "with_effects", None) if rules.effectful_leaves_only else None
    devices = rules.device_values_are_free
    epilogue = rules.epilogue_mutated_inputs_unsaveable
    if control_deps is None and with_effects is None and not devices and not epilogue:
        return None
    torch_release = f"torch {rules.release}"
    for node in joint_module.graph.nodes:
        meta = node.meta
        if epilogue and meta.get("aot_runtime_epilogue_input_mutation", False):
            return (f"input {node.name!r} is mutated after the forward, which {torch_release} "
                    "never saves; fxcut does not model that")
        if devices and isinstance(meta.get("val"), torch.device):
            return (f"node {node.name!r} has a torch.device value, which {torch_release} treats "
                    "as free and recomputable; fxcut does not model that")
        if node.op != "call_function":
            continue
        if control_deps is not None and node.target is control_deps:
            return (f"node {node.name!r} is a control_deps op, which {torch_release} splits "
                    "between forward and backward; fxcut does not model that split")
        if with_effects is not None and node.target is with_effects and _effects_unmodelled(node):
            return (f"effectful node {node.name!r} is tagged MUST_RECOMPUTE or has nested outputs, "
                    f"which {torch_release} handles differently; fxcut does not model that")
    return None


def _effects_unmodelled(node: fx.Node) -> bool:
    from torch.utils.checkpoint import CheckpointPolicy

    if node.meta.get("recompute") == CheckpointPolicy.MUST_RECOMPUTE:
        return True
    getitem = operator.getitem
    stack = [u for u in node.users if u.target is getitem]
    while stack:
        user = stack.pop()
        nested = [u for u in user.users if u.target is getitem]
        if nested and not isinstance(user.meta.get("val"), (tuple, list)):
            return True
        stack.extend(nested)
    return False


def _control_deps_hop() -> Any:
    try:
        from torch._inductor.fx_passes.control_dependencies import control_deps
    except ImportError:
        return None
    return control_deps


__all__ = ["unmodelled_feature"]
