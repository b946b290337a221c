"""Hand-built joint graphs shared by the edge-case tests (meta tensors only).

``mm_relu_joint``: x @ w -> relu (a forward output the backward needs) ->
grads.  ``conflicting_joint``: a MUST_RECOMPUTE getitem of a dropout whose
tuple value cannot be saved, so the value the backward needs can be neither
saved nor recomputed (torch raises, fxcut raises InfiniteCutError).
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx
from torch.utils.checkpoint import CheckpointPolicy

aten = torch.ops.aten


def meta(shape: tuple[int, ...] = (4, 4)) -> torch.Tensor:
    return torch.empty(shape, device="meta")


def _node(g: fx.Graph, target: object, args: tuple[object, ...], val: object) -> fx.Node:
    node = g.call_function(target, args)  # type: ignore[arg-type]
    node.meta["val"] = val
    return node


def _placeholders(g: fx.Graph, *names: str) -> list[fx.Node]:
    nodes = []
    for name in names:
        p = g.placeholder(name)
        p.meta["val"] = meta()
        nodes.append(p)
    return nodes


def mm_relu_joint(dead: bool = False, duplicate: bool = False) -> fx.GraphModule:
    """Nodes without the options: 0 primals_1, 1 primals_2, 2 tangents_1,
    3 mm_default, 4 relu_default, 5 threshold_backward_default,
    6 mm_default_1, 7 output.  ``dead``: a dead neg after the mm; ``duplicate``:
    a second relu of the mm (a CSE duplicate) that the backward reads."""
    g = fx.Graph()
    x, w, t = _placeholders(g, "primals_1", "primals_2", "tangents_1")
    mm = _node(g, aten.mm.default, (x, w), meta())
    if dead:
        _node(g, aten.neg.default, (mm,), meta())
    relu = _node(g, aten.relu.default, (mm,), meta())
    relu2 = _node(g, aten.relu.default, (mm,), meta()) if duplicate else relu
    grad = _node(g, aten.threshold_backward.default, (t, relu2, 0), meta())
    gw = _node(g, aten.mm.default, (x, grad), meta())
    g.output((relu, None, gw))
    return fx.GraphModule(torch.nn.Module(), g)


def conflicting_joint(dead: bool = False) -> fx.GraphModule:
    """Unsatisfiable recompute tags; ``dead``: plus a dead neg of the input."""
    g = fx.Graph()
    x, t = _placeholders(g, "primals_1", "tangents_1")
    if dead:
        _node(g, aten.neg.default, (x,), meta())
    drop = _node(g, aten.native_dropout.default, (x, 0.5, True), (meta(), meta()))
    kept = _node(g, operator.getitem, (drop, 0), meta())
    kept.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
    out = _node(g, aten.relu.default, (kept,), meta())
    grad = _node(g, aten.mul.Tensor, (t, kept), meta())
    g.output((out, grad))
    return fx.GraphModule(torch.nn.Module(), g)
