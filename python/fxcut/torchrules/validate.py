"""The joint graph checked before any copy of torch's behaviour reads it, and the budget it asks for.

A graph fxcut is given wrong raises fxcut's own error naming what is wrong
(the node, the option) before lowering or any other copy runs
(:func:`check_nodes`); a node of a class fxcut's readers do not know is a
gap instead (:class:`~fxcut.torchrules.gate.TorchChanged`: torch decides).
:func:`resolve_budget` reads the memory budget the graph asks for, as torch
resolves it.
"""

from __future__ import annotations

from typing import Any

import torch.fx as fx

from .._numbers import check_number
from ..solve.arrays import KIND_OF_OP
from .budget import annotated_with, legacy_budget, region_budgets
from .gate import NODE_READERS, TorchChanged
from .versions import Rules


def resolve_budget(joint_module: fx.GraphModule, rules: Rules) -> tuple[float, list[float], list[fx.Node]]:
    """The memory budget as torch resolves it, in increasing precedence:
    the config, the first float ``meta["memory_budget"]``, a region
    annotation.  Also the region values and unannotated nodes, for
    :func:`fxcut.torchrules.budget.check_regions` once the forward is known."""
    budget = rules.config("activation_memory_budget")
    legacy = legacy_budget(joint_module.graph)
    if legacy is not None:
        budget = legacy
    regions, unannotated = region_budgets(joint_module, rules)
    for value in regions:
        try:
            check_number("region budget", value, 0.0, 1.0)
        except ValueError:
            raise ValueError(
                f"torch.autograd.graph.region_activation_memory_budget: the region budget {value!r} "
                f"(meta['custom'] of node {annotated_with(joint_module, value)!r}) must be a number "
                "in [0, 1]"
            ) from None
    if regions:
        budget = regions[0]
    return budget, regions, unannotated


def check_nodes(graph: fx.Graph) -> None:
    """One pass over the nodes before anything else: a graph that ends in
    an output node, fx ops only, callable call_function targets, and unique
    names (module extraction matches nodes by name; two nodes of one name
    would be silently confused -- torch's lint catches this in its DCE).
    A node of a subclass of ``fx.Node`` is a gap (:class:`TorchChanged`)."""
    names: set[str] = set()
    last: fx.Node | None = None
    kinds = KIND_OF_OP
    node_cls = fx.Node
    for i, node in enumerate(graph.nodes):
        if node.__class__ is not node_cls:
            # The readers (C and Python) know fx.Node's own layout only: a gap, torch decides.
            raise TorchChanged(NODE_READERS, TypeError(
                f"node {i} ({node.name!r}) is a {type(node).__qualname__}, a subclass of torch.fx.Node, "
                "whose layout fxcut's node readers do not know"))
        op = node.op
        if op not in kinds:
            raise ValueError(
                f"node {i} ({node.name!r}) has op {op!r}, which is not an fx op "
                f"(one of {', '.join(kinds)})"
            )
        if op == "call_function" and not callable(node.target):
            raise TypeError(
                f"node {i} ({node.name!r}) is a call_function whose target {node.target!r} is not callable"
            )
        if node.name in names:
            raise ValueError(f"node name {node.name!r} is used by two nodes of the graph")
        names.add(node.name)
        last = node
    if last is None:
        raise ValueError("joint_module's graph is empty: a joint graph has placeholders and an output node")
    if last.op != "output":
        raise ValueError(f"joint_module's graph does not end in an output node (its last node is {last.name!r})")


__all__ = ["check_nodes", "resolve_budget"]
