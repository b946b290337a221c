"""Compare fxcut's built forward/backward modules with torch's, field by field.

``signature(gm, joint)`` turns a module into plain data: whether it is a
lazy module and still lazy, its code (with its line-number map, prologue position and
globals), its graph's name table, every node
(name, op, target, arguments, type, users in order, meta keys in order and
values, whether its meta dict is the joint node's own dict), and the module
attributes AOT Autograd reads.  Tensors and other objects compare by
identity (both sides share the joint's fake tensors); plain data by value.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx as fx
from torch.fx._lazy_graph_module import _LazyGraphModule

_PLAIN = (str, int, float, bool, type(None), bytes, complex)


def _norm(v: Any, depth: int = 0) -> Any:
    if depth > 12:
        return ("deep", id(v))
    if isinstance(v, fx.Node):
        return ("node", v.name)
    if isinstance(v, _PLAIN):
        return v
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_norm(x, depth + 1) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple((k if isinstance(k, _PLAIN) else id(k), _norm(x, depth + 1))
                              for k, x in v.items()))
    if isinstance(v, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("obj", id(v))
    if isinstance(v, slice):
        return ("slice", _norm(v.start), _norm(v.stop), _norm(v.step))
    try:
        hash(v)
        if v == v:  # a value type (enums, dataclasses, dtypes, ops)
            return ("val", type(v).__name__, v)
    except Exception:
        pass
    return ("obj", id(v))


def node_signature(node: fx.Node, joint_meta: dict[str, dict[str, Any]]) -> tuple[Any, ...]:
    meta_alias = node.meta is joint_meta.get(node.name)
    return (
        node.name, node.op, _norm(node.target), _norm(node.args), _norm(node.kwargs), _norm(node.type),
        tuple(u.name for u in node.users), tuple(node.meta.keys()),
        tuple(_norm(v) for v in node.meta.values()), meta_alias,
    )


def signature(gm: fx.GraphModule, joint: fx.GraphModule) -> dict[str, Any]:
    joint_meta = {n.name: n.meta for n in joint.graph.nodes}
    lazy = isinstance(gm, _LazyGraphModule)
    pending = lazy and _LazyGraphModule._needs_recompile.__func__(type(gm))  # type: ignore[attr-defined]
    graph = gm.graph
    ns = graph._graph_namespace
    return {
        "class": (type(gm).__name__, lazy, pending, [c.__name__ for c in type(gm).__mro__[1:4]]),
        "nodes": [node_signature(n, joint_meta) for n in graph.nodes],
        "namespace": (sorted(ns._used_names), sorted(ns._base_count.items())),
        "graph": (type(graph._codegen).__name__, graph._tracer_cls, _norm(graph._tracer_extras),
                  _norm(graph._co_fields), graph._len),
        "module": (gm.training, _norm(gm.meta), _norm(dict(gm.named_buffers())),
                   _norm(dict(gm.named_parameters())), [k for k, _ in gm.named_children()],
                   gm._tracer_cls, _norm(getattr(gm, "_tracer_extras", None))),
        "code": gm.code,  # read first of these: it compiles a lazy module
        "generated": generated(gm),
        "spec": (str(getattr(gm, "_in_spec", None)), str(getattr(gm, "_out_spec", None))),
    }


def generated(gm: fx.GraphModule) -> tuple[Any, ...]:
    """What code generation left on a compiled module besides its code:
    the line-number map, the prologue position and the forward's globals."""
    forward_globals = type(gm).forward.__globals__
    return (getattr(gm, "_lineno_map", None), getattr(gm, "_prologue_start", None),
            sorted((k, id(v)) for k, v in forward_globals.items() if k != "__builtins__"))


def joint_signature(joint: fx.GraphModule) -> dict[str, Any]:
    return {
        "nodes": [node_signature(n, {}) for n in joint.graph.nodes],
        "code": joint.code,
        "generated": generated(joint),
    }


def compare(expected: dict[str, Any], got: dict[str, Any], what: str) -> None:
    for key in expected:
        e, g = expected[key], got[key]
        if key == "nodes":
            assert len(e) == len(g), f"{what}: {len(g)} nodes, torch has {len(e)}"
            for a, b in zip(e, g):
                assert a == b, f"{what}: node differs\n torch: {a}\n fxcut: {b}"
        else:
            assert e == g, f"{what}: {key} differs\n torch: {e}\n fxcut: {g}"


def both(make_joint: Callable[[], fx.GraphModule],
         partition: Callable[[fx.GraphModule], tuple[fx.GraphModule, fx.GraphModule]]) -> tuple[bool, bool]:
    """Partition two fresh joint modules with fxcut: once through fxcut's
    builder, once through torch's passes; assert the modules and the joint
    modules after the call are the same.  Returns (fast path taken, built)."""
    import fxcut.torchrules.extract as extract

    taken: list[bool] = []
    real = extract.build_modules

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        taken.append(out is not None)
        return out

    def forced_off(*args: Any, **kwargs: Any) -> Any:
        return None

    results = []
    for fn in (forced_off, spy):
        joint = make_joint()
        extract.build_modules = fn  # type: ignore[assignment]
        try:
            fw, bw = partition(joint)
        finally:
            extract.build_modules = real  # type: ignore[assignment]
        results.append((signature(fw, joint), signature(bw, joint), joint_signature(joint)))
    (tfw, tbw, tj), (ffw, fbw, fj) = results
    compare(tfw, ffw, "forward")
    compare(tbw, fbw, "backward")
    compare(tj, fj, "joint after the call")
    return bool(taken and taken[0]), bool(taken)
